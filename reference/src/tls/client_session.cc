// The HTTP client's TLS session (http/tls_session.h), OpenSSL non-blocking: built into
// libsbx-tls.so (module/tls_module.cc) and loaded by sbx::http::Call for https:// endpoints.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "tls/client_session.h"

#include "tls/tls.h"

namespace sbx::tls {
namespace {

bool IsIpLiteral(const std::string& host) {
  in_addr v4{};
  in6_addr v6{};
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

Status Unreachable(const std::string& name, std::string_view why) {
  return Status(Code::kSandboxUnavailable, fmt::format("{} is not reachable: {}", name, why));
}

// A client context: TLS 1.2 or later, the CA (when given) as the only trust anchor, our
// certificate for mutual TLS. kInvalidArgument naming a file that cannot be loaded.
StatusOr<SslCtxPtr> ClientContext(const http::TlsOptions& t) {
  ERR_clear_error();
  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx) return Internal("TLS: cannot make a context: " + ErrorText());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // A close without close_notify is an end of stream: sandboxd's answers carry their length,
  // and a body cut short is still caught by the response parser.
  SSL_CTX_set_options(ctx.get(), SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
  if (!t.ca_file.empty()) {
    // SECURITY: only this CA is trusted (not the system store): the operator says exactly
    // which authority may vouch for the server.
    if (SSL_CTX_load_verify_locations(ctx.get(), t.ca_file.c_str(), nullptr) != 1)
      return InvalidArgument(fmt::format("TLS ca_file {}: {}", t.ca_file, ErrorText()));
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  } else {
    // Pin only: the chain is not judged, the exact certificate is (checked after the
    // handshake, before a byte of the request is sent).
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
  }
  if (!t.client_cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx.get(), t.client_cert_file.c_str()) != 1) {
      return InvalidArgument(
          fmt::format("TLS client_cert_file {}: {}", t.client_cert_file, ErrorText()));
    }
    if (SSL_CTX_use_PrivateKey_file(ctx.get(), t.client_key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
        ERR_clear_error();
        return InvalidArgument(fmt::format("TLS client_key_file {} does not match {}",
                                           t.client_key_file, t.client_cert_file));
      }
      return InvalidArgument(
          fmt::format("TLS client_key_file {}: {}", t.client_key_file, ErrorText()));
    }
    if (SSL_CTX_check_private_key(ctx.get()) != 1) {
      ERR_clear_error();
      return InvalidArgument(fmt::format("TLS client_key_file {} does not match {}",
                                         t.client_key_file, t.client_cert_file));
    }
  }
  return ctx;
}

class ClientSession final : public http::TlsSession {
 public:
  ClientSession(std::string name, std::string host, http::TlsOptions t)
      : name_(std::move(name)), host_(std::move(host)), tls_(std::move(t)) {}

  Status Init(int fd) {
    ASSIGN_OR_RETURN(ctx_, ClientContext(tls_));
    ssl_.reset(SSL_new(ctx_.get()));
    BIO* bio = ssl_ ? SocketBio(fd) : nullptr;
    if (bio == nullptr) return Internal("TLS: out of memory");
    SSL_set_bio(ssl_.get(), bio, bio);
    if (!tls_.ca_file.empty()) {
      // SECURITY: the chain alone is not enough: the certificate must name this host (its IP
      // in an IP SAN for an IP literal, the DNS name otherwise).
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl_.get());
      int ok = IsIpLiteral(host_) ? X509_VERIFY_PARAM_set1_ip_asc(param, host_.c_str())
                                  : SSL_set1_host(ssl_.get(), host_.c_str());
      if (ok != 1) return Internal("TLS: cannot set the expected host: " + ErrorText());
    }
    if (!IsIpLiteral(host_)) SSL_set_tlsext_host_name(ssl_.get(), host_.c_str());
    return Status::Ok();
  }

  Status Handshake(short* wait_for) override {
    *wait_for = 0;
    ERR_clear_error();
    errno = 0;
    int r = SSL_connect(ssl_.get());
    if (r != 1) {
      int err = SSL_get_error(ssl_.get(), r);
      if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        *wait_for = err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        return Status::Ok();
      }
      return Failure(err, /*handshake=*/true);
    }
    if (!tls_.pin_sha256.empty()) {
      const std::string& want = tls_.pin_sha256;  // normalised by the caller
      std::string got = FingerprintSha256(SSL_get0_peer_certificate(ssl_.get()));
      if (got != want) {
        return Status(Code::kPermissionDenied,
                      fmt::format("{}: the server's certificate (sha256 {}) does not match the "
                                  "pinned fingerprint {}",
                                  name_, got.empty() ? "none" : got, want));
      }
    }
    return Status::Ok();
  }

  ssize_t Send(std::string_view data, bool* blocked_on_read) override {
    ERR_clear_error();
    errno = 0;
    int n = SSL_write(ssl_.get(), data.data(),
                      static_cast<int>(std::min<size_t>(data.size(), 1 << 20)));
    if (n > 0) return n;
    return Again(n, blocked_on_read, nullptr);
  }

  ssize_t Recv(char* buf, size_t len, bool* blocked_on_write) override {
    ERR_clear_error();
    errno = 0;
    int n = SSL_read(ssl_.get(), buf, static_cast<int>(std::min<size_t>(len, 1 << 20)));
    if (n > 0) return n;
    if (SSL_get_error(ssl_.get(), n) == SSL_ERROR_ZERO_RETURN) return 0;
    return Again(n, nullptr, blocked_on_write);
  }

  const Status& error() const override { return error_; }

 private:
  // A failed SSL_write or SSL_read: -1 to wait (noting what for) or -2 failed (error_).
  ssize_t Again(int n, bool* on_read, bool* on_write) {
    int err = SSL_get_error(ssl_.get(), n);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      if (err == SSL_ERROR_WANT_READ && on_read) *on_read = true;
      if (err == SSL_ERROR_WANT_WRITE && on_write) *on_write = true;
      return -1;
    }
    error_ = Failure(err, /*handshake=*/false);
    return -2;
  }

  // A failed TLS operation as a Status: a refused certificate is kPermissionDenied naming it;
  // a peer that does not speak TLS or went away is unavailable.
  Status Failure(int err, bool handshake) {
    long verify = SSL_get_verify_result(ssl_.get());  // NOLINT(runtime/int)
    if (handshake && !tls_.ca_file.empty() && verify != X509_V_OK) {
      ERR_clear_error();
      return Status(Code::kPermissionDenied,
                    fmt::format("{}: the server's certificate is not trusted: {} (ca_file {})",
                                name_, X509_verify_cert_error_string(verify), tls_.ca_file));
    }
    if (err == SSL_ERROR_SSL && QueuedErrorIsCertificate()) {
      std::string why = ErrorText();
      return Status(Code::kPermissionDenied,
                    fmt::format("{}: the server refused our TLS certificate: {} ({})", name_, why,
                                tls_.client_cert_file.empty()
                                    ? "it requires a client certificate"
                                    : "client_cert_file " + tls_.client_cert_file));
    }
    if (err == SSL_ERROR_SSL) {
      std::string why = ErrorText();
      return Unreachable(name_, fmt::format("TLS {} failed: {}{}",
                                            handshake ? "handshake" : "session", why,
                                            handshake ? " (is it a TLS server?)" : ""));
    }
    int e = errno;
    ERR_clear_error();
    return Unreachable(name_, fmt::format("the connection closed during the TLS {}{}",
                                          handshake ? "handshake" : "session",
                                          err == SSL_ERROR_SYSCALL && e != 0
                                              ? std::string(": ") + strerror(e)
                                              : std::string()));
  }

  std::string name_, host_;
  http::TlsOptions tls_;
  SslCtxPtr ctx_;
  SslPtr ssl_;
  Status error_;
};

}  // namespace

http::TlsSession* OpenClientSession(int fd, const std::string& host, const std::string& name,
                                    const http::TlsOptions& tls, Status* error) {
  auto s = std::make_unique<ClientSession>(name, host, tls);
  if (Status st = s->Init(fd); !st.ok()) {
    *error = st;
    return nullptr;
  }
  return s.release();
}

}  // namespace sbx::tls
