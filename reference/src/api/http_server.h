// A small HTTP/1.1 server: one epoll thread reads requests from every connection and a
// bounded pool of worker threads answers them (a handler may block for as long as a command
// runs in a sandbox, while idle keep-alive connections cost only a file descriptor).
//
// Limits that keep it standing whatever the peers do:
//   - at most max_connections open (beyond: an immediate 503 and close);
//   - a request must arrive within request_timeout_s of its first byte (else 408 and close);
//     an idle keep-alive connection is closed after idle_timeout_s;
//   - the head is at most 16 KiB and the body 8 MiB (ParseLimits); the head is passed to
//     `head_check` (authentication) BEFORE the body is read, so an unauthenticated peer can
//     never make the server buffer more than one head;
//   - after a protocol error the server answers, stops writing and discards input for at most
//     one second before closing ("lingering close"), so the peer can read the answer.
//
// TLS (ServerOptions::tls): accepted TCP connections go to a TlsTerminator (its own thread,
// handshakes bounded by tls_handshake_timeout_s, at most max_connections of them), which hands
// the server the plain end of a socketpair per established connection (Adopt): every limit
// above then applies unchanged.
//
// Thread-safety: Start/Stop from one controlling thread; the handler is called concurrently
// from the worker threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "api/http_message.h"
#include "api/listener.h"
#include "api/tls_terminator.h"
#include "host/fd.h"

namespace sbx::api {

struct ServerOptions {
  int workers = 16;
  int max_connections = 256;
  ParseLimits limits;
  double request_timeout_s = 30;
  double idle_timeout_s = 60;
  double write_timeout_s = 30;
  // One line per answered request: "METHOD PATH tenant=T status=N ms=X". Never bodies.
  std::function<void(std::string_view line)> access_log;
  // Set: TCP connections speak TLS with this context (a unix socket listener ignores it).
  std::shared_ptr<TlsServerContext> tls;
  double tls_handshake_timeout_s = 10;
};

using Handler = std::function<HttpResponse(const HttpRequest& request)>;
// Called with a complete head (body still unread, request.body empty); an answer refuses the
// request at once and the connection is closed.
using HeadCheck = std::function<std::optional<HttpResponse>(const HttpRequest& head)>;

class HttpServer {
 public:
  HttpServer(Listener listener, Handler handler, HeadCheck head_check, ServerOptions options);
  ~HttpServer();  // Stop() without a deadline if not stopped
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Publishes the listener (a unix socket appears at its path) and starts the threads.
  Status Start();

  // Stops accepting (a unix socket path is removed at once), closes idle connections and waits
  // up to drain_timeout_s for the requests being answered. True if they all finished; false
  // otherwise, and then the handler may still be running: the caller should exit the process
  // (destroying the server waits for the handlers).
  bool Stop(double drain_timeout_s);

  const ListenAddress& address() const { return address_; }
  bool tls() const { return terminator_ != nullptr; }

  // Hands the server a connected stream socket as if it had been accepted (the TLS
  // terminator's plain ends). Thread-safe; a stopping server closes it at once; beyond
  // max_connections it gets the 503 answer.
  void Adopt(host::UniqueFd fd);

  struct Stats {
    uint64_t requests = 0, accepted = 0, refused = 0, protocol_errors = 0, timeouts = 0;
    uint64_t tls_handshakes = 0, tls_failed = 0;  // TLS: established; failed or timed out
    int open_connections = 0;
    int tls_connections = 0;  // TLS: handshaking or relaying
    int busy_workers = 0;  // running the handler now
  };
  Stats stats() const;

 private:
  struct Conn;
  struct Job {
    Conn* conn;
    ParseOutcome outcome;                // kComplete or kError
    std::optional<HttpResponse> answer;  // set: send this (head check, timeout)
  };
  struct Done {
    Conn* conn;
    bool keep_open;
    bool linger;
  };

  void IoLoop();
  void WorkerLoop();
  void Accept();
  void AddConnection(host::UniqueFd fd);  // a new connection: a Conn, or 503 beyond the limit
  void OnReadable(Conn* c);
  void Dispatch(Conn* c, Job job);
  void TryNext(Conn* c);  // parse what is buffered; dispatch or re-arm
  void Arm(Conn* c);
  void Close(Conn* c);
  void Linger(Conn* c);
  void ProcessDone();
  void ExpireDeadlines();
  void Wake();

  std::optional<Listener> listener_;  // reset when stopping: no more connections
  ListenAddress address_;
  Handler handler_;
  HeadCheck head_check_;
  ServerOptions options_;
  host::UniqueFd epoll_, wake_;

  // IO thread only.
  std::map<Conn*, std::unique_ptr<Conn>> conns_;
  int busy_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::deque<Done> done_;
  std::vector<host::UniqueFd> adopted_;  // from Adopt(), for the IO thread
  std::unique_ptr<TlsTerminator> terminator_;
  bool stop_workers_ = false;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> io_exited_{false};
  double drain_timeout_s_ = 0;

  std::thread io_;
  std::vector<std::thread> workers_;
  bool started_ = false, stopped_ = false;

  std::atomic<uint64_t> requests_{0}, accepted_{0}, refused_{0}, protocol_errors_{0}, timeouts_{0};
  std::atomic<int> open_{0};
  std::atomic<int> busy_workers_{0};
};

}  // namespace sbx::api
