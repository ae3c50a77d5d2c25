// Shared TLS pieces (tls/tls.h).
#include "tls/tls.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <sys/socket.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <cstdint>

namespace sbx::tls {
namespace {

int Fd(BIO* b) { return static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(b))); }

int SockWrite(BIO* b, const char* data, int len) {
  BIO_clear_retry_flags(b);
  ssize_t n = ::send(Fd(b), data, static_cast<size_t>(len), MSG_NOSIGNAL);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_write(b);
  return static_cast<int>(n);
}

int SockRead(BIO* b, char* data, int len) {
  BIO_clear_retry_flags(b);
  ssize_t n = ::recv(Fd(b), data, static_cast<size_t>(len), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_read(b);
  return static_cast<int>(n);
}

int SockPuts(BIO* b, const char* s) {
  size_t n = strlen(s);
  return SockWrite(b, s, static_cast<int>(n > INT_MAX ? INT_MAX : n));
}

long SockCtrl(BIO*, int cmd, long, void*) {  // NOLINT(runtime/int): OpenSSL's signature
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;      // nothing is buffered here
}

int SockCreate(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

int SockDestroy(BIO* b) { return b != nullptr ? 1 : 0; }  // the fd is not ours to close

const BIO_METHOD* Method() {
  static const BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "sbx socket");
    if (m == nullptr) return static_cast<BIO_METHOD*>(nullptr);
    BIO_meth_set_write(m, SockWrite);
    BIO_meth_set_read(m, SockRead);
    BIO_meth_set_puts(m, SockPuts);
    BIO_meth_set_ctrl(m, SockCtrl);
    BIO_meth_set_create(m, SockCreate);
    BIO_meth_set_destroy(m, SockDestroy);
    return m;
  }();
  return method;
}

}  // namespace

BIO* SocketBio(int fd) {
  const BIO_METHOD* m = Method();
  if (m == nullptr) return nullptr;
  BIO* b = BIO_new(m);
  if (b != nullptr) BIO_set_data(b, reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
  return b;
}

std::string ErrorText() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {  // NOLINT(runtime/int)
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    // "error:0A000086:SSL routines::certificate verify failed" -> the reason, for people.
    const char* reason = ERR_reason_error_string(e);
    out += reason != nullptr ? reason : buf;
  }
  return out;
}

bool QueuedErrorIsCertificate() {
  unsigned long e = ERR_peek_last_error();  // NOLINT(runtime/int)
  if (e == 0 || ERR_GET_LIB(e) != ERR_LIB_SSL) return false;
  switch (ERR_GET_REASON(e)) {
    case SSL_R_CERTIFICATE_VERIFY_FAILED:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
    case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
      return true;
    default:
      return false;
  }
}

std::string FingerprintSha256(X509* cert) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (cert == nullptr || X509_digest(cert, EVP_sha256(), md, &len) != 1) return "";
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

}  // namespace sbx::tls
