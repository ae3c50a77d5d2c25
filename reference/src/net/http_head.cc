#include "net/http_head.h"

#include <charconv>

#include "net/host_name.h"
#include "sbx/ascii.h"

namespace sbx::net {
namespace {

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

HttpHeadStatus Fail(std::string* error, const char* why) {
  if (error) *error = why;
  return HttpHeadStatus::kMalformed;
}

// Host = uri-host [ ":" port ]. Fills host, host_port, host_is_ip_literal.
bool ParseHostField(std::string_view v, HttpRequestHead* out) {
  std::string_view host = v, port;
  if (!v.empty() && v.front() == '[') {
    size_t close = v.find(']');
    if (close == std::string_view::npos) return false;
    host = v.substr(1, close - 1);
    std::string_view rest = v.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      port = rest.substr(1);
      if (port.empty()) return false;
    }
    out->host_is_ip_literal = true;
  } else {
    size_t colon = v.find(':');
    if (colon != std::string_view::npos) {
      host = v.substr(0, colon);
      port = v.substr(colon + 1);
      if (port.empty()) return false;
    }
    for (char c : host) {
      // reg-name characters only; no userinfo ('@'), no path, no spaces.
      bool ok = IsHttpTokenChar(c) && c != '%' && c != '|' && c != '`' && c != '^';
      if (!ok) return false;
    }
    out->host_is_ip_literal = LooksLikeIpLiteral(host);
  }
  if (host.empty()) return false;
  if (!port.empty()) {
    int p = 0;
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (ec != std::errc() || ptr != port.data() + port.size() || p < 1 || p > 65535) return false;
    out->host_port = p;
  }
  out->host = AsciiLower(host);
  return true;
}

}  // namespace

HttpHeadStatus ParseHttpRequestHead(std::string_view data, HttpRequestHead* out,
                                    std::string* error) {
  // Classify early, byte by byte, so that non-HTTP traffic is rejected without waiting:
  // method = 1*tchar (we accept upper-case letters only, as every real method is), then SP.
  size_t i = 0;
  for (; i < data.size() && i < 20; ++i) {
    char c = data[i];
    if (c == ' ') break;
    if (!(c >= 'A' && c <= 'Z')) return HttpHeadStatus::kNotHttp;
  }
  if (i == data.size()) return i < 20 ? HttpHeadStatus::kNeedMore : HttpHeadStatus::kNotHttp;
  if (i == 0 || data[i] != ' ') return HttpHeadStatus::kNotHttp;

  size_t end = data.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    if (data.size() >= kMaxHttpHeadBytes) return Fail(error, "request head too large");
    // A bare LF line end would never produce CRLF CRLF: refuse it as soon as it shows.
    size_t lf = data.find('\n');
    if (lf != std::string_view::npos && (lf == 0 || data[lf - 1] != '\r')) {
      return Fail(error, "bare LF in request head");
    }
    return HttpHeadStatus::kNeedMore;
  }
  if (end + 4 > kMaxHttpHeadBytes) return Fail(error, "request head too large");

  HttpRequestHead h;
  h.head_bytes = end + 4;
  std::string_view head = data.substr(0, end + 2);  // each line ends in CRLF

  // Request line: method SP request-target SP HTTP-version CRLF.
  size_t eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  size_t sp1 = line.find(' ');
  size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return Fail(error, "bad request line");
  }
  h.method = std::string(line.substr(0, sp1));
  h.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  h.version = std::string(line.substr(sp2 + 1));
  if (h.target.empty()) return Fail(error, "empty request target");
  for (char c : h.target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      return Fail(error, "control byte in target");
  }
  if (h.version != "HTTP/1.1" && h.version != "HTTP/1.0")
    return Fail(error, "unsupported HTTP version");

  // Header fields: field-name ":" OWS field-value OWS CRLF.
  size_t pos = eol + 2;
  while (pos < head.size()) {
    size_t next = head.find("\r\n", pos);
    std::string_view fl = head.substr(pos, next - pos);
    pos = next + 2;
    if (fl.empty()) return Fail(error, "empty line inside head");
    if (fl.front() == ' ' || fl.front() == '\t') return Fail(error, "obsolete line folding");
    size_t colon = fl.find(':');
    if (colon == std::string_view::npos || colon == 0) return Fail(error, "field without name");
    std::string_view name = fl.substr(0, colon);
    for (char c : name) {
      if (!IsHttpTokenChar(c)) return Fail(error, "bad character in field name");
    }
    std::string_view value = TrimOws(fl.substr(colon + 1));
    for (char c : value) {
      unsigned char u = static_cast<unsigned char>(c);
      if ((u < 0x20 && c != '\t') || u == 0x7f) return Fail(error, "control byte in field value");
    }
    if (h.fields.size() >= 100) return Fail(error, "too many header fields");
    h.fields.emplace_back(std::string(name), std::string(value));

    if (EqualsIgnoreCase(name, "host")) {
      if (++h.host_fields > 1) return Fail(error, "more than one Host field");
      if (!ParseHostField(value, &h)) return Fail(error, "bad Host field");
    } else if (EqualsIgnoreCase(name, "content-length")) {
      if (++h.content_length_fields > 1) return Fail(error, "more than one Content-Length field");
      uint64_t n = 0;
      auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (value.empty() || ec != std::errc() || ptr != value.data() + value.size()) {
        return Fail(error, "bad Content-Length");
      }
      h.content_length = n;
    } else if (EqualsIgnoreCase(name, "transfer-encoding")) {
      h.has_transfer_encoding = true;
    }
  }
  *out = std::move(h);
  return HttpHeadStatus::kComplete;
}

std::string UpstreamHead(const HttpRequestHead& head) {
  std::string s;
  s.reserve(head.head_bytes + 32);
  s += head.method;
  s += ' ';
  s += head.target;
  s += ' ';
  s += head.version;
  s += "\r\n";
  for (const auto& [name, value] : head.fields) {
    if (EqualsIgnoreCase(name, "connection") || EqualsIgnoreCase(name, "keep-alive") ||
        EqualsIgnoreCase(name, "proxy-connection") || EqualsIgnoreCase(name, "proxy-authorization") ||
        EqualsIgnoreCase(name, "te") || EqualsIgnoreCase(name, "upgrade")) {
      continue;
    }
    s += name;
    s += ": ";
    s += value;
    s += "\r\n";
  }
  s += "Connection: close\r\n\r\n";
  return s;
}

}  // namespace sbx::net
