// HTTP/1.1 responses as sandboxd writes them (the client parses them: reference/src/http/).
#include <fmt/format.h>
#include <time.h>

#include "api/http_message.h"
#include "sbx/ascii.h"

namespace sbx::api {
namespace {

std::string HttpDate() {
  char buf[64];
  time_t now = time(nullptr);
  struct tm tm {};
  gmtime_r(&now, &tm);
  size_t n = strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return std::string(buf, n);
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
  if (!HasFieldNamed(r.headers, "cache-control")) out += "Cache-Control: no-store\r\n";
  out += "X-Content-Type-Options: nosniff\r\n";
  for (const auto& h : r.headers) out += fmt::format("{}: {}\r\n", h.name, h.value);
  out += "\r\n";
  out += r.body;
  return out;
}

}  // namespace sbx::api
