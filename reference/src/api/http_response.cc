// HTTP/1.1 responses: written by sandboxd, parsed by its client (remote_runtime.cc).
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "api/http_message.h"

namespace sbx::api {
namespace {

constexpr size_t kMaxResponseHead = 64 * 1024;

std::string HttpDate() {
  char buf[64];
  time_t now = time(nullptr);
  struct tm tm {};
  gmtime_r(&now, &tm);
  size_t n = strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return std::string(buf, n);
}

bool HasHeader(const std::vector<HttpHeader>& headers, std::string_view lower) {
  return std::any_of(headers.begin(), headers.end(), [&](const HttpHeader& h) {
    if (h.name.size() != lower.size()) return false;
    for (size_t i = 0; i < lower.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(h.name[i])) != lower[i]) return false;
    }
    return true;
  });
}

ResponseOutcome ResponseError(std::string message) {
  ResponseOutcome o;
  o.kind = ResponseOutcome::Kind::kError;
  o.message = std::move(message);
  return o;
}

}  // namespace

std::string_view ReasonPhrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 417:
      return "Expectation Failed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

std::string SerializeResponse(const HttpResponse& r, bool keep_alive) {
  std::string out = fmt::format("HTTP/1.1 {} {}\r\n", r.status, ReasonPhrase(r.status));
  out += fmt::format("Date: {}\r\nServer: sandboxd/0.1\r\n", HttpDate());
  if (!r.body.empty() || r.status != 204) {
    out += fmt::format("Content-Type: {}\r\nContent-Length: {}\r\n", r.content_type, r.body.size());
  }
  out += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  if (!HasHeader(r.headers, "cache-control")) out += "Cache-Control: no-store\r\n";
  out += "X-Content-Type-Options: nosniff\r\n";
  for (const auto& h : r.headers) out += fmt::format("{}: {}\r\n", h.name, h.value);
  out += "\r\n";
  out += r.body;
  return out;
}

const std::string* ParsedResponse::Header(std::string_view lower_name) const {
  for (const auto& h : headers) {
    if (h.name == lower_name) return &h.value;
  }
  return nullptr;
}

ResponseOutcome ParseResponse(std::string_view buf, bool eof, size_t max_body_bytes) {
  while (true) {
    size_t end = buf.substr(0, std::min(buf.size(), kMaxResponseHead)).find("\r\n\r\n");
    if (end == std::string_view::npos) {
      if (buf.size() >= kMaxResponseHead) return ResponseError("response head too large");
      if (eof)
        return ResponseError(buf.empty() ? "connection closed without a response"
                                         : "connection closed in the response head");
      return {};
    }
    std::string_view head = buf.substr(0, end + 2);
    size_t head_len = end + 4;
    ParsedResponse resp;
    size_t eol = head.find("\r\n");
    std::string_view status_line = head.substr(0, eol);
    // HTTP/1.x SP 3DIGIT SP reason
    if (status_line.size() < 12 || status_line.substr(0, 7) != "HTTP/1." || status_line[8] != ' ') {
      return ResponseError("malformed status line");
    }
    int status = 0;
    auto [p, ec] = std::from_chars(status_line.data() + 9, status_line.data() + 12, status);
    if (ec != std::errc() || p != status_line.data() + 12 || status < 100 || status > 599) {
      return ResponseError("malformed status code");
    }
    resp.status = status;
    resp.keep_alive = status_line[7] == '1';
    bool has_length = false;
    size_t length = 0;
    size_t pos = eol + 2;
    while (pos < head.size()) {
      size_t e = head.find("\r\n", pos);
      std::string_view line = head.substr(pos, e - pos);
      pos = e + 2;
      size_t colon = line.find(':');
      if (colon == std::string_view::npos || colon == 0)
        return ResponseError("malformed header field");
      std::string name(line.substr(0, colon));
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      std::string_view value = line.substr(colon + 1);
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
        value.remove_prefix(1);
      while (!value.empty() && (value.back() == ' ' || value.back() == '\t'))
        value.remove_suffix(1);
      if (name == "content-length") {
        auto [q, ec2] = std::from_chars(value.data(), value.data() + value.size(), length);
        if (value.empty() || ec2 != std::errc() || q != value.data() + value.size()) {
          return ResponseError("malformed Content-Length");
        }
        has_length = true;
      } else if (name == "transfer-encoding") {
        return ResponseError("chunked responses are not supported");
      } else if (name == "connection") {
        std::string v(value);
        std::transform(v.begin(), v.end(), v.begin(),
                       [](unsigned char c) { return std::tolower(c); });
        if (v.find("close") != std::string::npos) resp.keep_alive = false;
      }
      resp.headers.push_back({std::move(name), std::string(value)});
    }
    if (status >= 100 && status < 200) {  // interim (100 Continue): skip it
      buf.remove_prefix(head_len);
      continue;
    }
    if (has_length) {
      if (length > max_body_bytes)
        return ResponseError(fmt::format("response body of {} bytes too large", length));
      if (buf.size() - head_len < length) {
        if (eof) return ResponseError("connection closed in the response body");
        return {};
      }
      resp.body = std::string(buf.substr(head_len, length));
    } else {
      if (!eof) {
        if (buf.size() - head_len > max_body_bytes) return ResponseError("response body too large");
        return {};
      }
      resp.body = std::string(buf.substr(head_len));
      resp.keep_alive = false;
    }
    ResponseOutcome o;
    o.kind = ResponseOutcome::Kind::kComplete;
    o.response = std::move(resp);
    return o;
  }
}

}  // namespace sbx::api
