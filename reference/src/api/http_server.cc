#include "api/http_server.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>

#include "wire/error_map.h"

namespace sbx::api {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kMaxReadPerEvent = 1024 * 1024;  // then let other connections have a turn
constexpr double kLingerSeconds = 1.0;
constexpr double kTlsFlushOnStopSeconds = 2.0;

// Tags for the two non-connection fds in the epoll set.
char kListenTag, kWakeTag;

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Writes everything or fails; a peer that does not read within `timeout_s` is dropped.
bool WriteAll(int fd, std::string_view data, double timeout_s) {
  auto deadline = Clock::now() + Seconds(timeout_s);
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, static_cast<int>(left)) < 0 && errno != EINTR) return false;
      continue;
    }
    return false;
  }
  return true;
}

HttpResponse ProtocolError(int status, const std::string& message) {
  HttpResponse r;
  r.status = status;
  r.body = wire::ErrorBody(Code::kInvalidArgument, message);
  return r;
}

}  // namespace

struct HttpServer::Conn {
  host::UniqueFd fd;
  RequestReader reader;
  enum class State { kReading, kBusy, kLingering } state = State::kReading;
  Clock::time_point deadline;
  bool in_request = false;    // bytes of an unfinished request are buffered
  bool head_checked = false;  // head_check ran for the pending head
  bool peer_closed = false;   // EOF seen: answer what is complete, then close
  bool registered = false;    // in the epoll set
  Conn(int f, ParseLimits l) : fd(f), reader(l) {}
};

HttpServer::HttpServer(Listener listener, Handler handler, HeadCheck head_check,
                       ServerOptions options)
    : listener_(std::move(listener)),
      address_(listener_->address()),
      handler_(std::move(handler)),
      head_check_(std::move(head_check)),
      options_(std::move(options)) {}

HttpServer::~HttpServer() {
  if (started_) Stop(-1);
}

Status HttpServer::Start() {
  if (started_) return FailedPrecondition("server already started");
  epoll_.Reset(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid()) return ErrnoStatus("epoll_create1");
  wake_.Reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_.valid()) return ErrnoStatus("eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &kListenTag;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listener_->fd(), &ev) != 0)
    return ErrnoStatus("epoll_ctl listen");
  ev.data.ptr = &kWakeTag;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) != 0)
    return ErrnoStatus("epoll_ctl eventfd");
  if (options_.tls && address_.kind == ListenAddress::Kind::kTcp) {
    TlsTerminator::Options to;
    to.max_connections = options_.max_connections;
    to.handshake_timeout_s = options_.tls_handshake_timeout_s;
    to.flush_timeout_s = options_.write_timeout_s;
    terminator_ = std::make_unique<TlsTerminator>(
        options_.tls, to, [this](host::UniqueFd fd) { Adopt(std::move(fd)); });
    RETURN_IF_ERROR(terminator_->Start());
  }
  RETURN_IF_ERROR(listener_->Publish());
  started_ = true;
  for (int i = 0; i < std::max(1, options_.workers); ++i)
    workers_.emplace_back([this] { WorkerLoop(); });
  io_ = std::thread([this] { IoLoop(); });
  return Status::Ok();
}

bool HttpServer::Stop(double drain_timeout_s) {
  if (!started_) return true;
  if (!stopped_) {
    {
      std::lock_guard lock(mu_);
      drain_timeout_s_ = drain_timeout_s;
    }
    stopping_ = true;
    Wake();
    if (io_.joinable()) io_.join();
    stopped_ = true;
  }
  bool drained = busy_ == 0;
  if (!drained && drain_timeout_s >= 0) return false;
  // Every request was answered (or we were told to wait for them): end the workers.
  {
    std::lock_guard lock(mu_);
    stop_workers_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) {
    if (w.joinable()) w.join();
  }
  workers_.clear();
  conns_.clear();
  {
    std::lock_guard lock(mu_);
    adopted_.clear();
  }
  open_ = 0;
  // Every plain end is closed now: the terminator flushes the last answers (a client that does
  // not read them gets kTlsFlushOnStopSeconds) and ends.
  if (terminator_) terminator_->Stop(kTlsFlushOnStopSeconds);
  started_ = false;
  return drained;
}

void HttpServer::Adopt(host::UniqueFd fd) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || io_exited_) return;  // closed here: the peer sees the end
    adopted_.push_back(std::move(fd));
  }
  Wake();
}

HttpServer::Stats HttpServer::stats() const {
  Stats s;
  s.requests = requests_;
  s.accepted = accepted_;
  s.refused = refused_;
  s.protocol_errors = protocol_errors_;
  s.timeouts = timeouts_;
  s.open_connections = open_;
  s.busy_workers = busy_workers_;
  if (terminator_) {
    auto t = terminator_->stats();
    s.refused += t.refused;
    s.tls_handshakes = t.handshakes;
    s.tls_failed = t.failed;
    s.tls_connections = t.open;
  }
  return s;
}

void HttpServer::Wake() {
  uint64_t one = 1;
  ssize_t n = write(wake_.get(), &one, sizeof one);
  (void)n;  // a full counter already means "wake up"
}

void HttpServer::IoLoop() {
  std::vector<epoll_event> events(64);
  bool listening = true;
  std::optional<Clock::time_point> drain_deadline;
  while (true) {
    if (stopping_ && listening) {
      // Stop accepting at once; a unix socket path disappears with the Listener's cleanup.
      epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listener_->fd(), nullptr);
      listener_.reset();
      listening = false;
      double d;
      {
        std::lock_guard lock(mu_);
        d = drain_timeout_s_;
      }
      if (d >= 0) drain_deadline = Clock::now() + Seconds(d);
      // Idle and half-read connections are closed; busy ones finish their answer.
      std::vector<Conn*> idle;
      for (auto& [p, c] : conns_) {
        if (c->state != Conn::State::kBusy) idle.push_back(p);
      }
      for (Conn* c : idle) Close(c);
    }
    if (!listening && busy_ == 0) break;
    if (drain_deadline && Clock::now() >= *drain_deadline) break;

    int timeout_ms = 1000;
    auto now = Clock::now();
    if (drain_deadline) {
      auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(*drain_deadline - now).count() + 1;
      timeout_ms = static_cast<int>(std::clamp<int64_t>(ms, 0, timeout_ms));
    }
    for (auto& [p, c] : conns_) {
      if (c->state == Conn::State::kBusy) continue;
      auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(c->deadline - now).count() + 1;
      timeout_ms = static_cast<int>(std::clamp<int64_t>(ms, 0, timeout_ms));
    }
    int n = epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), timeout_ms);
    if (n < 0 && errno != EINTR) break;
    bool woke = false;
    for (int i = 0; i < n; ++i) {
      void* tag = events[static_cast<size_t>(i)].data.ptr;
      if (tag == &kListenTag) {
        if (listening) Accept();
      } else if (tag == &kWakeTag) {
        uint64_t v;
        ssize_t r = read(wake_.get(), &v, sizeof v);
        (void)r;
        woke = true;
      } else {
        OnReadable(static_cast<Conn*>(tag));
      }
    }
    if (woke) {
      ProcessDone();
      std::vector<host::UniqueFd> adopted;
      {
        std::lock_guard lock(mu_);
        adopted.swap(adopted_);
      }
      for (auto& fd : adopted) {
        if (listening) AddConnection(std::move(fd));  // else: closed, we are stopping
      }
    }
    ExpireDeadlines();
  }
  io_exited_ = true;
}

void HttpServer::Accept() {
  while (true) {
    int fd = accept4(listener_->fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN, or EMFILE and friends: try again on the next event
    }
    if (terminator_) {
      terminator_->Add(host::UniqueFd(fd));  // back through Adopt once the handshake is done
      continue;
    }
    AddConnection(host::UniqueFd(fd));
  }
}

void HttpServer::AddConnection(host::UniqueFd fd) {
  if (static_cast<int>(conns_.size()) >= options_.max_connections) {
    ++refused_;
    HttpResponse r;
    r.status = 503;
    r.headers.push_back({"Retry-After", "1"});
    r.body =
        wire::ErrorBody(Code::kSandboxUnavailable, "sandboxd: too many connections, try again");
    std::string bytes = SerializeResponse(r, false);
    ssize_t w = send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
    return;  // closed by UniqueFd
  }
  ++accepted_;
  auto c = std::make_unique<Conn>(fd.Release(), options_.limits);
  Conn* p = c.get();
  p->deadline = Clock::now() + Seconds(options_.idle_timeout_s);
  conns_[p] = std::move(c);
  open_ = static_cast<int>(conns_.size());
  Arm(p);
}

// One-shot: after an event the connection is disabled until it is armed again, so the IO
// thread never sees events of a connection a worker is answering on.
void HttpServer::Arm(Conn* c) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
  ev.data.ptr = c;
  if (epoll_ctl(epoll_.get(), c->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd.get(), &ev) !=
      0) {
    Close(c);
    return;
  }
  c->registered = true;
}

void HttpServer::Close(Conn* c) {
  if (c->registered) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->fd.get(), nullptr);
  conns_.erase(c);  // closes the fd
  open_ = static_cast<int>(conns_.size());
}

void HttpServer::Linger(Conn* c) {
  shutdown(c->fd.get(), SHUT_WR);
  c->state = Conn::State::kLingering;
  c->deadline = Clock::now() + Seconds(kLingerSeconds);
  Arm(c);
}

void HttpServer::OnReadable(Conn* c) {
  char buf[kReadChunk];
  size_t total = 0;
  bool eof = false, error = false;
  while (total < kMaxReadPerEvent) {
    ssize_t n = recv(c->fd.get(), buf, sizeof buf, 0);
    if (n > 0) {
      total += static_cast<size_t>(n);
      if (c->state == Conn::State::kReading)
        c->reader.Append(std::string_view(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n == 0) {
      eof = true;
    } else if (errno == EINTR) {
      continue;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
      error = true;
    }
    break;
  }
  if (c->state == Conn::State::kLingering) {
    if (eof || error)
      Close(c);
    else
      Arm(c);
    return;
  }
  if (error) {
    Close(c);
    return;
  }
  c->peer_closed = eof;
  TryNext(c);
}

void HttpServer::TryNext(Conn* c) {
  ParseOutcome o = c->reader.Next();
  if (o.kind != ParseOutcome::Kind::kIncomplete) {
    if (o.kind == ParseOutcome::Kind::kError) ++protocol_errors_;
    Dispatch(c, Job{c, std::move(o), std::nullopt});
    return;
  }
  if (const HttpRequest* head = c->reader.PendingHead(); head != nullptr && !c->head_checked) {
    c->head_checked = true;
    if (head_check_) {
      if (auto answer = head_check_(*head)) {
        ParseOutcome refused;
        refused.kind = ParseOutcome::Kind::kError;  // the body stays unread: close after
        refused.request = *head;
        Dispatch(c, Job{c, std::move(refused), std::move(answer)});
        return;
      }
    }
  }
  if (c->reader.WantsContinue()) {
    constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    ssize_t w = send(c->fd.get(), kContinue.data(), kContinue.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;  // 25 bytes into an empty socket buffer; if it fails the client sends anyway
    c->reader.MarkContinueSent();
  }
  if (c->peer_closed) {
    Close(c);  // the peer went away before finishing a request (or between requests)
    return;
  }
  if (c->reader.buffered() > 0 && !c->in_request) {
    c->in_request = true;
    c->deadline = Clock::now() + Seconds(options_.request_timeout_s);
  }
  Arm(c);
}

void HttpServer::Dispatch(Conn* c, Job job) {
  c->state = Conn::State::kBusy;
  ++busy_;
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void HttpServer::ProcessDone() {
  std::deque<Done> done;
  {
    std::lock_guard lock(mu_);
    done.swap(done_);
  }
  for (const Done& d : done) {
    --busy_;
    Conn* c = d.conn;
    if (stopping_ || !d.keep_open) {
      if (d.linger && !stopping_)
        Linger(c);
      else
        Close(c);
      continue;
    }
    c->state = Conn::State::kReading;
    c->in_request = false;
    c->head_checked = false;
    c->deadline = Clock::now() + Seconds(options_.idle_timeout_s);
    TryNext(c);  // a pipelined request may be buffered already
  }
}

void HttpServer::ExpireDeadlines() {
  auto now = Clock::now();
  std::vector<Conn*> expired;
  for (auto& [p, c] : conns_) {
    if (c->state != Conn::State::kBusy && c->deadline <= now) expired.push_back(p);
  }
  for (Conn* c : expired) {
    if (c->state == Conn::State::kReading && c->in_request) {
      ++timeouts_;
      // Armed and waiting: take it out of the set before a worker answers on it.
      epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->fd.get(), nullptr);
      c->registered = false;
      ParseOutcome o;
      o.kind = ParseOutcome::Kind::kError;
      o.status = 408;
      o.message = fmt::format("request not complete within {} s", options_.request_timeout_s);
      Dispatch(c, Job{c, std::move(o), std::nullopt});
    } else {
      Close(c);
    }
  }
}

void HttpServer::WorkerLoop() {
  while (true) {
    Job job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_workers_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    auto t0 = Clock::now();
    const bool complete = job.outcome.kind == ParseOutcome::Kind::kComplete;
    HttpResponse response;
    if (job.answer) {
      response = std::move(*job.answer);
    } else if (!complete) {
      response = ProtocolError(job.outcome.status, job.outcome.message);
    } else {
      try {
        ++busy_workers_;
        response = handler_(job.outcome.request);
        --busy_workers_;
      } catch (...) {
        --busy_workers_;
        // The handler must not throw; if it does, the caller gets a 500, never a dead server.
        response = HttpResponse{};
        response.status = 500;
        response.body =
            wire::ErrorBody(Code::kInternal, "internal error while handling the request");
      }
    }
    ++requests_;
    bool keep = complete && job.outcome.request.keep_alive && !job.conn->peer_closed && !stopping_;
    std::string bytes = SerializeResponse(response, keep);
    // Logged before the answer goes out, so a client that has its answer finds the line.
    const HttpRequest& rq = job.outcome.request;
    std::string what =
        fmt::format("{} {} tenant={} status={}", rq.method.empty() ? "-" : rq.method,
                    rq.path.empty() ? "-" : rq.path, response.log_tenant, response.status);
    if (options_.access_log) {
      double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      options_.access_log(fmt::format("{} ms={:.1f}", what, ms));
    }
    bool written = WriteAll(job.conn->fd.get(), bytes, options_.write_timeout_s);
    if (!written && options_.access_log) options_.access_log(what + ": answer not delivered");
    {
      std::lock_guard lock(mu_);
      done_.push_back(Done{job.conn, keep && written, !complete && written});
    }
    Wake();
  }
}

}  // namespace sbx::api
