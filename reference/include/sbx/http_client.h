// The one HTTP/1.1 client of the project (issue 15): sandboxctl --server (api/remote_runtime.cc)
// and sandcheck's http driver (conformance/src/drivers/http_driver.cc) both call Call().
//
// One request per connection (Connection: close: a stale keep-alive connection can never make
// a POST run twice), over a unix socket, TCP (IP literals or host names, getaddrinfo) or TLS
// over TCP (https://, OpenSSL), with ONE deadline covering connect, handshake, send and
// receive. It writes and reads together, so an answer the server sends before it has read the
// body (401, 413) is read, not lost to EPIPE; it never raises SIGPIPE. Bodies: Content-Length,
// chunked, or read until the server closes. TLS is always verified: an https endpoint needs a
// CA file (chain + host name or IP in the certificate's SAN) or a pinned certificate
// fingerprint, or both (docs/sandboxd.md "TLS"). The TLS code is libsbx-tls.so, loaded from
// ../lib beside the binary at the first https:// call (http/tls_session.h), so a process that
// never calls https never loads OpenSSL. Why not cpp-httplib's client: docs/dependencies.md.
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
  bool tls = false;         // https://
  std::string host;         // TCP: a name or an IP literal (no brackets)
  int port = 80;            // 443 by default for https
  std::string base_path;  // prefix of every request path: "" or "/api" (no trailing slash)
  // "unix:/path", "http://host:port/base", "https://host:port", "http://[::1]:port"
  std::string ToString() const;
};

// "unix:/path" (or "unix:///path"), "http[s]://HOST[:PORT][/base]", "http[s]://[v6]:PORT".
// kInvalidArgument otherwise, with what was expected.
StatusOr<Endpoint> ParseEndpoint(std::string_view url);

// How an https endpoint is trusted, and the client's own certificate for mutual TLS. Paths are
// PEM files. At least one of ca_file and pin_sha256 for https (else kInvalidArgument: never
// unverified TLS); none of them for other endpoints.
struct TlsOptions {
  std::string ca_file;     // verify the server's chain against this CA, and its SAN against host
  std::string pin_sha256;  // accept exactly the certificate whose DER has this SHA-256
  std::string client_cert_file;  // mutual TLS: this certificate (chain) ...
  std::string client_key_file;   // ... and its key (both or neither)
  bool empty() const {
    return ca_file.empty() && pin_sha256.empty() && client_cert_file.empty() &&
           client_key_file.empty();
  }
};

// A pin as given ("AB:CD:..." as `openssl x509 -fingerprint -sha256` prints it, or 64 hex
// digits, any case) as 64 lower-case hex digits; kInvalidArgument otherwise.
StatusOr<std::string> NormalizePinSha256(std::string_view pin);

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
  TlsOptions tls;                        // https endpoints only
};

// Sends one request, reads the whole answer. HTTP error statuses are NOT errors (the caller
// reads the body). Errors: kSandboxUnavailable when nothing answers at the address (refused,
// no such socket, the name does not resolve, the connection lost before any answer, a peer that
// does not speak TLS on an https endpoint), kTimeout past the deadline, kInternal for a
// malformed or oversized answer and for an interruption, kInvalidArgument for TLS options that
// do not fit the endpoint or files that cannot be loaded, kUnsupported when https is asked for
// and libsbx-tls.so cannot be loaded, kPermissionDenied when a certificate
// is refused: the server's (not signed by ca_file, not for this host, not the pinned one, the
// message says which) or ours (the server requires a client certificate or does not trust it).
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
