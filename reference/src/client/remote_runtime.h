// The sbx::Runtime interface over sandboxd's HTTP API (what `sandboxctl --server URL` uses).
//
// Every call is one HTTP request authenticated with the tenant's token. Error answers come back
// as the Status they were on the server (the code string of the error body); transport
// failures are kSandboxUnavailable (nothing answers), kTimeout or kInternal (a malformed
// answer). Run() never fails as a call: a failure becomes a result with status
// sandbox_unavailable, as in the in-process runtime.
//
// Differences from the in-process runtime: the sandbox's tenant is the token's (a different
// SandboxSpec::tenant is refused with kPermissionDenied); ExecSpec::grace_s is not sent (the
// server's default applies); Info() and List()/GatewayLog() cannot report errors through their
// signatures: Info() then returns {"error": {...}} merged into the last good answer, List() an
// empty list, GatewayLog() an empty array.
//
// Thread-safety: thread-safe (one connection per call).
#pragma once

#include <memory>
#include <string>

#include "sbx/http_client.h"
#include "sbx/runtime.h"
#include "sbx/status.h"

namespace sbx::client {

// url: "unix:/run/sandcheck/sandboxd.sock", "http://127.0.0.1:PORT" or "https://HOST:PORT"
// (https: `tls` must say how the server is trusted, sbx/http_client.h). With `probe` (the
// default) calls GET /v1/info once, so a wrong token (kUnauthenticated) or an absent server
// (kSandboxUnavailable) is reported here rather than at the first operation; without it the
// first operation is the first request (one round trip less: `sandboxctl run`, whose failed
// result carries the same code in error_code). The URL and the token's syntax are checked
// either way.
StatusOr<std::unique_ptr<Runtime>> OpenRemoteRuntime(const std::string& url,
                                                     const std::string& token, bool probe = true);
// The same for an https url (and any other: `tls` must then be empty).
StatusOr<std::unique_ptr<Runtime>> OpenRemoteRuntime(const std::string& url,
                                                     const std::string& token,
                                                     const http::TlsOptions& tls,
                                                     bool probe = true);

// Bounds of every call (the remote backend's forwarding: a worker that stops answering must
// never hang its caller).
struct RemoteCallBounds {
  double call_timeout_s = 120;  // create, revert, destroy, info, ...
  double exec_slack_s = 60;     // an exec: the command's own timeout plus this
};
// `tls`: trust and client certificate for an https url; the TLS options are checked here
// (kInvalidArgument: https without trust, trust for a plain url, a bad pin).
StatusOr<std::unique_ptr<Runtime>> OpenRemoteRuntime(const std::string& url,
                                                     const std::string& token, bool probe,
                                                     RemoteCallBounds bounds,
                                                     const http::TlsOptions& tls = {});

}  // namespace sbx::client
