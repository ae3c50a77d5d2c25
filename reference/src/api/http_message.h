// HTTP/1.1 messages of the Execution API (PROD-1): a strict request parser and the response
// writer of sandboxd (the client and its response parser: sbx/http_client.h).
//
// The parser accepts a deliberately small subset of RFC 9112, and rejects the rest:
//   - CRLF line endings only (a bare CR or LF is 400), no obsolete line folding (400);
//   - origin-form targets ("/path?query") of visible ASCII, HTTP/1.0 or HTTP/1.1 (other
//     versions 505);
//   - the head (request line + headers) at most ParseLimits::max_header_bytes (431 beyond),
//     at most max_headers fields (431);
//   - a body only with Content-Length (no Content-Length = no body, RFC 9112 6.3; any
//     Transfer-Encoding: 411, since chunked framing is refused), at most max_body_bytes (413);
//     duplicate Content-Length, Host or Authorization fields are 400; HTTP/1.1 requires Host.
// It never reads past the data it is given and never allocates more than the limits allow
// (plus the body), whatever the input: http_request_fuzz.cc holds it to that.
//
// Thread-safety: the functions are pure; a RequestReader belongs to one connection.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sbx::api {

struct HttpHeader {
  std::string name;   // lower case on parsed messages
  std::string value;  // without surrounding whitespace
};

struct HttpRequest {
  std::string method;  // upper case letters only
  std::string target;  // as sent, e.g. "/v1/sandboxes?x=1"
  std::string path;    // target up to '?'
  std::string query;   // after '?', without it ("" if none)
  int version_minor = 1;
  std::vector<HttpHeader> headers;
  std::string body;
  bool keep_alive = true;        // from the version and the Connection field
  bool expect_continue = false;  // "Expect: 100-continue"

  // The first field of that (lower case) name, or nullptr.
  const std::string* Header(std::string_view lower_name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<HttpHeader> headers;  // extra fields (e.g. WWW-Authenticate, Allow, Location)
  std::string body;
  // For the access log only; never sent. The authenticated tenant, or "-".
  std::string log_tenant = "-";
};

struct ParseLimits {
  size_t max_header_bytes = 16 * 1024;      // request line + fields + the empty line
  size_t max_body_bytes = 8 * 1024 * 1024;  // Content-Length
  size_t max_headers = 100;
};

struct ParseOutcome {
  enum class Kind { kIncomplete, kComplete, kError };
  Kind kind = Kind::kIncomplete;
  HttpRequest request;  // kComplete
  size_t consumed = 0;  // kComplete: bytes of the buffer this request used
  int status = 0;       // kError: the HTTP status to answer (400, 411, 413, 417, 431, 505);
                        // request.method/path are set when the request line was valid
  std::string message;  // kError: why, for the error body
};

// Parses the first request in `buf`. Stateless: call again with more data on kIncomplete.
ParseOutcome ParseRequest(std::string_view buf, const ParseLimits& limits = {});

// The same parser, incremental: each byte is looked at a bounded number of times however the
// data is split (a slow client cannot make the server quadratic). One per connection; after
// kComplete, pipelined bytes stay buffered for the next Next(). After kError, discard it.
class RequestReader {
 public:
  explicit RequestReader(ParseLimits limits = {}) : limits_(limits) {}

  void Append(std::string_view data) { buf_.append(data); }
  ParseOutcome Next();

  // True once the head of a request with "Expect: 100-continue" is parsed and its body has not
  // fully arrived; the caller answers "100 Continue" and calls MarkContinueSent().
  bool WantsContinue() const;
  void MarkContinueSent() { continue_sent_ = true; }
  // The parsed head of the request whose body is still arriving (body empty), or nullptr.
  const HttpRequest* PendingHead() const { return head_ ? &head_->request : nullptr; }
  size_t buffered() const { return buf_.size(); }

 private:
  struct Head {
    HttpRequest request;
    size_t head_len = 0;
    size_t content_length = 0;
  };

  ParseLimits limits_;
  std::string buf_;
  size_t scanned_ = 0;  // bytes of buf_ already checked for line breaks
  bool request_line_checked_ = false;
  std::optional<Head> head_;
  bool continue_sent_ = false;
};

// "HTTP/1.1 <status> <reason>" + Date, Server, Content-Type, Content-Length, Connection,
// Cache-Control: no-store and the extra fields, then the body.
std::string SerializeResponse(const HttpResponse& response, bool keep_alive);

// "Not Found" for 404, ...; "Unknown" for codes this server never sends.
std::string_view ReasonPhrase(int status);

// The client's response parser is sbx::http::ParseResponse (sbx/http_client.h).

}  // namespace sbx::api
