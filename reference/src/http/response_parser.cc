// sbx::http::ParseResponse: the client's strict HTTP/1.1 response parser (sbx/http_client.h).
#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "sbx/ascii.h"
#include "sbx/http_client.h"

namespace sbx::http {
namespace {

constexpr size_t kMaxResponseHead = 64 * 1024;
constexpr size_t kMaxChunkLine = 1024;  // size, extensions, CRLF

ResponseOutcome Error(std::string message) {
  ResponseOutcome o;
  o.kind = ResponseOutcome::Kind::kError;
  o.message = std::move(message);
  return o;
}


std::string_view TrimBlanks(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

// Decodes a chunked body from the start of `in` (RFC 9112 7.1; trailer fields are read and
// dropped). kIncomplete until the last chunk and the trailer's empty line are there.
ResponseOutcome DecodeChunked(std::string_view in, bool eof, size_t max_body, std::string* out) {
  size_t pos = 0;
  auto incomplete = [&](const char* where) {
    return eof ? Error(fmt::format("connection closed in the chunked body ({})", where))
               : ResponseOutcome{};
  };
  while (true) {
    size_t eol = in.find("\r\n", pos);
    if (eol == std::string_view::npos) {
      if (in.size() - pos > kMaxChunkLine) return Error("malformed chunk size line");
      return incomplete("chunk size");
    }
    std::string_view line = in.substr(pos, eol - pos);
    if (line.size() > kMaxChunkLine) return Error("malformed chunk size line");
    std::string_view digits = line.substr(0, line.find(';'));
    digits = TrimBlanks(digits);
    size_t size = 0;
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), size, 16);
    if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size()) {
      return Error("malformed chunk size");
    }
    pos = eol + 2;
    if (size == 0) {
      // Trailer fields, then the empty line.
      while (true) {
        size_t e = in.find("\r\n", pos);
        if (e == std::string_view::npos) {
          if (in.size() - pos > kMaxResponseHead) return Error("chunked trailer too large");
          return incomplete("trailer");
        }
        if (e == pos) {
          ResponseOutcome o;
          o.kind = ResponseOutcome::Kind::kComplete;
          return o;
        }
        pos = e + 2;
      }
    }
    if (size > max_body || out->size() > max_body - size) {
      return Error(fmt::format("chunked response body over {} bytes", max_body));
    }
    if (in.size() - pos < size + 2) return incomplete("chunk data");
    if (in.substr(pos + size, 2) != "\r\n") return Error("chunk data not followed by CRLF");
    out->append(in.substr(pos, size));
    pos += size + 2;
  }
}

}  // namespace

const std::string* Response::Header(std::string_view lower_name) const {
  for (const auto& h : headers) {
    if (h.name == lower_name) return &h.value;
  }
  return nullptr;
}

ResponseOutcome ParseResponse(std::string_view buf, bool eof, size_t max_body_bytes) {
  while (true) {
    size_t end = buf.substr(0, std::min(buf.size(), kMaxResponseHead)).find("\r\n\r\n");
    if (end == std::string_view::npos) {
      if (buf.size() >= kMaxResponseHead) return Error("response head too large");
      if (eof)
        return Error(buf.empty() ? "connection closed without a response"
                                 : "connection closed in the response head");
      return {};
    }
    std::string_view head = buf.substr(0, end + 2);
    size_t head_len = end + 4;
    Response resp;
    size_t eol = head.find("\r\n");
    std::string_view status_line = head.substr(0, eol);
    // HTTP/1.x SP 3DIGIT [SP reason]
    if (status_line.size() < 12 || status_line.substr(0, 7) != "HTTP/1." || status_line[8] != ' ') {
      return Error("malformed status line");
    }
    int status = 0;
    auto [p, ec] = std::from_chars(status_line.data() + 9, status_line.data() + 12, status);
    if (ec != std::errc() || p != status_line.data() + 12 || status < 100 || status > 599) {
      return Error("malformed status code");
    }
    resp.status = status;
    resp.reason = std::string(TrimBlanks(status_line.substr(12)));
    resp.keep_alive = status_line[7] == '1';
    bool has_length = false, chunked = false;
    size_t length = 0;
    size_t pos = eol + 2;
    while (pos < head.size()) {
      size_t e = head.find("\r\n", pos);
      std::string_view line = head.substr(pos, e - pos);
      pos = e + 2;
      size_t colon = line.find(':');
      if (colon == std::string_view::npos || colon == 0) return Error("malformed header field");
      std::string name = AsciiLower(line.substr(0, colon));
      std::string_view value = TrimBlanks(line.substr(colon + 1));
      if (name == "content-length") {
        size_t n = 0;
        auto [q, ec2] = std::from_chars(value.data(), value.data() + value.size(), n);
        if (value.empty() || ec2 != std::errc() || q != value.data() + value.size() ||
            (has_length && n != length)) {
          return Error("malformed Content-Length");
        }
        length = n;
        has_length = true;
      } else if (name == "transfer-encoding") {
        // "chunked" alone is a framing this client reads; gzip or a list of codings is refused.
        if (!EqualsIgnoreCase(value, "chunked")) {
          return Error(fmt::format("transfer coding \"{}\" is not supported", value.substr(0, 40)));
        }
        chunked = true;
      } else if (name == "connection") {
        if (AsciiLower(value).find("close") != std::string::npos) resp.keep_alive = false;
      }
      resp.headers.push_back({std::move(name), std::string(value)});
    }
    if (status >= 100 && status < 200) {  // interim (100 Continue): skip it
      buf.remove_prefix(head_len);
      continue;
    }
    std::string_view rest = buf.substr(head_len);
    if (chunked) {
      // RFC 9112 6.3: Transfer-Encoding overrides Content-Length.
      ResponseOutcome o = DecodeChunked(rest, eof, max_body_bytes, &resp.body);
      if (o.kind != ResponseOutcome::Kind::kComplete) return o;
    } else if (has_length) {
      if (length > max_body_bytes)
        return Error(fmt::format("response body of {} bytes too large", length));
      if (rest.size() < length) {
        if (eof) return Error("connection closed in the response body");
        return {};
      }
      resp.body = std::string(rest.substr(0, length));
    } else {
      if (rest.size() > max_body_bytes) return Error("response body too large");
      if (!eof) return {};
      resp.body = std::string(rest);
      resp.keep_alive = false;
    }
    ResponseOutcome o;
    o.kind = ResponseOutcome::Kind::kComplete;
    o.response = std::move(resp);
    return o;
  }
}

}  // namespace sbx::http
