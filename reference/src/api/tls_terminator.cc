// sandboxd's TLS terminator (api/tls_terminator.h): one poll thread, non-blocking OpenSSL.
#include "api/tls_terminator.h"

#include <fmt/format.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>

namespace sbx::api {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kBuffer = 32 * 1024;  // per direction; the faster side waits beyond it

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// What a blocked TLS operation waits for.
enum class Want { kNothing, kRead, kWrite };

}  // namespace

StatusOr<std::shared_ptr<TlsServerContext>> TlsServerContext::Create(
    const std::string& cert_file, const std::string& key_file, const std::string& client_ca_file) {
  ERR_clear_error();
  auto c = std::make_shared<TlsServerContext>();
  c->ctx_.reset(SSL_CTX_new(TLS_server_method()));
  SSL_CTX* ctx = c->ctx_.get();
  if (ctx == nullptr) return Internal("TLS: cannot make a context: " + tls::ErrorText());
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_num_tickets(ctx, 0);  // one request per connection: nothing to resume
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1)
    return InvalidArgument(fmt::format("tls.cert_file {}: {}", cert_file, tls::ErrorText()));
  if (SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
      ERR_clear_error();
      return InvalidArgument(
          fmt::format("tls.key_file {} is not the key of tls.cert_file {}", key_file, cert_file));
    }
    return InvalidArgument(fmt::format("tls.key_file {}: {}", key_file, tls::ErrorText()));
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    ERR_clear_error();
    return InvalidArgument(
        fmt::format("tls.key_file {} is not the key of tls.cert_file {}", key_file, cert_file));
  }
  if (!client_ca_file.empty()) {
    // SECURITY: mutual TLS: a client without a certificate signed by this CA never reaches
    // the HTTP layer (it still needs a token there).
    if (SSL_CTX_load_verify_locations(ctx, client_ca_file.c_str(), nullptr) != 1) {
      return InvalidArgument(
          fmt::format("tls.client_ca_file {}: {}", client_ca_file, tls::ErrorText()));
    }
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(client_ca_file.c_str());
    if (names != nullptr) SSL_CTX_set_client_CA_list(ctx, names);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    c->mutual_ = true;
  }
  ERR_clear_error();
  return c;
}

struct TlsTerminator::Conn {
  host::UniqueFd tcp, plain;
  tls::SslPtr ssl;
  bool relaying = false;          // handshake done, plain end handed over
  Clock::time_point deadline;     // handshake, then (server side closed) the flush
  bool has_deadline = true;
  std::string to_plain, to_tls;   // decrypted, waiting for the server; its answer, for TLS
  bool tls_eof = false;           // the client ended its stream (close_notify or EOF)
  bool plain_eof = false;         // the server closed (or shut down writing on) its end
  bool plain_shut = false;        // we passed the client's end on (shutdown SHUT_WR)
  bool tls_dead = false;          // a fatal TLS error: no close_notify, no more SSL calls
  bool lingering = false;         // a failed handshake: its alert out, input discarded a while
  bool done = false;              // close both ends
  Want hs_want = Want::kRead, read_want = Want::kRead, write_want = Want::kNothing;
};

TlsTerminator::TlsTerminator(std::shared_ptr<TlsServerContext> context, Options options,
                             Adopt adopt)
    : context_(std::move(context)), options_(options), adopt_(std::move(adopt)) {}

TlsTerminator::~TlsTerminator() { Stop(0); }

Status TlsTerminator::Start() {
  if (thread_.joinable()) return FailedPrecondition("TLS terminator already started");
  wake_.Reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_.valid()) return ErrnoStatus("eventfd");
  {
    std::lock_guard lock(mu_);
    stopping_ = false;
  }
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void TlsTerminator::Add(host::UniqueFd tcp) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || !thread_.joinable()) return;  // closed here
    incoming_.push_back(std::move(tcp));
  }
  Wake();
}

void TlsTerminator::Stop(double grace_s) {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    grace_s_ = std::max(0.0, grace_s);
  }
  Wake();
  thread_.join();
  incoming_.clear();
  wake_.Reset();
}

TlsTerminator::Stats TlsTerminator::stats() const {
  Stats s;
  s.handshakes = handshakes_;
  s.failed = failed_;
  s.refused = refused_;
  s.open = open_;
  return s;
}

void TlsTerminator::Wake() {
  uint64_t one = 1;
  ssize_t n = write(wake_.get(), &one, sizeof one);
  (void)n;  // a full counter already means "wake up"
}

void TlsTerminator::Loop() {
  std::optional<Clock::time_point> stop_at;
  std::vector<pollfd> fds;
  std::vector<Conn*> owners;  // owners[i]: the connection of fds[i] (nullptr: the wake fd)
  while (true) {
    std::vector<host::UniqueFd> incoming;
    bool stopping;
    {
      std::lock_guard lock(mu_);
      incoming.swap(incoming_);
      stopping = stopping_;
      if (stopping && !stop_at) stop_at = Clock::now() + Seconds(grace_s_);
    }
    for (auto& fd : incoming) {
      if (stopping || static_cast<int>(conns_.size()) >= options_.max_connections) {
        ++refused_;
        continue;  // closed by UniqueFd
      }
      auto c = std::make_unique<Conn>();
      c->tcp = std::move(fd);
      c->ssl.reset(SSL_new(context_->get()));
      BIO* bio = c->ssl ? tls::SocketBio(c->tcp.get()) : nullptr;
      if (bio == nullptr) {
        ERR_clear_error();
        ++failed_;
        continue;
      }
      SSL_set_bio(c->ssl.get(), bio, bio);
      SSL_set_accept_state(c->ssl.get());
      c->deadline = Clock::now() + Seconds(options_.handshake_timeout_s);
      conns_.push_back(std::move(c));
      Pump(conns_.back().get());
    }
    if (stopping) {
      for (auto& c : conns_) {
        if (!c->relaying) c->done = true;  // a handshake is not worth waiting for
      }
    }
    auto now = Clock::now();
    for (auto& c : conns_) {
      if (!c->done && c->has_deadline && c->deadline <= now) {
        if (!c->relaying && !c->lingering) ++failed_;  // a handshake not finished in time
        c->done = true;
      }
    }
    std::erase_if(conns_, [](const std::unique_ptr<Conn>& c) { return c->done; });
    open_ = static_cast<int>(conns_.size());
    if (stopping && (conns_.empty() || now >= *stop_at)) break;

    fds.clear();
    owners.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    owners.push_back(nullptr);
    auto wait_until = now + std::chrono::seconds(1);
    if (stop_at) wait_until = std::min(wait_until, *stop_at);
    for (auto& cp : conns_) {
      Conn* c = cp.get();
      if (c->has_deadline) wait_until = std::min(wait_until, c->deadline);
      short tcp = 0, plain = 0;
      if (c->lingering) {
        tcp = POLLIN;
      } else if (!c->relaying) {
        tcp = c->hs_want == Want::kWrite ? POLLOUT : POLLIN;
      } else {
        if (!c->tls_eof && c->to_plain.size() < kBuffer)
          tcp |= c->read_want == Want::kWrite ? POLLOUT : POLLIN;
        if (!c->to_tls.empty()) tcp |= c->write_want == Want::kRead ? POLLIN : POLLOUT;
        if (!c->plain_eof && c->to_tls.size() < kBuffer) plain |= POLLIN;
        if (!c->to_plain.empty()) plain |= POLLOUT;
      }
      // A side waited for on nothing is left out (fd -1): poll would still report its hang-up,
      // over and over, while the other side is the one to wait for.
      fds.push_back({tcp != 0 ? c->tcp.get() : -1, tcp, 0});
      owners.push_back(c);
      if (c->relaying) {
        fds.push_back({plain != 0 ? c->plain.get() : -1, plain, 0});
        owners.push_back(c);
      }
    }
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(wait_until - now).count() + 1;
    int n = poll(fds.data(), fds.size(), static_cast<int>(std::clamp<int64_t>(ms, 0, 1000)));
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    if (fds[0].revents != 0) {
      uint64_t v;
      ssize_t r = read(wake_.get(), &v, sizeof v);
      (void)r;
    }
    Conn* last = nullptr;
    for (size_t i = 1; i < fds.size(); ++i) {
      // Errors and hang-ups are found by the reads and writes a pump tries.
      if (fds[i].revents == 0 || owners[i] == last) continue;
      last = owners[i];
      Pump(owners[i]);
    }
  }
  conns_.clear();  // closes every connection still open
  open_ = 0;
}

void TlsTerminator::Pump(Conn* c) {
  if (c->done) return;
  if (c->lingering) {
    char buf[4096];
    while (true) {
      ssize_t n = recv(c->tcp.get(), buf, sizeof buf, 0);
      if (n > 0) continue;
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) c->done = true;
      return;
    }
  }
  if (!c->relaying) Handshake(c);
  if (c->relaying && !c->done) Relay(c);
}

void TlsTerminator::Handshake(Conn* c) {
  ERR_clear_error();
  int r = SSL_accept(c->ssl.get());
  if (r != 1) {
    int err = SSL_get_error(c->ssl.get(), r);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      c->hs_want = err == SSL_ERROR_WANT_WRITE ? Want::kWrite : Want::kRead;
      return;
    }
    // Not TLS, a truncated or refused handshake, a missing or untrusted client certificate:
    // OpenSSL has sent its alert where it could. Closing now, with the client's first request
    // unread, would reset the connection and lose the alert ("certificate required" comes
    // after the client has finished its side in TLS 1.3): stop writing and discard what comes
    // for up to a second, as the HTTP server does after a protocol error.
    ERR_clear_error();
    ++failed_;
    shutdown(c->tcp.get(), SHUT_WR);
    c->lingering = true;
    c->has_deadline = true;
    c->deadline = Clock::now() + std::chrono::seconds(1);
    Pump(c);
    return;
  }
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0) {
    ++failed_;  // out of descriptors: the client sees a closed connection
    c->done = true;
    return;
  }
  c->plain.Reset(pair[0]);
  host::UniqueFd theirs(pair[1]);
  ++handshakes_;
  c->relaying = true;
  c->has_deadline = false;  // from now on the server's timeouts apply
  adopt_(std::move(theirs));
}

void TlsTerminator::Relay(Conn* c) {
  char buf[16 * 1024];
  bool progress = true;
  while (progress && !c->done) {
    progress = false;
    // Client -> server.
    if (!c->tls_eof && !c->tls_dead && c->to_plain.size() < kBuffer) {
      ERR_clear_error();
      int n = SSL_read(c->ssl.get(), buf, sizeof buf);
      if (n > 0) {
        c->to_plain.append(buf, static_cast<size_t>(n));
        c->read_want = Want::kNothing;
        progress = true;
      } else {
        int err = SSL_get_error(c->ssl.get(), n);
        if (err == SSL_ERROR_WANT_READ) {
          c->read_want = Want::kRead;
        } else if (err == SSL_ERROR_WANT_WRITE) {
          c->read_want = Want::kWrite;
        } else if (err == SSL_ERROR_ZERO_RETURN) {
          c->tls_eof = true;
          progress = true;
        } else {
          ERR_clear_error();
          c->tls_dead = true;
          c->done = true;  // a broken TLS stream: nothing more can be trusted on it
          return;
        }
      }
    }
    if (!c->to_plain.empty()) {
      ssize_t w = send(c->plain.get(), c->to_plain.data(), c->to_plain.size(), MSG_NOSIGNAL);
      if (w > 0) {
        c->to_plain.erase(0, static_cast<size_t>(w));
        progress = true;
      } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
        c->to_plain.clear();  // the server is gone: what is left of its answer still goes out
        c->tls_eof = true;
      }
    }
    if (c->tls_eof && c->to_plain.empty() && !c->plain_shut) {
      shutdown(c->plain.get(), SHUT_WR);  // the server sees the client's end of stream
      c->plain_shut = true;
    }
    // Server -> client.
    if (!c->plain_eof && c->to_tls.size() < kBuffer) {
      ssize_t r = recv(c->plain.get(), buf, sizeof buf, 0);
      if (r > 0) {
        c->to_tls.append(buf, static_cast<size_t>(r));
        progress = true;
      } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        c->plain_eof = true;
        c->has_deadline = true;
        c->deadline = Clock::now() + Seconds(options_.flush_timeout_s);
        progress = true;
      }
    }
    if (!c->to_tls.empty() && !c->tls_dead) {
      ERR_clear_error();
      int n = SSL_write(c->ssl.get(), c->to_tls.data(), static_cast<int>(c->to_tls.size()));
      if (n > 0) {
        c->to_tls.erase(0, static_cast<size_t>(n));
        c->write_want = Want::kNothing;
        progress = true;
      } else {
        int err = SSL_get_error(c->ssl.get(), n);
        if (err == SSL_ERROR_WANT_WRITE) {
          c->write_want = Want::kWrite;
        } else if (err == SSL_ERROR_WANT_READ) {
          c->write_want = Want::kRead;
        } else {
          ERR_clear_error();
          c->tls_dead = true;
          c->done = true;  // the client is gone
          return;
        }
      }
    }
    if (c->plain_eof && c->to_tls.empty()) {
      // The server closed and all it said is out: a close_notify (best effort), then close.
      ERR_clear_error();
      SSL_shutdown(c->ssl.get());
      ERR_clear_error();
      c->done = true;
      return;
    }
  }
}

}  // namespace sbx::api
