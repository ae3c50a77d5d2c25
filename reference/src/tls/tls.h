// TLS pieces shared by the HTTP client's TLS sessions (tls/client_session.cc) and sandboxd's
// TLS terminator (api/tls_terminator.cc): a socket BIO that never raises SIGPIPE, OpenSSL's
// error queue as one line, certificate fingerprints, and how a failed handshake or record is
// told apart (a certificate refused vs. a peer that does not speak TLS).
//
// Thread-safety: pure functions; SocketBio() may be called from any thread (the BIO_METHOD is
// made once).
#pragma once

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <memory>
#include <string>

namespace sbx::tls {

// A BIO over a connected socket `fd` (not owned; non-blocking or not) whose writes use
// send(MSG_NOSIGNAL): OpenSSL's own socket BIO writes with write(2), which raises SIGPIPE on a
// peer that went away. EAGAIN/EINTR are "retry" for SSL_get_error (WANT_READ / WANT_WRITE).
// nullptr if OpenSSL is out of memory.
BIO* SocketBio(int fd);

// OpenSSL's error queue of this thread as one line ("" when empty), cleared.
std::string ErrorText();

// True if the last failure on this thread's error queue (still queued: call before ErrorText)
// is about a certificate: a peer's alert (bad, unknown, expired, revoked or required
// certificate, unknown CA) or our own verification. Such a failure is a trust problem, not an
// absent server.
bool QueuedErrorIsCertificate();

// Lower-case hex SHA-256 of the certificate's DER encoding ("" if it cannot be encoded).
std::string FingerprintSha256(X509* cert);

struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
struct SslFree {
  void operator()(SSL* s) const { SSL_free(s); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxFree>;
using SslPtr = std::unique_ptr<SSL, SslFree>;

}  // namespace sbx::tls
