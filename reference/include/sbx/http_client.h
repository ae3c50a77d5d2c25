// The one HTTP/1.1 client of the project (issue 15): sandboxctl --server (api/remote_runtime.cc)
// and sandcheck's http driver (conformance/src/drivers/http_driver.cc) both call Call().
//
// One request per connection (Connection: close: a stale keep-alive connection can never make
// a POST run twice), over a unix socket or TCP (IP literals or host names, getaddrinfo), with
// ONE deadline covering connect, send and receive. It writes and reads together, so an answer
// the server sends before it has read the body (401, 413) is read, not lost to EPIPE; it never
// raises SIGPIPE. Bodies: Content-Length, chunked, or read until the server closes. No TLS.
// Why not cpp-httplib's client: docs/dependencies.md.
//
// Thread-safety: the functions are pure (Call only touches its own socket).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "sbx/status.h"

namespace sbx::http {

struct Field {  // one header field
  std::string name;   // lower case in a parsed response
  std::string value;  // without surrounding whitespace
};

struct Endpoint {
  bool unix_socket = false;
  std::string socket_path;  // unix
  std::string host;         // TCP: a name or an IP literal (no brackets)
  int port = 80;
  std::string base_path;  // prefix of every request path: "" or "/api" (no trailing slash)
  std::string ToString() const;  // "unix:/path", "http://host:port/base", "http://[::1]:port"
};

// "unix:/path" (or "unix:///path"), "http://HOST[:PORT][/base]", "http://[v6]:PORT".
// kInvalidArgument otherwise, with what was expected.
StatusOr<Endpoint> ParseEndpoint(std::string_view url);

struct Request {
  std::string method = "GET";
  std::string path = "/";     // after the endpoint's base path
  std::vector<Field> headers;  // sent as given; Host, Connection and Content-Length are added
  std::string body;             // Content-Length is sent when non-empty or for POST and PUT
};

struct Response {
  int status = 0;
  std::string reason;
  std::vector<Field> headers;  // names lower case
  std::string body;             // chunked framing removed
  bool keep_alive = true;       // what the server said (Call never reuses a connection)
  // The first field of that (lower case) name, or nullptr.
  const std::string* Header(std::string_view lower_name) const;
};

struct CallOptions {
  double timeout_s = 30;                 // the whole call
  size_t max_body_bytes = 64 << 20;      // a larger answer is kInternal
  std::function<bool()> interrupted;     // polled at least every 250 ms; true ends the call
  std::string who = "the server";        // for messages: "sandboxd", "the target", ...
};

// Sends one request, reads the whole answer. HTTP error statuses are NOT errors (the caller
// reads the body). Errors: kSandboxUnavailable when nothing answers at the address (refused,
// no such socket, the name does not resolve, the connection lost before any answer), kTimeout
// past the deadline, kInternal for a malformed or oversized answer and for an interruption.
StatusOr<Response> Call(const Endpoint& endpoint, const Request& request,
                        const CallOptions& options = {});

// The response parser Call uses, incremental: call again with more bytes on kIncomplete.
// 1xx interim responses are skipped; `eof` says the peer closed (a body without a length then
// ends there). Head at most 64 KiB, body at most max_body_bytes. Never reads past `buf`
// (fuzzed: reference/src/api/http_request_fuzz.cc).
struct ResponseOutcome {
  enum class Kind { kIncomplete, kComplete, kError };
  Kind kind = Kind::kIncomplete;
  Response response;    // kComplete
  std::string message;  // kError
};
ResponseOutcome ParseResponse(std::string_view buf, bool eof, size_t max_body_bytes);

}  // namespace sbx::http
