// TLS for sandboxd (docs/sandboxd.md "TLS"): a terminator in front of the plain HTTP server.
//
// The server accepts TCP connections as always and hands each to the terminator, whose one
// thread does the TLS handshake (bounded by handshake_timeout_s) and then relays bytes between
// the TLS connection and one end of a socketpair; the other end goes to the server as if it
// had been accepted (HttpServer::Adopt), so the HTTP layer with all its limits is the same
// code on every transport. The terminator never parses a byte of HTTP.
//
// Limits: at most max_connections TLS connections (handshaking or relaying; beyond, a new one
// is closed at once); a handshake not finished in time, or failed (a client that is not TLS,
// garbage, a refused client certificate), closes the connection and counts as failed; per
// connection at most 2 x 32 KiB buffered (the faster side waits for the slower); once the
// server has closed its side, the rest is flushed within flush_timeout_s.
//
// Thread-safety: Add() from any thread; Start/Stop from one controlling thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "host/fd.h"
#include "tls/tls.h"
#include "sbx/status.h"

namespace sbx::api {

// The server's certificate and key, and (mutual TLS) the CA its clients' certificates must be
// signed by. Immutable once made; shared by every connection.
class TlsServerContext {
 public:
  // PEM files. kInvalidArgument naming the file that cannot be loaded, or a key that does not
  // match the certificate. client_ca_file "" = no client certificate asked for.
  static StatusOr<std::shared_ptr<TlsServerContext>> Create(const std::string& cert_file,
                                                            const std::string& key_file,
                                                            const std::string& client_ca_file);
  SSL_CTX* get() const { return ctx_.get(); }
  bool mutual() const { return mutual_; }

 private:
  tls::SslCtxPtr ctx_;
  bool mutual_ = false;
};

class TlsTerminator {
 public:
  // Receives the plain end of each connection whose handshake succeeded (called on the
  // terminator's thread; it must not block).
  using Adopt = std::function<void(host::UniqueFd plain)>;

  struct Options {
    int max_connections = 256;
    double handshake_timeout_s = 10;
    double flush_timeout_s = 30;
  };

  TlsTerminator(std::shared_ptr<TlsServerContext> context, Options options, Adopt adopt);
  ~TlsTerminator();  // Stop(0) if running
  TlsTerminator(const TlsTerminator&) = delete;
  TlsTerminator& operator=(const TlsTerminator&) = delete;

  Status Start();

  // Takes an accepted TCP connection (closed at once beyond max_connections or when stopped).
  void Add(host::UniqueFd tcp);

  // Stops: connections still handshaking are closed at once; relaying ones get up to
  // `grace_s` to finish (their server side closes them), then are closed. Joins the thread.
  void Stop(double grace_s);

  struct Stats {
    uint64_t handshakes = 0;  // succeeded
    uint64_t failed = 0;      // failed or timed out
    uint64_t refused = 0;     // beyond max_connections
    int open = 0;
  };
  Stats stats() const;

 private:
  struct Conn;
  void Loop();              // the thread: takes new connections, polls, expires deadlines
  void Pump(Conn* c);       // whatever the connection can do now, without blocking
  void Handshake(Conn* c);  // one SSL_accept step; on success the plain end goes to adopt_
  void Relay(Conn* c);      // moves bytes both ways until nothing moves; ends a finished one
  void Wake();              // makes Loop look at incoming_ and stopping_

  std::shared_ptr<TlsServerContext> context_;
  Options options_;
  Adopt adopt_;
  host::UniqueFd wake_;
  std::thread thread_;

  std::mutex mu_;
  std::vector<host::UniqueFd> incoming_;
  bool stopping_ = false;
  double grace_s_ = 0;

  // The terminator's thread only.
  std::vector<std::unique_ptr<Conn>> conns_;

  std::atomic<uint64_t> handshakes_{0}, failed_{0}, refused_{0};
  std::atomic<int> open_{0};
};

}  // namespace sbx::api
