#include "common/process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>

namespace sandcheck {
namespace {

using Clock = std::chrono::steady_clock;

int PidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

}  // namespace

OwnedFd& OwnedFd::operator=(OwnedFd&& o) noexcept {
  if (this != &o) {
    Reset();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void OwnedFd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/sbin:/usr/bin:/sbin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string dir = p.substr(start, end - start);
    if (!dir.empty()) {
      std::string f = dir + "/" + name;
      if (::access(f.c_str(), X_OK) == 0) return f;
    }
    start = end + 1;
  }
  return "";
}

bool HybridUnified() {
  struct statfs sf {};
  return ::statfs("/sys/fs/cgroup/unified", &sf) == 0 &&
         static_cast<unsigned long>(sf.f_type) == CGROUP2_SUPER_MAGIC;
}

int WaitChild(pid_t pid, double timeout_s) {
  OwnedFd pfd(PidfdOpen(pid));
  if (pfd.get() >= 0) {
    struct pollfd p = {pfd.get(), POLLIN, 0};
    int ms = static_cast<int>(timeout_s * 1000);
    int r;
    while ((r = ::poll(&p, 1, ms)) < 0 && errno == EINTR) {
    }
    if (r == 0) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      int st = 0;
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      return -1;
    }
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return st;
}

std::string ReadAll(int fd, size_t max) {
  std::string out;
  if (fd < 0) return out;
  ::lseek(fd, 0, SEEK_SET);
  char buf[1024];
  ssize_t n;
  while (out.size() < max && (n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, n);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out.size() > 600 ? "…" + out.substr(out.size() - 600) : out;
}

pid_t Spawn(const ProcessSpec& spec, int out_fd, int err_fd, bool hide_unified) {
  std::vector<char*> args;
  for (const auto& a : spec.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  bool strip_tmpdir = spec.argv[0].ends_with("/runsc");
  std::vector<char*> env;
  for (char** e = environ; *e; ++e)
    if (!strip_tmpdir || !std::string_view(*e).starts_with("TMPDIR=")) env.push_back(*e);
  env.push_back(nullptr);
  int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    if (spec.private_cgroup_view) {
      if (::unshare(CLONE_NEWNS) != 0) ::_exit(120);
      if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(121);
      if (hide_unified && ::mount("tmpfs", "/sys/fs/cgroup/unified", "tmpfs",
                                  MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k") != 0)
        ::_exit(122);
    }
    ::dup2(devnull, 0);
    ::dup2(out_fd >= 0 ? out_fd : devnull, 1);
    ::dup2(err_fd >= 0 ? err_fd : devnull, 2);
    for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(args[0], args.data(), env.data());
    ::_exit(127);
  }
  int saved = errno;
  ::close(devnull);
  if (pid > 0) ::setpgid(pid, pid);  // no race with the child's own setpgid: same result
  errno = saved;
  return pid;
}

std::string DescribeStatus(int st, int err_fd, bool private_view, double timeout_s) {
  if (st < 0) return fmt::format("did not finish within {:g} s", timeout_s);
  std::string why;
  if (WIFEXITED(st)) {
    int code = WEXITSTATUS(st);
    if (private_view && code >= 120 && code <= 122)
      why = "could not make its private mount namespace";
    else
      why = code == 127 ? "could not be executed" : fmt::format("exited {}", code);
  } else {
    why = fmt::format("killed by signal {}", WTERMSIG(st));
  }
  std::string err = ReadAll(err_fd);
  return err.empty() ? why : why + ": " + err;
}

double TimedRun(const ProcessSpec& spec, bool hide_unified, std::string* why, double timeout_s) {
  OwnedFd err(::memfd_create("sandcheck-cli-stderr", MFD_CLOEXEC));
  auto t0 = Clock::now();
  pid_t pid = Spawn(spec, -1, err.get(), hide_unified);
  if (pid < 0) {
    *why = fmt::format("fork: {}", std::strerror(errno));
    return -1;
  }
  int st = WaitChild(pid, timeout_s);
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    *why = DescribeStatus(st, err.get(), spec.private_cgroup_view, timeout_s);
    return -1;
  }
  return s;
}

void KillProcessesNaming(const std::string& text, double timeout_s) {
  std::vector<OwnedFd> waiting;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    std::string name = e.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    pid_t pid = std::stoi(name);
    if (pid == ::getpid()) continue;
    // Read with read(2): a process may end while it is read, and libstdc++'s stream iterators
    // throw on that error (ESRCH).
    std::string cmd;
    if (OwnedFd cf(::open((e.path() / "cmdline").c_str(), O_RDONLY | O_CLOEXEC)); cf.get() >= 0) {
      char buf[4096];
      for (ssize_t n; (n = ::read(cf.get(), buf, sizeof buf)) > 0;)
        cmd.append(buf, static_cast<size_t>(n));
    }
    if (cmd.find(text) == std::string::npos) continue;
    OwnedFd pfd(PidfdOpen(pid));
    ::kill(pid, SIGKILL);
    if (pfd.get() >= 0) waiting.push_back(std::move(pfd));
  }
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  for (auto& pfd : waiting) {
    struct pollfd p = {pfd.get(), POLLIN, 0};
    int ms = static_cast<int>(
        std::chrono::duration<double, std::milli>(deadline - Clock::now()).count());
    if (ms > 0) ::poll(&p, 1, ms);
  }
}

}  // namespace sandcheck
