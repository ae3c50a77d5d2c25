// The strict HTTP/1.1 request parser of sandboxd (see http_message.h for what it accepts).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "api/http_message.h"
#include "sbx/ascii.h"

namespace sbx::api {
namespace {

constexpr std::string_view kHeadEnd = "\r\n\r\n";
constexpr size_t kMaxMethodLen = 20;

// Field values: HTAB, SP, visible ASCII and obs-text; never NUL, CR, LF, other controls or DEL.
bool IsFieldValueChar(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

ParseOutcome Error(int status, std::string message) {
  ParseOutcome o;
  o.kind = ParseOutcome::Kind::kError;
  o.status = status;
  o.message = std::move(message);
  return o;
}

// Finds a CR not followed by LF or an LF not preceded by CR in buf[from, end). A CR as the last
// byte of buf is not (yet) an error: its LF may come with the next read.
std::optional<ParseOutcome> CheckLineBreaks(std::string_view buf, size_t from, size_t end) {
  for (size_t i = from; i < end; ++i) {
    char c = buf[i];
    if (c == '\n' && (i == 0 || buf[i - 1] != '\r'))
      return Error(400, "bare LF in the request head");
    if (c == '\r' && i + 1 < buf.size() && buf[i + 1] != '\n') {
      return Error(400, "bare CR in the request head");
    }
  }
  return std::nullopt;
}

// method SP origin-form SP HTTP/1.x
std::optional<ParseOutcome> ParseRequestLine(std::string_view line, HttpRequest* req) {
  size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos) return Error(400, "malformed request line");
  std::string_view method = line.substr(0, sp1);
  if (method.empty() || method.size() > kMaxMethodLen ||
      !std::all_of(method.begin(), method.end(), [](char c) { return c >= 'A' && c <= 'Z'; })) {
    return Error(400, "malformed request method");
  }
  std::string_view rest = line.substr(sp1 + 1);
  size_t sp2 = rest.find(' ');
  if (sp2 == std::string_view::npos) return Error(400, "malformed request line");
  std::string_view target = rest.substr(0, sp2);
  std::string_view version = rest.substr(sp2 + 1);
  if (target.empty() || target[0] != '/') {
    return Error(400, "request target must be an absolute path (origin-form)");
  }
  for (unsigned char c : target) {
    if (c < 0x21 || c > 0x7e || c == '#')
      return Error(400, "invalid character in the request target");
  }
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" ||
      !std::isdigit(static_cast<unsigned char>(version[5])) || version[6] != '.' ||
      !std::isdigit(static_cast<unsigned char>(version[7]))) {
    return Error(400, "malformed HTTP version");
  }
  if (version[5] != '1' || (version[7] != '0' && version[7] != '1')) {
    return Error(505, fmt::format("HTTP version {} is not supported (1.0 and 1.1 are)", version));
  }
  req->method = std::string(method);
  req->target = std::string(target);
  size_t q = target.find('?');
  req->path = std::string(target.substr(0, q));
  req->query = q == std::string_view::npos ? "" : std::string(target.substr(q + 1));
  req->version_minor = version[7] - '0';
  return std::nullopt;
}

struct HeadParse {
  std::optional<ParseOutcome> error;
  HttpRequest request;
  size_t content_length = 0;
};

// `head` is the request line and fields, ending with the empty line (CRLF CRLF).
HeadParse ParseHead(std::string_view head, const ParseLimits& limits) {
  HeadParse out;
  if (auto e = CheckLineBreaks(head, 0, head.size())) {
    out.error = std::move(e);
    return out;
  }
  HttpRequest& req = out.request;
  size_t eol = head.find("\r\n");
  if (auto e = ParseRequestLine(head.substr(0, eol), &req)) {
    out.error = std::move(e);
    return out;
  }
  int n_content_length = 0, n_host = 0, n_authorization = 0;
  bool transfer_encoding = false, has_close = false, has_keep_alive = false;
  std::string_view expect;
  bool has_expect = false;
  size_t pos = eol + 2;
  while (true) {
    size_t end = head.find("\r\n", pos);
    std::string_view line = head.substr(pos, end - pos);
    pos = end + 2;
    if (line.empty()) break;  // the empty line that ends the head
    if (line[0] == ' ' || line[0] == '\t') {
      out.error = Error(400, "obsolete line folding is not accepted");
      return out;
    }
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      out.error = Error(400, "malformed header field");
      return out;
    }
    std::string_view name = line.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), IsHttpTokenChar)) {
      out.error = Error(400, "invalid character in a header field name");
      return out;
    }
    std::string_view value = Trim(line.substr(colon + 1));
    if (!std::all_of(value.begin(), value.end(),
                     [](char c) { return IsFieldValueChar(static_cast<unsigned char>(c)); })) {
      out.error = Error(400, "invalid character in a header field value");
      return out;
    }
    if (req.headers.size() >= limits.max_headers) {
      out.error = Error(431, fmt::format("more than {} header fields", limits.max_headers));
      return out;
    }
    std::string lname = AsciiLower(name);
    if (lname == "content-length") {
      ++n_content_length;
      size_t n = 0;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (value.empty() || value.size() > 18 || ec != std::errc() ||
          p != value.data() + value.size() ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        out.error = Error(400, "malformed Content-Length");
        return out;
      }
      out.content_length = n;
    } else if (lname == "transfer-encoding") {
      transfer_encoding = true;
    } else if (lname == "host") {
      ++n_host;
    } else if (lname == "authorization") {
      ++n_authorization;
    } else if (lname == "connection") {
      std::string_view list = value;
      while (!list.empty()) {
        size_t comma = list.find(',');
        std::string_view tok = Trim(list.substr(0, comma));
        if (EqualsIgnoreCase(tok, "close")) has_close = true;
        if (EqualsIgnoreCase(tok, "keep-alive")) has_keep_alive = true;
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
      }
    } else if (lname == "expect") {
      has_expect = true;
      expect = value;
    }
    req.headers.push_back({std::move(lname), std::string(value)});
  }
  if (transfer_encoding) {
    out.error = Error(
        411, "Transfer-Encoding (chunked) is not accepted: send the body with Content-Length");
    return out;
  }
  if (n_content_length > 1) {
    out.error = Error(400, "more than one Content-Length field");
    return out;
  }
  if (n_host > 1 || (req.version_minor == 1 && n_host == 0)) {
    out.error =
        Error(400, n_host > 1 ? "more than one Host field" : "HTTP/1.1 request without Host");
    return out;
  }
  if (n_authorization > 1) {
    out.error = Error(400, "more than one Authorization field");
    return out;
  }
  if (out.content_length > limits.max_body_bytes) {
    out.error = Error(413, fmt::format("body of {} bytes is larger than the limit of {} bytes",
                                       out.content_length, limits.max_body_bytes));
    return out;
  }
  if (has_expect) {
    if (!EqualsIgnoreCase(expect, "100-continue")) {
      out.error = Error(417, "only 'Expect: 100-continue' is understood");
      return out;
    }
    req.expect_continue = req.version_minor == 1;
  }
  req.keep_alive = req.version_minor == 1 ? !has_close : (has_keep_alive && !has_close);
  return out;
}

// An error answer keeps the request line, when it was valid, for the access log.
ParseOutcome WithRequestLine(HeadParse hp) {
  ParseOutcome o = std::move(*hp.error);
  o.request.method = std::move(hp.request.method);
  o.request.path = std::move(hp.request.path);
  return o;
}

// Checks what can be checked before the head is complete, so garbage is refused at once and
// not after max_header_bytes or a timeout. `from` is where the unchecked bytes begin.
std::optional<ParseOutcome> EarlyCheck(std::string_view window, size_t from,
                                       bool* request_line_checked) {
  if (auto e = CheckLineBreaks(window, from, window.size())) return e;
  if (!*request_line_checked) {
    size_t eol = window.find("\r\n");
    if (eol != std::string_view::npos) {
      *request_line_checked = true;
      HttpRequest scratch;
      if (auto e = ParseRequestLine(window.substr(0, eol), &scratch)) return e;
    } else {
      // Not even a method yet: a byte that cannot start one is an error now.
      size_t i = 0;
      while (i < window.size() && window[i] >= 'A' && window[i] <= 'Z' && i < kMaxMethodLen) ++i;
      if (i < window.size() && window[i] != ' ') return Error(400, "malformed request method");
    }
  }
  return std::nullopt;
}

}  // namespace

const std::string* HttpRequest::Header(std::string_view lower_name) const {
  for (const auto& h : headers) {
    if (h.name == lower_name) return &h.value;
  }
  return nullptr;
}

ParseOutcome ParseRequest(std::string_view buf, const ParseLimits& limits) {
  std::string_view window = buf.substr(0, std::min(buf.size(), limits.max_header_bytes));
  size_t end = window.find(kHeadEnd);
  if (end == std::string_view::npos) {
    bool checked = false;
    if (auto e = EarlyCheck(window, 0, &checked)) return std::move(*e);
    if (buf.size() >= limits.max_header_bytes) {
      return Error(431, fmt::format("request head larger than {} bytes", limits.max_header_bytes));
    }
    return {};
  }
  size_t head_len = end + kHeadEnd.size();
  HeadParse hp = ParseHead(buf.substr(0, head_len), limits);
  if (hp.error) return WithRequestLine(std::move(hp));
  if (buf.size() - head_len < hp.content_length) return {};
  ParseOutcome o;
  o.kind = ParseOutcome::Kind::kComplete;
  o.request = std::move(hp.request);
  o.request.body = std::string(buf.substr(head_len, hp.content_length));
  o.consumed = head_len + hp.content_length;
  return o;
}

ParseOutcome RequestReader::Next() {
  if (!head_) {
    std::string_view all(buf_);
    std::string_view window = all.substr(0, std::min(all.size(), limits_.max_header_bytes));
    // A terminator may straddle the previous read: look back 3 bytes.
    size_t search_from = scanned_ >= 3 ? scanned_ - 3 : 0;
    size_t end = window.find(kHeadEnd, search_from);
    if (end == std::string_view::npos) {
      // Re-check the last old byte too: a CR at the end of the previous read needs its LF.
      size_t check_from = scanned_ > 0 ? scanned_ - 1 : 0;
      if (auto e = EarlyCheck(window, check_from, &request_line_checked_)) return std::move(*e);
      scanned_ = window.size();
      if (all.size() >= limits_.max_header_bytes) {
        return Error(431,
                     fmt::format("request head larger than {} bytes", limits_.max_header_bytes));
      }
      return {};
    }
    size_t head_len = end + kHeadEnd.size();
    HeadParse hp = ParseHead(all.substr(0, head_len), limits_);
    if (hp.error) return WithRequestLine(std::move(hp));
    head_ = Head{std::move(hp.request), head_len, hp.content_length};
    continue_sent_ = false;
  }
  if (buf_.size() - head_->head_len < head_->content_length) return {};
  ParseOutcome o;
  o.kind = ParseOutcome::Kind::kComplete;
  o.request = std::move(head_->request);
  o.request.body = buf_.substr(head_->head_len, head_->content_length);
  o.consumed = head_->head_len + head_->content_length;
  buf_.erase(0, o.consumed);
  head_.reset();
  scanned_ = 0;
  request_line_checked_ = false;
  return o;
}

bool RequestReader::WantsContinue() const {
  return head_ && head_->request.expect_continue && !continue_sent_ &&
         buf_.size() - head_->head_len < head_->content_length;
}

}  // namespace sbx::api
