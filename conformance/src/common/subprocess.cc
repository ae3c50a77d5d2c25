#include "common/subprocess.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/clock.h"

extern char** environ;

namespace sandcheck {
namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_interrupts{0};

using Clock = std::chrono::steady_clock;

// An fd closed on scope exit.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { Close(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void Reset(int fd) {
    Close();
    fd_ = fd;
  }

 private:
  int fd_;
};

sbx::Status MakePipe(Fd* r, Fd* w) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return sbx::ErrnoStatus("pipe2");
  r->Reset(p[0]);
  w->Reset(p[1]);
  return sbx::Status::Ok();
}

std::vector<std::string> BuildEnv(const std::map<std::string, std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string s = *e;
    auto eq = s.find('=');
    if (eq != std::string::npos && extra.count(s.substr(0, eq))) continue;
    env.push_back(std::move(s));
  }
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  return env;
}

// Spawns argv as a process-group leader with the given fds as 0/1/2 (-1 = /dev/null for stdin).
sbx::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, int in_fd, int out_fd, int err_fd,
                           const std::map<std::string, std::string>& extra_env) {
  if (argv.empty()) return sbx::InvalidArgument("empty command");
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  if (in_fd >= 0) {
    posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
  } else {
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  }
  if (out_fd >= 0) posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  if (err_fd >= 0) posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
  sigset_t none, dflt;
  sigemptyset(&none);
  sigemptyset(&dflt);
  for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&dflt, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &dflt);
  posix_spawnattr_setpgroup(&attr, 0);  // its own group: a timeout kills all it started
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env = BuildEnv(extra_env);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0].c_str(), &fa, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return sbx::ErrnoStatus(fmt::format("cannot run {}", argv[0]), rc);
  return pid;
}

void KillGroupAndReap(pid_t pid, int* status) {
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

void Interrupt() {
  g_interrupted.store(true);
  g_interrupts.fetch_add(1);
}
bool Interrupted() { return g_interrupted.load(); }
void ClearPendingInterrupt() { g_interrupted.store(false); }
int InterruptCount() { return g_interrupts.load(); }

sbx::StatusOr<SubprocessResult> RunSubprocess(const SubprocessOptions& o) {
  Fd in_r, in_w, out_r, out_w, err_r, err_w;
  RETURN_IF_ERROR(MakePipe(&in_r, &in_w));
  RETURN_IF_ERROR(MakePipe(&out_r, &out_w));
  RETURN_IF_ERROR(MakePipe(&err_r, &err_w));
  auto t0 = Clock::now();
  ASSIGN_OR_RETURN(pid_t pid, Spawn(o.argv, in_r.get(), out_w.get(), err_w.get(), o.extra_env));
  in_r.Close();
  out_w.Close();
  err_w.Close();
  for (int fd : {in_w.get(), out_r.get(), err_r.get()}) ::fcntl(fd, F_SETFL, O_NONBLOCK);
  // A pidfd makes the child's exit a poll event: no polling interval added to every call.
  Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));

  SubprocessResult res;
  size_t in_off = 0;
  if (o.stdin_data.empty()) in_w.Close();
  bool out_open = true, err_open = true, exited = false;
  int status = 0;
  Clock::time_point exited_at;
  char buf[65536];
  auto drain = [&](Fd& fd, std::string& dst, bool& open) {
    while (true) {
      ssize_t n = ::read(fd.get(), buf, sizeof buf);
      if (n > 0) {
        size_t room = o.max_output_bytes > dst.size() ? o.max_output_bytes - dst.size() : 0;
        if (static_cast<size_t>(n) > room) res.output_truncated = true;
        dst.append(buf, std::min(static_cast<size_t>(n), room));
        continue;
      }
      if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        open = false;
        fd.Close();
      }
      return;
    }
  };
  while (true) {
    if (!exited) {
      pid_t w = ::waitpid(pid, &status, WNOHANG);
      if (w == pid) {
        exited = true;
        exited_at = Clock::now();
      }
    }
    // Done when the child is gone and its pipes are closed; a grandchild that keeps the pipes
    // open (a daemon the adapter started) gets 0.5 s, then we stop listening to it.
    if (exited && ((!out_open && !err_open) || SecondsSince(exited_at) > 0.5)) break;
    double left = o.timeout_s - SecondsSince(t0);
    if (left <= 0 || Interrupted()) {
      if (!exited)
        KillGroupAndReap(pid, &status);
      else
        ::kill(-pid, SIGKILL);
      res.timed_out = !Interrupted();
      res.seconds = SecondsSince(t0);
      if (Interrupted()) return sbx::Internal("interrupted");
      return res;
    }
    pollfd fds[4];
    int n = 0;
    int in_idx = -1, out_idx = -1, err_idx = -1;
    if (!exited && pidfd.get() >= 0) fds[n++] = {pidfd.get(), POLLIN, 0};
    if (in_w.get() >= 0) {
      in_idx = n;
      fds[n++] = {in_w.get(), POLLOUT, 0};
    }
    if (out_open) {
      out_idx = n;
      fds[n++] = {out_r.get(), POLLIN, 0};
    }
    if (err_open) {
      err_idx = n;
      fds[n++] = {err_r.get(), POLLIN, 0};
    }
    // Without a pidfd (old kernels) the exit is noticed by waitpid every 20 ms; with one at once.
    double cap = pidfd.get() >= 0 && !exited ? 0.25 : 0.02;
    int wait_ms = static_cast<int>(std::min(left, cap) * 1000) + 1;
    int rc = n > 0 ? ::poll(fds, n, wait_ms)
                   : (std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms)), 0);
    if (rc < 0 && errno != EINTR) {
      int err = errno;
      KillGroupAndReap(pid, &status);
      return sbx::ErrnoStatus("poll", err);
    }
    if (rc <= 0) continue;
    if (in_idx >= 0 && fds[in_idx].revents) {
      if (fds[in_idx].revents & (POLLERR | POLLHUP)) {
        in_w.Close();  // the child closed stdin without reading it all: its business
      } else {
        ssize_t w = ::write(in_w.get(), o.stdin_data.data() + in_off, o.stdin_data.size() - in_off);
        if (w > 0) in_off += static_cast<size_t>(w);
        if ((w < 0 && errno != EAGAIN && errno != EINTR) || in_off >= o.stdin_data.size())
          in_w.Close();
      }
    }
    if (out_idx >= 0 && fds[out_idx].revents) drain(out_r, res.out, out_open);
    if (err_idx >= 0 && fds[err_idx].revents) drain(err_r, res.err, err_open);
  }
  res.seconds = SecondsSince(t0);
  if (WIFEXITED(status)) {
    res.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    res.term_signal = WTERMSIG(status);
  }
  return res;
}

ChildProcess::ChildProcess(ChildProcess&& o) noexcept
    : pid_(o.pid_), stdout_fd_(o.stdout_fd_), stdin_fd_(o.stdin_fd_) {
  o.pid_ = -1;
  o.stdout_fd_ = -1;
  o.stdin_fd_ = -1;
}

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    Stop();
    pid_ = o.pid_;
    stdout_fd_ = o.stdout_fd_;
    stdin_fd_ = o.stdin_fd_;
    o.pid_ = -1;
    o.stdout_fd_ = -1;
    o.stdin_fd_ = -1;
  }
  return *this;
}

ChildProcess::~ChildProcess() { Stop(); }

void ChildProcess::Stop(double grace_s) {
  Kill(grace_s);
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
  if (stdin_fd_ >= 0) ::close(stdin_fd_);
  stdout_fd_ = stdin_fd_ = -1;
}

void ChildProcess::Kill(double grace_s) {
  if (pid_ <= 0) return;
  ::kill(-pid_, SIGTERM);
  int status = 0;
  auto t0 = Clock::now();
  while (SecondsSince(t0) < grace_s) {
    pid_t w = ::waitpid(pid_, &status, WNOHANG);
    if (w == pid_ || (w < 0 && errno == ECHILD)) {
      ::kill(-pid_, SIGKILL);  // anything it left in its group
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  KillGroupAndReap(pid_, &status);
  pid_ = -1;
}

sbx::StatusOr<ChildProcess> StartChild(const std::vector<std::string>& argv) {
  Fd out_r, out_w, in_r, in_w;
  RETURN_IF_ERROR(MakePipe(&out_r, &out_w));
  RETURN_IF_ERROR(MakePipe(&in_r, &in_w));
  ASSIGN_OR_RETURN(pid_t pid, Spawn(argv, in_r.get(), out_w.get(), out_w.get(), {}));
  return ChildProcess(pid, out_r.release(), in_w.release());
}

sbx::StatusOr<std::string> ReadLine(int fd, double timeout_s) {
  std::string line;
  auto t0 = Clock::now();
  while (true) {
    double left = timeout_s - SecondsSince(t0);
    if (left <= 0)
      return sbx::Status(sbx::Code::kTimeout,
                         fmt::format("no line within {:.1f} s (got \"{}\")", timeout_s, line));
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, static_cast<int>(left * 1000) + 1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return sbx::ErrnoStatus("poll");
    if (rc == 0) continue;
    char c;
    ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return sbx::Internal(fmt::format("output closed before a full line (got \"{}\")", line));
    if (c == '\n') return line;
    line.push_back(c);
    if (line.size() > 4096) return sbx::Internal("line too long");
  }
}

}  // namespace sandcheck
