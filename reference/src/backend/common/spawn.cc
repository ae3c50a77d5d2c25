#include "backend/common/spawn.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "host/cgroup.h"

namespace sbx::backend {
namespace {

using Clock = std::chrono::steady_clock;

// What the child needs, prepared in the parent (the child may not allocate).
struct ChildArgs {
  std::vector<char*> argv;
  std::vector<char*> envp;
  bool private_mounts = false;
  std::vector<const char*> hide;
  struct Overlay {
    const char* scratch;
    const char* scratch_opts;
    const char* upper;
    const char* work;
    const char* target;
    const char* opts;
  };
  std::vector<Overlay> overlays;
  const int* procs_fds = nullptr;
  size_t procs_count = 0;
  int stdio[3] = {-1, -1, -1};
  std::vector<std::pair<int, int>> extra;  // (source, target)
  int err_pipe = -1;
  bool shim = false;
  int status_pipe = -1;
  int exec_fd = -1;  // SpawnPlan::exec_fd
};

// Steps reported back through the error pipe when they fail.
enum Step : int {
  kStepUnshare = 1,
  kStepSlave,
  kStepHide,
  kStepScratch,
  kStepUpperDirs,
  kStepOverlay,
  kStepCgroup,
  kStepFds,
  kStepExec,
  kStepShim,
};

const char* StepName(int step) {
  switch (step) {
    case kStepUnshare:
      return "unshare(CLONE_NEWNS)";
    case kStepSlave:
      return "making / a slave mount";
    case kStepHide:
      return "mounting a tmpfs over a hidden path";
    case kStepScratch:
      return "mounting the scratch tmpfs";
    case kStepUpperDirs:
      return "creating the overlay's upper and work dirs";
    case kStepOverlay:
      return "mounting the overlay root";
    case kStepCgroup:
      return "joining the sandbox cgroup";
    case kStepFds:
      return "arranging descriptors";
    case kStepExec:
      return "exec";
    case kStepShim:
      return "starting the shim (subreaper, fork)";
  }
  return "?";
}

[[noreturn]] void Fail(const ChildArgs* a, int step) {
  int msg[2] = {step, errno};
  ssize_t n = write(a->err_pipe, msg, sizeof msg);
  (void)n;
  _exit(127);
}

[[noreturn]] void ExecCommand(ChildArgs* a);

// The child's side: async-signal-safe system calls only (the runtime is multi-threaded).
int ChildMain(void* p) {
  // A copy of the parent's memory (no CLONE_VM): adjusting it here is private to the child.
  auto* a = static_cast<ChildArgs*>(p);
  // The error pipe moves out of the way of the descriptors placed below; it is close-on-exec.
  a->err_pipe = fcntl(a->err_pipe, F_DUPFD_CLOEXEC, 100);
  if (a->err_pipe < 0) _exit(126);
  // So does the binary to execute, if any (close-on-exec: the kernel has opened it by then).
  if (a->exec_fd >= 0) {
    a->exec_fd = fcntl(a->exec_fd, F_DUPFD_CLOEXEC, 100);
    if (a->exec_fd < 0) _exit(126);
  }
  // What the runtime command creates (the overlay's upper directory is the container's root
  // directory, device nodes, state files) must not depend on the umask of whoever started the
  // runtime: under umask 077 the root would be 0700 and no tool could run.
  umask(022);
  if (a->private_mounts) {
    // SECURITY: a mount namespace of this command only; slave propagation so that nothing
    // mounted here reaches the host's mount table.
    if (unshare(CLONE_NEWNS) != 0) Fail(a, kStepUnshare);
    if (mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) Fail(a, kStepSlave);
    for (const char* dir : a->hide) {
      if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=755") != 0) {
        Fail(a, kStepHide);
      }
    }
    for (const auto& o : a->overlays) {
      // RES-3: every write of the container lands in this tmpfs, whose size is the quota.
      if (mount("tmpfs", o.scratch, "tmpfs", MS_NOSUID | MS_NODEV, o.scratch_opts) != 0) {
        Fail(a, kStepScratch);
      }
      if ((mkdir(o.upper, 0755) != 0 && errno != EEXIST) ||
          (mkdir(o.work, 0755) != 0 && errno != EEXIST)) {
        Fail(a, kStepUpperDirs);
      }
      // SECURITY (FS-1): the image is overlayfs's read-only lower layer: the container can
      // never write to the shared, content-addressed image.
      if (mount("overlay", o.target, "overlay", MS_NOSUID | MS_NODEV, o.opts) != 0) {
        Fail(a, kStepOverlay);
      }
    }
  }
  if (a->shim) {
    a->status_pipe = fcntl(a->status_pipe, F_DUPFD_CLOEXEC, 100);
    if (a->status_pipe < 0) Fail(a, kStepShim);
    // The shim: a subreaper for everything the command leaves behind (common/spawn.h).
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) Fail(a, kStepShim);
    prctl(PR_SET_NAME, "sbx-oci-shim", 0, 0, 0);  // for ps: comm only, argv stays the runtime's
    // A parent that went away must not end the reaping: writes fail with EPIPE instead.
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    if (sigaction(SIGPIPE, &ign, nullptr) != 0) Fail(a, kStepShim);
    // A raw fork: glibc's fork() would run atfork handlers in this copy of a multi-threaded
    // process, where locks held by other threads at clone time are never released.
    pid_t cmd = static_cast<pid_t>(syscall(SYS_fork));
    if (cmd < 0) Fail(a, kStepShim);
    if (cmd == 0) ExecCommand(a);
    int sfd = a->status_pipe;
    int pid_msg = cmd;
    if (write(sfd, &pid_msg, sizeof pid_msg) < 0) {
    }
    // Nothing of the runtime stays open here (the error pipe included: the parent sees EOF once
    // the command has exec'd), only the status pipe.
    if (sfd > 0) syscall(SYS_close_range, 0U, static_cast<unsigned>(sfd - 1), 0U);
    syscall(SYS_close_range, static_cast<unsigned>(sfd + 1), ~0U, 0U);
    for (;;) {
      int st = 0;
      pid_t r = static_cast<pid_t>(syscall(SYS_wait4, -1, &st, 0, nullptr));
      if (r == cmd && sfd >= 0) {
        if (write(sfd, &st, sizeof st) < 0) {
        }
        close(sfd);
        sfd = -1;
      } else if (r < 0 && errno != EINTR) {
        _exit(0);  // ECHILD: the container's last host process is gone
      }
    }
  }
  ExecCommand(a);
}

[[noreturn]] void ExecCommand(ChildArgs* a) {
  if (a->procs_count > 0 && host::Cgroup::JoinFromChild(a->procs_fds, a->procs_count) != 0) {
    Fail(a, kStepCgroup);
  }
  // Descriptors: everything to high numbers first, then to their places.
  int moved[3 + 16];
  int n = 0;
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) Fail(a, kStepFds);
  for (int i = 0; i < 3; i++) {
    int src = a->stdio[i] >= 0 ? a->stdio[i] : devnull;
    moved[n] = fcntl(src, F_DUPFD_CLOEXEC, 64);
    if (moved[n++] < 0) Fail(a, kStepFds);
  }
  for (const auto& [src, dst] : a->extra) {
    (void)dst;
    moved[n] = fcntl(src, F_DUPFD_CLOEXEC, 64);
    if (moved[n++] < 0) Fail(a, kStepFds);
  }
  for (int i = 0; i < 3; i++) {
    if (dup2(moved[i], i) < 0) Fail(a, kStepFds);
  }
  for (size_t i = 0; i < a->extra.size(); i++) {
    if (dup2(moved[3 + i], a->extra[i].second) < 0) Fail(a, kStepFds);
  }
  // SECURITY: nothing else of the runtime reaches the OCI runtime (and so the container):
  // every other descriptor is close-on-exec (the error pipe included, which closes on exec).
  int keep = 3;
  for (const auto& e : a->extra) keep = std::max(keep, e.second + 1);
  for (int fd = 3; fd < keep; fd++) {
    bool wanted = false;
    for (const auto& e : a->extra) wanted = wanted || e.second == fd;
    if (!wanted) close(fd);
  }
  syscall(SYS_close_range, static_cast<unsigned>(keep), ~0U, CLOSE_RANGE_CLOEXEC);
  if (a->exec_fd >= 0) {
    syscall(SYS_execveat, a->exec_fd, "", a->argv.data(), a->envp.data(), AT_EMPTY_PATH);
  } else {
    execve(a->argv[0], a->argv.data(), a->envp.data());
  }
  Fail(a, kStepExec);
}

}  // namespace

Child::Child(Child&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)),
      pidfd_(std::move(o.pidfd_)),
      status_fd_(std::move(o.status_fd_)) {}

Child& Child::operator=(Child&& o) noexcept {
  if (this != &o) {
    if (running()) {
      Kill(SIGKILL);
      int st;
      Wait(5, &st);
    }
    pid_ = std::exchange(o.pid_, -1);
    pidfd_ = std::move(o.pidfd_);
    status_fd_ = std::move(o.status_fd_);
  }
  return *this;
}

Child::~Child() {
  if (running()) {
    Kill(SIGKILL);
    int st;
    Wait(5, &st);
  }
}

bool Child::TryReap(int* status) {
  if (pid_ <= 0) return true;
  siginfo_t si{};
  if (waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &si, WEXITED | WNOHANG) != 0) {
    if (errno == EINTR) return false;
    *status = 0;
    pid_ = -1;
    return true;
  }
  if (si.si_pid == 0) return false;
  *status = si.si_code == CLD_EXITED ? W_EXITCODE(si.si_status, 0) : si.si_status & 0x7f;
  pid_ = -1;
  pidfd_.Reset();
  return true;
}

bool Child::Wait(double timeout_s, int* status) {
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout_s));
  while (pid_ > 0) {
    if (TryReap(status)) return true;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    struct pollfd p = {pidfd_.get(), POLLIN, 0};
    poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 1000)));
  }
  return true;
}

void Child::Kill(int sig) {
  if (pid_ > 0 && pidfd_.valid()) syscall(SYS_pidfd_send_signal, pidfd_.get(), sig, nullptr, 0);
}

int SealedBinary::fd() const {
  std::call_once(once_, [this] {
    host::UniqueFd src(open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st {};
    if (!src.valid() || fstat(src.get(), &st) != 0) return;
    host::UniqueFd mem(memfd_create("sbx-sealed-runtime", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!mem.valid()) return;
    off_t sent = 0;
    while (sent < st.st_size) {
      ssize_t n = sendfile(mem.get(), src.get(), nullptr, static_cast<size_t>(st.st_size - sent));
      if (n <= 0) return;
      sent += n;
    }
    // SECURITY: every seal, so that nothing (a container that reaches the file through
    // /proc/PID/exe included) can change the binary: crun and runc accept exactly this.
    if (fcntl(mem.get(), F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) !=
        0)
      return;
    fd_ = std::move(mem);
  });
  return fd_.get();
}

StatusOr<Child> Spawn(const SpawnPlan& plan) {
  if (plan.argv.empty() || plan.argv[0].empty() || plan.argv[0][0] != '/') {
    return InvalidArgument("spawn: argv[0] must be an absolute path");
  }
  if (plan.extra_fds.size() > 16) return InvalidArgument("spawn: too many extra descriptors");
  if ((!plan.hide_dirs.empty() || !plan.overlays.empty()) && !plan.private_mounts) {
    return InvalidArgument("spawn: mounts need a private mount namespace");
  }
  ChildArgs a;
  std::vector<std::string> args = plan.argv;
  for (auto& s : args) a.argv.push_back(s.data());
  a.argv.push_back(nullptr);
  std::string path = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  a.envp = {path.data(), nullptr};
  a.private_mounts = plan.private_mounts;
  for (const auto& h : plan.hide_dirs) a.hide.push_back(h.c_str());
  struct OverlayStrings {
    std::string scratch_opts, upper, work, opts;
  };
  std::vector<OverlayStrings> ov(plan.overlays.size());
  for (size_t i = 0; i < plan.overlays.size(); i++) {
    const OverlayRoot& o = plan.overlays[i];
    ov[i].scratch_opts = fmt::format("size={},mode=0755", o.scratch_bytes);
    ov[i].upper = o.scratch + "/upper";
    ov[i].work = o.scratch + "/work";
    ov[i].opts =
        fmt::format("lowerdir={},upperdir={},workdir={}", o.lower, ov[i].upper, ov[i].work);
  }
  for (size_t i = 0; i < plan.overlays.size(); i++) {
    a.overlays.push_back({plan.overlays[i].scratch.c_str(), ov[i].scratch_opts.c_str(),
                          ov[i].upper.c_str(), ov[i].work.c_str(), plan.overlays[i].target.c_str(),
                          ov[i].opts.c_str()});
  }
  a.procs_fds = plan.cgroup_procs_fds.data();
  a.procs_count = plan.cgroup_procs_fds.size();
  a.stdio[0] = plan.stdin_fd;
  a.stdio[1] = plan.stdout_fd;
  a.stdio[2] = plan.stderr_fd;
  a.extra = plan.extra_fds;
  a.exec_fd = plan.exec_fd;

  int ep[2];
  if (pipe2(ep, O_CLOEXEC) != 0) return ErrnoStatus("pipe");
  host::UniqueFd err_r(ep[0]), err_w(ep[1]);
  host::UniqueFd status_r, status_w;
  if (plan.shim) {
    int sp[2];
    if (pipe2(sp, O_CLOEXEC) != 0) return ErrnoStatus("pipe");
    status_r.Reset(sp[0]);
    status_w.Reset(sp[1]);
    a.shim = true;
    a.status_pipe = status_w.get();
  }
  // The child must keep the write end across its own dup2 dance, but not across exec.
  a.err_pipe = err_w.get();

  constexpr size_t kStack = 256 * 1024;
  void* stack =
      mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return ErrnoStatus("mmap clone stack");
  int pidfd = -1;
  pid_t pid =
      clone(ChildMain, static_cast<char*>(stack) + kStack, CLONE_PIDFD | SIGCHLD, &a, &pidfd);
  int clone_err = errno;
  munmap(stack, kStack);
  if (pid < 0) return ErrnoStatus("clone " + plan.argv[0], clone_err);
  Child child(pid, pidfd);
  err_w.Reset();
  status_w.Reset();
  int msg[2] = {0, 0};
  ssize_t n;
  do {
    n = read(err_r.get(), msg, sizeof msg);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof msg)) {
    int st;
    child.Wait(5, &st);
    return ErrnoStatus(fmt::format("starting {}: {}", plan.argv[0], StepName(msg[0])), msg[1]);
  }
  if (plan.shim) child.set_status_fd(status_r.Release());
  return child;
}

bool RunOutput::ok() const { return !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0; }

std::string RunOutput::Describe() const {
  std::string what = timed_out           ? "timed out"
                     : WIFEXITED(status) ? fmt::format("exit {}", WEXITSTATUS(status))
                                         : fmt::format("signal {}", WTERMSIG(status));
  std::string text = err.empty() ? out : err;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text.empty() ? what : what + ": " + text;
}

StatusOr<RunOutput> RunCommand(SpawnPlan plan, double timeout_s, Child* shim) {
  if (plan.shim && !shim) return InvalidArgument("RunCommand: a shim needs somewhere to go");
  host::UniqueFd out_r, err_r, out_w, err_w;
  int fds[2];
  if (plan.stdout_fd < 0) {
    if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("pipe");
    out_r.Reset(fds[0]);
    out_w.Reset(fds[1]);
    plan.stdout_fd = out_w.get();
  }
  if (plan.stderr_fd < 0) {
    if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("pipe");
    err_r.Reset(fds[0]);
    err_w.Reset(fds[1]);
    plan.stderr_fd = err_w.get();
  }
  ASSIGN_OR_RETURN(Child child, Spawn(plan));
  out_w.Reset();
  err_w.Reset();
  RunOutput r;
  if (plan.shim) {
    // The command is the shim's child: its pid, then its wait status, come over the pipe.
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(timeout_s));
    int msg[2] = {0, 0};
    size_t got = 0;
    host::UniqueFd cmd_pidfd;
    while (got < sizeof msg) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0 && !r.timed_out) {
        // Timed out: kill the command (the shim reaps it and reports).
        r.timed_out = true;
        if (cmd_pidfd.valid()) syscall(SYS_pidfd_send_signal, cmd_pidfd.get(), SIGKILL, nullptr, 0);
        deadline = Clock::now() + std::chrono::seconds(5);
        continue;
      }
      if (left.count() <= 0) break;
      struct pollfd p = {child.status_fd(), POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 1000))) <= 0) continue;
      ssize_t n = read(child.status_fd(), reinterpret_cast<char*>(msg) + got, sizeof msg - got);
      if (n <= 0) break;  // the shim died
      got += static_cast<size_t>(n);
      if (got >= sizeof(int) && !cmd_pidfd.valid() && msg[0] > 0) {
        cmd_pidfd.Reset(static_cast<int>(syscall(SYS_pidfd_open, msg[0], 0)));
      }
    }
    if (got < sizeof msg) {
      r.timed_out = true;
      r.status = W_EXITCODE(255, 0);
    } else {
      r.status = msg[1];
    }
    for (auto* fdp : {&out_r, &err_r}) {
      if (fdp->valid()) fcntl(fdp->get(), F_SETFL, O_NONBLOCK);
    }
    char buf[8192];
    for (auto [fd, into] : {std::pair{&out_r, &r.out}, std::pair{&err_r, &r.err}}) {
      while (fd->valid()) {
        ssize_t n = read(fd->get(), buf, sizeof buf);
        if (n <= 0) break;
        into->append(buf, static_cast<size_t>(n));
      }
    }
    *shim = std::move(child);
    return r;
  }
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout_s));
  char buf[8192];
  auto drain = [&](host::UniqueFd& fd, std::string* into) {
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n > 0) {
      into->append(buf, static_cast<size_t>(n));
      if (into->size() > 65536) into->erase(0, into->size() - 65536);
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      fd.Reset();
    }
  };
  bool exited = false;
  Clock::time_point drain_until = Clock::time_point::max();
  while (!exited || ((out_r.valid() || err_r.valid()) && Clock::now() < drain_until)) {
    if (!exited && child.TryReap(&r.status)) {
      exited = true;
      // A runtime's children (a container init, gVisor's sandbox) may hold the pipes: once
      // the command itself has exited, only what is already there is read.
      drain_until = Clock::now() + std::chrono::milliseconds(20);
      continue;
    }
    if (!exited && Clock::now() >= deadline) {
      child.Kill(SIGKILL);
      child.Wait(5, &r.status);
      r.timed_out = true;
      break;
    }
    struct pollfd p[3];
    int np = 0;
    int i_out = -1, i_err = -1;
    if (!exited) p[np++] = {child.pidfd(), POLLIN, 0};
    if (out_r.valid()) {
      i_out = np;
      p[np++] = {out_r.get(), POLLIN, 0};
    }
    if (err_r.valid()) {
      i_err = np;
      p[np++] = {err_r.get(), POLLIN, 0};
    }
    if (np == 0) break;
    int rc = poll(p, static_cast<nfds_t>(np), exited ? 5 : 50);
    if (rc <= 0) continue;
    if (i_out >= 0 && (p[i_out].revents & (POLLIN | POLLHUP))) drain(out_r, &r.out);
    if (i_err >= 0 && (p[i_err].revents & (POLLIN | POLLHUP))) drain(err_r, &r.err);
  }
  return r;
}

std::string FindExecutable(const std::string& name) {
  for (const char* dir :
       {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}) {
    std::string p = std::string(dir) + "/" + name;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

}  // namespace sbx::backend
