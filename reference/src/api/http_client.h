// A blocking HTTP/1.1 client for sandboxd's API: one connection per request (no stale
// keep-alive connection can ever make a POST run twice), over a unix socket or TCP.
//
// Thread-safety: an HttpClient is immutable; Do() may be called concurrently.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "api/http_message.h"
#include "api/listener.h"
#include "sbx/status.h"

namespace sbx::api {

class HttpClient {
 public:
  // "unix:/path/to.sock" or "http://127.0.0.1:PORT" ("http://[::1]:PORT", "http://localhost:PORT").
  static StatusOr<HttpClient> Create(std::string_view url);

  // Sends one request and reads the whole response. Transport failures: kSandboxUnavailable
  // when nothing answers at the address, kTimeout past `timeout_s`, kInternal for a malformed
  // response. HTTP error statuses are NOT errors here (the caller reads the body).
  StatusOr<ParsedResponse> Do(std::string_view method, std::string_view path,
                              const std::vector<HttpHeader>& headers, std::string_view body,
                              double timeout_s) const;

  const std::string& url() const { return url_; }

 private:
  std::string url_;
  ListenAddress address_;
  std::string host_header_;
};

}  // namespace sbx::api
