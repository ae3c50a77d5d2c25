// QEMU's spawner: the one thread that forks every QEMU, and the child's side up to the exec
// (see microvm_spawn.h).
#include "backend/microvm/microvm_spawn.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

namespace sbx::microvm {
namespace {

// From QEMU's fork to its exec: a few milliseconds; 30 s is a child that is stuck.
constexpr std::chrono::seconds kSpawnReportTimeout{30};

// The spawner: one long-lived thread forks every QEMU. PR_SET_PDEATHSIG fires when the *thread*
// that forked the child exits; backend work runs on worker threads that come and go, so forking
// from them would kill QEMUs at random. This thread never exits, so a QEMU dies with the process.
class Spawner {
 public:
  // Runs `fn` on the spawner thread and waits for it.
  static void Run(const std::function<void()>& fn) {
    Spawner* s = Get();
    std::unique_lock<std::mutex> lk(s->mu_);
    uint64_t ticket = ++s->queued_;
    s->jobs_.push_back(&fn);
    s->cv_.notify_all();
    s->cv_.wait(lk, [&] { return s->done_ >= ticket; });
  }

 private:
  static Spawner* Get() {
    std::lock_guard<std::mutex> lk(GlobalMu());
    if (!instance_) {
      static bool registered = [] {
        // A forked child of this process (a test's fork) has no spawner thread: it makes its own.
        pthread_atfork(nullptr, nullptr, [] {
          instance_ = nullptr;
          new (&GlobalMu()) std::mutex();
        });
        return true;
      }();
      (void)registered;
      instance_ = new Spawner();  // never deleted: the thread outlives static destruction
      std::thread([s = instance_] { s->Loop(); }).detach();
    }
    return instance_;
  }
  static std::mutex& GlobalMu() {
    static std::mutex* mu = new std::mutex();
    return *mu;
  }
  void Loop() {
    pthread_setname_np(pthread_self(), "qemu-spawner");
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return !jobs_.empty(); });
      const std::function<void()>* fn = jobs_.front();
      jobs_.pop_front();
      lk.unlock();
      (*fn)();
      lk.lock();
      done_++;
      cv_.notify_all();
    }
  }

  static inline Spawner* instance_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<const std::function<void()>*> jobs_;
  uint64_t queued_ = 0, done_ = 0;
};

// The kernel function a process sleeps in ("?" when unreadable).
std::string Wchan(pid_t pid) {
  std::ifstream f(fmt::format("/proc/{}/wchan", pid));
  std::string w;
  std::getline(f, w);
  return w.empty() ? "?" : w;
}

}  // namespace

// SECURITY/robustness: the child is a copy of a multi-threaded process (and the keeper a raw
// clone, which resets none of glibc's locks), so from the clone to the exec it must take no
// lock another thread could have held at that instant: no malloc (a vector's push_back in the
// child once hung it for ever in malloc's free_list_lock: the spawner thread's first malloc
// sets up its tcache there), no stdio, no strerror (locale). Everything it touches is built
// before the clone; it only reads and overwrites its own copy of that memory.
StatusOr<pid_t> SpawnQemu(const std::vector<std::string>& args, std::vector<int> src, int logfd,
                          const std::vector<std::string>& cgroup_procs, bool keeper) {
  std::vector<std::string> a = args;
  std::vector<char*> argv;
  for (auto& x : a) argv.push_back(x.data());
  argv.push_back(nullptr);
  std::vector<const char*> procs;
  for (const auto& p : cgroup_procs) procs.push_back(p.c_str());
  int nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC) < 0) {
    if (nullfd >= 0) close(nullfd);
    return ErrnoStatus("pipe2");
  }
  // The descriptors to place at 3.. and, last, the error pipe's write end: one array, made now.
  std::vector<int> fds = std::move(src);
  fds.push_back(errpipe[1]);
  int* const fdv = fds.data();
  const int nfds = static_cast<int>(fds.size());
  pid_t parent = getpid();
  pid_t pid = -1;
  int fork_errno = 0;
  Spawner::Run([&] {
    // A raw clone without a new stack is a fork (into a new PID namespace for the keeper).
    pid = keeper ? static_cast<pid_t>(syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, nullptr, nullptr,
                                              nullptr, nullptr))
                 : fork();
    if (pid != 0) {
      fork_errno = errno;
      return;
    }
    // Child.
    // The errno (4 bytes), then "what path": the parent words the errno (strerror here would
    // look up the locale's translation, under a lock).
    auto report = [&](const char* what, const char* path, int err) {
      ssize_t w = write(errpipe[1], &err, sizeof err);
      for (const char* part : {what, " ", path}) w = write(errpipe[1], part, strlen(part));
      (void)w;
      _exit(127);
    };
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    // getppid() is 0 in a new PID namespace (the parent is outside it): the check is only
    // meaningful for a plain fork.
    if (!keeper && getppid() != parent) _exit(126);
    for (const char* p : procs) {
      int fd = open(p, O_WRONLY | O_CLOEXEC);
      if (fd < 0) report("joining cgroup: open", p, errno);
      if (write(fd, "0", 1) != 1) report("joining cgroup: write 0 to", p, errno);
      close(fd);
    }
    // Move everything above the target range first, so that dup2 never clobbers a source.
    for (int i = 0; i < nfds; i++) {
      int moved = fcntl(fdv[i], F_DUPFD_CLOEXEC, 100);
      if (moved < 0) _exit(126);
      fdv[i] = moved;
    }
    errpipe[1] = fdv[nfds - 1];
    const int n = nfds - 1;
    if (nullfd >= 0) dup2(nullfd, 0);
    if (logfd >= 0) {
      dup2(logfd, 1);
      dup2(logfd, 2);
    }
    for (int i = 0; i < n; i++)
      if (dup2(fdv[i], 3 + i) < 0) _exit(126);  // dup2 clears close-on-exec
    if (dup3(errpipe[1], 3 + n, O_CLOEXEC) < 0) _exit(126);
    errpipe[1] = 3 + n;
    closefrom(4 + n);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (keeper) {
      // A raw clone, not fork(): this process is a raw clone of a multithreaded one, so glibc's
      // fork machinery (its atfork handlers, which take locks another thread may have held at
      // the clone) must not run here: it deadlocked once in a test.
      pid_t q = static_cast<pid_t>(syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, nullptr));
      if (q < 0) report("fork", "QEMU", errno);
      if (q > 0) {
        // The keeper: holds nothing of QEMU's (its copies of the sockets, taps and the error
        // pipe go, so the host sees EOF when QEMU goes), reaps, and ends with QEMU's status.
        for (int fd = 0; fd < 4 + n; fd++) close(fd);
        int st = 0;
        for (;;) {
          pid_t w = waitpid(-1, &st, 0);
          if (w == q) break;
          if (w < 0 && errno != EINTR) _exit(125);
        }
        if (WIFEXITED(st)) _exit(WEXITSTATUS(st));
        _exit(128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0));
      }
    }
    execvp(argv[0], argv.data());
    report("exec", argv[0], errno);
  });
  close(errpipe[1]);
  if (nullfd >= 0) close(nullfd);
  if (pid < 0) {
    close(errpipe[0]);
    return ErrnoStatus("fork for QEMU", fork_errno);
  }
  // EOF at the exec (close-on-exec); a message if the child failed before it. Bounded: a
  // child that neither execs nor reports (stuck before its exec) is named, killed and reaped,
  // and the start fails, instead of hanging the thread that asked (and a runtime's close that
  // drains it) for ever.
  std::string msg;
  char buf[512];
  const auto deadline = std::chrono::steady_clock::now() + kSpawnReportTimeout;
  for (;;) {
    pollfd p{errpipe[0], POLLIN, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    int rc = poll(&p, 1, left < 0 ? 0 : static_cast<int>(left));
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) {
      std::string where = Wchan(pid);
      kill(pid, SIGKILL);
      int st = 0;
      while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      close(errpipe[0]);
      return Status(Code::kToolError,
                    fmt::format("starting QEMU: the child {} neither started QEMU nor reported "
                                "within {} s (it waited in '{}'); killed",
                                pid, kSpawnReportTimeout.count(), where));
    }
    ssize_t r = read(errpipe[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    msg.append(buf, static_cast<size_t>(r));
  }
  close(errpipe[0]);
  if (!msg.empty()) {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    int err = 0;
    if (msg.size() >= sizeof err) {
      std::memcpy(&err, msg.data(), sizeof err);
      msg = msg.substr(sizeof err) + ": " + strerror(err);
    }
    return Status(Code::kToolError, "starting QEMU: " + msg);
  }
  return pid;
}

}  // namespace sbx::microvm
