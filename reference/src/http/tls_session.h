// The HTTP client's TLS, behind an interface (sbx/http_client.h; docs/sandboxctl.md "Start-up
// cost"): OpenSSL costs milliseconds of every process start that links it, and sandboxctl
// --server must not pay them for unix: and http:// servers. So the implementation
// (reference/src/tls/client_session.cc) is built into libsbx-tls.so, loaded with dlopen from
// ../lib beside the binary the first time an https:// endpoint is called, and never unloaded.
//
// The ABI is the one C symbol below; the objects are C++ types of this header and
// sbx/http_client.h, built by the same compiler in the same build.
//
// Thread-safety: a session is used by one call (one thread); opening is thread-safe.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "sbx/http_client.h"
#include "sbx/status.h"

namespace sbx::http {

class TlsSession {
 public:
  virtual ~TlsSession() = default;

  // One step of the handshake (then the pin check): OK with *wait_for = 0 when the session is
  // established, OK with *wait_for = POLLIN or POLLOUT when the socket must be ready first;
  // otherwise the failure (kPermissionDenied: a certificate refused, kSandboxUnavailable: not
  // a TLS server or the connection lost).
  virtual Status Handshake(short* wait_for) = 0;

  // Bytes moved (> 0), 0 at the peer's end of stream (Recv only), -1 "wait for the socket"
  // (*blocked_on_read / *blocked_on_write say when TLS needs the other direction), -2 failed
  // (error()).
  virtual ssize_t Send(std::string_view data, bool* blocked_on_read) = 0;
  virtual ssize_t Recv(char* buf, size_t len, bool* blocked_on_write) = 0;
  virtual const Status& error() const = 0;
};

inline constexpr const char* kTlsOpenSymbol = "sbx_tls_client_open_v1";
inline constexpr const char* kTlsModuleFileName = "libsbx-tls.so";

// A client session over the connected socket `fd` (not owned) to `host` (for SNI and the
// certificate's name; an IP literal or a name), `name` the endpoint for messages. The caller
// owns the result; on failure returns null and sets *error (kInvalidArgument: a file of `tls`
// that cannot be loaded).
using TlsOpenFn = TlsSession* (*)(int fd, const std::string* host, const std::string* name,
                                   const TlsOptions* tls, Status* error);

}  // namespace sbx::http
