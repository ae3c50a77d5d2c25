// libsbx-tls.so: the HTTP client's TLS (http/tls_session.h), loaded by sbx::http::Call the
// first time an https:// endpoint is called, so that nothing else pays for OpenSSL's loading.
// Exports this one symbol (the static libraries' stay inside: -Wl,--exclude-libs,ALL).
#include "http/tls_session.h"
#include "tls/client_session.h"

extern "C" __attribute__((visibility("default"))) sbx::http::TlsSession* sbx_tls_client_open_v1(
    int fd, const std::string* host, const std::string* name, const sbx::http::TlsOptions* tls,
    sbx::Status* error) {
  return sbx::tls::OpenClientSession(fd, *host, *name, *tls, error);
}

// The type of the entry must be the one the loader expects.
static_assert(std::is_same_v<decltype(&sbx_tls_client_open_v1), sbx::http::TlsOpenFn>);
