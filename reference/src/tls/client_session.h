// The HTTP client's TLS session over OpenSSL (the implementation of http/tls_session.h),
// exported from libsbx-tls.so by module/tls_module.cc.
//
// Thread-safety: a session is used by one thread; opening is thread-safe.
#pragma once

#include <string>

#include "http/tls_session.h"
#include "sbx/http_client.h"
#include "sbx/status.h"

namespace sbx::tls {

// A client session over the connected socket `fd` (not owned): `host` for SNI and the
// certificate's name, `name` the endpoint for messages, `tls` with its pin (if any) normalised
// (http::NormalizePinSha256). Null with *error set when a file of `tls` cannot be loaded
// (kInvalidArgument).
http::TlsSession* OpenClientSession(int fd, const std::string& host, const std::string& name,
                                    const http::TlsOptions& tls, Status* error);

}  // namespace sbx::tls
