#include "common/process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace sandcheck::adapter {

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Clock::time_point DeadlineIn(double seconds) {
  constexpr double kMax = 365.0 * 24 * 3600;
  seconds = std::clamp(seconds, 0.0, kMax);
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

void Trace(std::string_view what) {
  static const Clock::time_point kStart = Clock::now();
  static const bool kOn = [] {
    const char* v = std::getenv("SANDCHECK_ADAPTER_TRACE");
    return v && *v && std::string_view(v) != "0";
  }();
  if (kOn) fmt::print(stderr, "[+{:.3f} s] {}\n", SecondsSince(kStart), what);
}

void TailBuffer::Append(const char* data, size_t n) {
  total_ += n;
  if (n >= capacity_) {
    data_.assign(data + (n - capacity_), capacity_);
    return;
  }
  data_.append(data, n);
  if (data_.size() > capacity_) data_.erase(0, data_.size() - capacity_);
}

sbx::StatusOr<Pipe> MakePipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return sbx::ErrnoStatus("pipe2");
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

int ExitCodeOf(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 255;
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return fmt::format("exit {}", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return fmt::format("killed by signal {} ({})", WTERMSIG(wait_status),
                       strsignal(WTERMSIG(wait_status)));
  }
  return fmt::format("wait status {:#x}", wait_status);
}

namespace {

// In the child: place `from` at `to`, clearing O_CLOEXEC. Async-signal-safe.
int PlaceFd(int from, int to) {
  if (from == to) {
    int flags = fcntl(to, F_GETFD);
    if (flags < 0 || fcntl(to, F_SETFD, flags & ~FD_CLOEXEC) < 0) return errno;
    return 0;
  }
  if (dup2(from, to) < 0) return errno;
  return 0;
}

[[noreturn]] void ChildFail(int report_fd, int err) {
  (void)!write(report_fd, &err, sizeof err);
  _exit(127);
}

}  // namespace

sbx::StatusOr<pid_t> Spawn(const SpawnSpec& spec) {
  if (spec.argv.empty()) return sbx::InvalidArgument("Spawn: empty argv");
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  UniqueFd devnull(open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!devnull.valid()) return sbx::ErrnoStatus("open /dev/null");
  ASSIGN_OR_RETURN(Pipe report, MakePipe());

  // Move the fds the child needs above the low numbers first, so that dup2 into 0..2 and the
  // extra targets cannot clobber a source that has not been placed yet.
  pid_t pid = fork();
  if (pid < 0) return sbx::ErrnoStatus("fork");
  if (pid == 0) {
    int rep = report.write.get();
    sigset_t empty;
    sigemptyset(&empty);
    sigprocmask(SIG_SETMASK, &empty, nullptr);
    for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGPIPE}) signal(s, SIG_DFL);
    std::vector<std::pair<int, int>> wanted = {
        {spec.stdin_fd >= 0 ? spec.stdin_fd : devnull.get(), 0},
        {spec.stdout_fd >= 0 ? spec.stdout_fd : devnull.get(), 1},
        {spec.stderr_fd >= 0 ? spec.stderr_fd : devnull.get(), 2}};
    wanted.insert(wanted.end(), spec.extra_fds.begin(), spec.extra_fds.end());
    int high = 1000;
    for (auto& [from, to] : wanted) {
      int moved = fcntl(from, F_DUPFD_CLOEXEC, high);
      if (moved < 0) ChildFail(rep, errno);
      from = moved;
      high = moved + 1;
    }
    if (rep < high) {
      int moved = fcntl(rep, F_DUPFD_CLOEXEC, high);
      if (moved < 0) ChildFail(rep, errno);
      rep = moved;
    }
    for (const auto& [from, to] : wanted) {
      if (int err = PlaceFd(from, to); err != 0) ChildFail(rep, err);
    }
    if (spec.child_hook) {
      if (int err = spec.child_hook(); err != 0) ChildFail(rep, err);
    }
    if (spec.env.empty()) {
      execvp(argv[0], argv.data());
    } else {
      execvpe(argv[0], argv.data(), envp.data());
    }
    ChildFail(rep, errno);
  }
  report.write.Reset();
  int child_err = 0;
  ssize_t n;
  do {
    n = read(report.read.get(), &child_err, sizeof child_err);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof child_err)) {
    // The child failed before exec and exits 127 at once; it is reaped by the Supervisor.
    if (child_err == ENOENT) {
      // A missing runtime is the environment failing, not a missing sandbox (kNotFound).
      return sbx::Unsupported(fmt::format("{}: not installed (not found in PATH)", spec.argv[0]));
    }
    return sbx::ErrnoStatus(fmt::format("starting {}", spec.argv[0]), child_err);
  }
  return pid;
}

sbx::StatusOr<std::unique_ptr<Supervisor>> Supervisor::Create(bool subreaper) {
  std::unique_ptr<Supervisor> sup(new Supervisor());
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&mask, s);
  if (sigprocmask(SIG_BLOCK, &mask, nullptr) != 0) return sbx::ErrnoStatus("sigprocmask");
  sup->restore_mask_ = true;
  int fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) return sbx::ErrnoStatus("signalfd");
  sup->signal_fd_.Reset(fd);
  // A pipe whose reader went away must give EPIPE, not kill the adapter.
  signal(SIGPIPE, SIG_IGN);
  if (subreaper && prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
    return sbx::ErrnoStatus("prctl(PR_SET_CHILD_SUBREAPER)");
  }
  return sup;
}

Supervisor::~Supervisor() {
  if (restore_mask_) {
    sigset_t mask;
    sigemptyset(&mask);
    for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&mask, s);
    sigprocmask(SIG_UNBLOCK, &mask, nullptr);
  }
}

void Supervisor::ReapAll() {
  for (;;) {
    int status = 0;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p <= 0) return;
    reaped_[p] = status;
  }
}

bool Supervisor::HandleSignalFd() {
  bool any = false;
  signalfd_siginfo si;
  while (read(signal_fd_.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    any = true;
    if (si.ssi_signo != SIGCHLD) {
      stop_signal_ = static_cast<int>(si.ssi_signo);
      stop_pending_ = true;
    }
  }
  return any;
}

std::optional<int> Supervisor::Reaped(pid_t pid) const {
  auto it = reaped_.find(pid);
  if (it == reaped_.end()) return std::nullopt;
  return it->second;
}

namespace {

// Reads what is there from one stream; false at EOF or error.
bool ReadSome(Supervisor::Stream& s) {
  char buf[16384];
  for (;;) {
    ssize_t n = read(s.fd.get(), buf, sizeof buf);
    if (n > 0) {
      s.tail->Append(buf, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < sizeof buf) return true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return true;
    return false;
  }
}

int PollTimeoutMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return static_cast<int>(std::min<long long>(left.count() + 1, INT_MAX));
}

}  // namespace

Supervisor::Wake Supervisor::Wait(pid_t pid, Clock::time_point deadline,
                                  std::vector<Stream>& streams, int event_fd, int* wait_status) {
  for (;;) {
    ReapAll();
    if (pid > 0) {
      if (auto st = Reaped(pid)) {
        if (wait_status) *wait_status = *st;
        return Wake::kExited;
      }
    }
    if (stop_pending_) {
      stop_pending_ = false;
      return Wake::kSignal;
    }
    if (Clock::now() >= deadline) return Wake::kDeadline;

    std::vector<pollfd> pfds;
    pfds.push_back({signal_fd_.get(), POLLIN, 0});
    if (event_fd >= 0) pfds.push_back({event_fd, POLLIN, 0});
    size_t first_stream = pfds.size();
    for (auto& s : streams) pfds.push_back({s.fd.valid() ? s.fd.get() : -1, POLLIN, 0});
    int n = poll(pfds.data(), pfds.size(), PollTimeoutMs(deadline));
    if (n < 0 && errno != EINTR) return Wake::kDeadline;  // cannot happen with valid fds
    if (n <= 0) continue;
    if (pfds[0].revents) HandleSignalFd();
    if (event_fd >= 0 && pfds[1].revents) return Wake::kEvent;
    for (size_t i = 0; i < streams.size(); ++i) {
      if (pfds[first_stream + i].revents && !ReadSome(streams[i])) streams[i].fd.Reset();
    }
  }
}

void Supervisor::Drain(std::vector<Stream>& streams, Clock::time_point deadline) {
  for (;;) {
    bool open =
        std::any_of(streams.begin(), streams.end(), [](const Stream& s) { return s.fd.valid(); });
    if (!open || Clock::now() >= deadline) return;
    std::vector<pollfd> pfds;
    pfds.push_back({signal_fd_.get(), POLLIN, 0});
    for (auto& s : streams) pfds.push_back({s.fd.valid() ? s.fd.get() : -1, POLLIN, 0});
    int n = poll(pfds.data(), pfds.size(), PollTimeoutMs(deadline));
    if (n <= 0) continue;
    if (pfds[0].revents) {
      HandleSignalFd();
      ReapAll();
    }
    for (size_t i = 0; i < streams.size(); ++i) {
      if (pfds[1 + i].revents && !ReadSome(streams[i])) streams[i].fd.Reset();
    }
  }
}

sbx::StatusOr<RunResult> Run(Supervisor& sup, std::vector<std::string> argv,
                             const RunOptions& options) {
  ASSIGN_OR_RETURN(Pipe out, MakePipe());
  ASSIGN_OR_RETURN(Pipe err, MakePipe());
  for (int fd : {out.read.get(), err.read.get()}) fcntl(fd, F_SETFL, O_NONBLOCK);
  SpawnSpec spec;
  spec.argv = std::move(argv);
  spec.stdin_fd = options.stdin_fd;
  spec.stdout_fd = out.write.get();
  spec.stderr_fd = err.write.get();
  spec.child_hook = options.child_hook;
  auto start = Clock::now();
  Trace(fmt::format("run {}", fmt::join(spec.argv, " ")));
  ASSIGN_OR_RETURN(pid_t pid, Spawn(spec));
  out.write.Reset();
  err.write.Reset();
  TailBuffer out_tail, err_tail;
  std::vector<Supervisor::Stream> streams;
  streams.push_back({std::move(out.read), &out_tail});
  streams.push_back({std::move(err.read), &err_tail});
  RunResult r;
  auto wake = sup.Wait(pid, DeadlineIn(options.timeout_s), streams, -1, &r.wait_status);
  if (wake != Supervisor::Wake::kExited) {
    r.timed_out = wake == Supervisor::Wake::kDeadline;
    kill(pid, SIGKILL);
    sup.Wait(pid, DeadlineIn(5), streams, -1, &r.wait_status);
  }
  // A helper's own children may hold the pipes; do not wait for them long.
  sup.Drain(streams, DeadlineIn(0.5));
  r.seconds = SecondsSince(start);
  Trace(fmt::format("done {} ({:.3f} s, {})", spec.argv[0], r.seconds,
                    DescribeWaitStatus(r.wait_status)));
  r.out = out_tail.data();
  r.err = err_tail.data();
  if (wake == Supervisor::Wake::kSignal) {
    return sbx::Internal(
        fmt::format("{}: adapter interrupted by signal {}", spec.argv[0], sup.stop_signal()));
  }
  return r;
}

std::string DescribeFailure(const std::vector<std::string>& argv, const RunResult& r) {
  std::string what = argv.empty() ? "?" : argv[0];
  if (argv.size() > 1) what += " " + argv[1];
  std::string detail = r.err.empty() ? r.out : r.err;
  while (!detail.empty() && (detail.back() == '\n' || detail.back() == ' ')) detail.pop_back();
  if (r.timed_out) return fmt::format("{}: timed out after {:.1f} s: {}", what, r.seconds, detail);
  return fmt::format("{}: {}: {}", what, DescribeWaitStatus(r.wait_status), detail);
}

}  // namespace sandcheck::adapter
