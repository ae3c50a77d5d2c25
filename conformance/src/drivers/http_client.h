// A small HTTP/1.1 client for the Execution API: one request per connection (Connection: close),
// over TCP or a unix socket, with one deadline covering connect, send and receive. Understands
// Content-Length, chunked and read-until-close bodies. No TLS (use a unix socket or a trusted
// link).
//
// Thread-safety: stateless functions.
#pragma once

#include <map>
#include <string>

#include "sbx/status.h"

namespace sandcheck {

struct HttpEndpoint {
  bool unix_socket = false;
  std::string host;  // TCP
  int port = 80;
  std::string socket_path;  // unix
  std::string base_path;    // prefix of every request path ("" or "/api")
  std::string ToString() const;
};

// "http://HOST:PORT[/base]", "http://[v6]:PORT", "unix:/path/to.sock" (kInvalidArgument otherwise).
sbx::StatusOr<HttpEndpoint> ParseEndpoint(const std::string& spec);

struct HttpRequest {
  std::string method = "GET";
  std::string path = "/";
  std::map<std::string, std::string> headers;
  std::string body;
};

struct HttpResponse {
  int status = 0;
  std::string reason;
  std::map<std::string, std::string> headers;  // keys lower case
  std::string body;
};

// kUnavailable-like errors are kInternal with the endpoint in the message; kTimeout on deadline.
sbx::StatusOr<HttpResponse> HttpCall(const HttpEndpoint& endpoint, const HttpRequest& request,
                                     double timeout_s);

// Parses a complete response (exposed for tests). kInvalidArgument for a malformed one.
sbx::StatusOr<HttpResponse> ParseHttpResponse(const std::string& raw);

}  // namespace sandcheck
