// Spawning and supervising the runtime's processes: fork+exec with a child hook, output tails,
// deadlines, and one SIGCHLD signalfd through which every child of the adapter is reaped.
//
// The adapter can be a child subreaper (PR_SET_CHILD_SUBREAPER): `runc create`, `crun create`
// and `runsc create` daemonise the container's init (or gVisor's sandbox process), which is
// then re-parented to the adapter, so the adapter can wait for it and read its exit status
// while the container's cgroup still exists (RES-8: OOM is read from it before `delete`).
//
// Thread-safety: single-threaded by design. The adapter is one thread; Spawn's child hook runs
// between fork and exec and relies on that.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/fd.h"
#include "sbx/status.h"

namespace sandcheck::adapter {

using Clock = std::chrono::steady_clock;

// Seconds since `start` as a double.
double SecondsSince(Clock::time_point start);

// Clock::now() + seconds (saturating for huge values).
Clock::time_point DeadlineIn(double seconds);

// With SANDCHECK_ADAPTER_TRACE=1 in the environment: "[+0.123 s] what" on stderr, timed from
// the adapter's start (for finding where an op spends its time).
void Trace(std::string_view what);

// Keeps the last `capacity` bytes of a stream (the protocol returns output tails).
class TailBuffer {
 public:
  explicit TailBuffer(size_t capacity = 64 * 1024) : capacity_(capacity) {}
  void Append(const char* data, size_t n);
  const std::string& data() const { return data_; }
  size_t total() const { return total_; }  // bytes seen, including dropped ones

 private:
  size_t capacity_;
  size_t total_ = 0;
  std::string data_;
};

struct SpawnSpec {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  std::vector<std::string> env;   // empty: inherit the adapter's environment
  int stdin_fd = -1;              // -1: /dev/null
  int stdout_fd = -1;             // -1: /dev/null
  int stderr_fd = -1;             // -1: /dev/null
  // (fd in the adapter, fd number in the child): kept open across exec in the child.
  std::vector<std::pair<int, int>> extra_fds;
  // Runs in the child after the fds are in place and before exec; returns 0 or an errno.
  std::function<int()> child_hook;
};

// fork+exec. The child gets an empty signal mask and default dispositions; an exec failure or
// a failing hook is reported here (not as exit 127). Precondition: a Supervisor exists.
sbx::StatusOr<pid_t> Spawn(const SpawnSpec& spec);

// A pipe whose ends are O_CLOEXEC.
struct Pipe {
  UniqueFd read;
  UniqueFd write;
};
sbx::StatusOr<Pipe> MakePipe();

// Shell convention for a wait status: the exit code, or 128 + the signal that killed it.
int ExitCodeOf(int wait_status);
// "exit 3", "killed by signal 9 (Killed)".
std::string DescribeWaitStatus(int wait_status);

// Owns the adapter's SIGCHLD handling: blocks SIGCHLD, SIGTERM, SIGINT and SIGHUP and reads them
// from a signalfd. Every child is reaped here and its status remembered. One per process.
class Supervisor {
 public:
  static sbx::StatusOr<std::unique_ptr<Supervisor>> Create(bool subreaper);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  struct Stream {
    UniqueFd fd;  // read end of a pipe; reset at EOF
    TailBuffer* tail;
  };
  enum class Wake { kExited, kDeadline, kEvent, kSignal };

  // Waits until `pid` has been reaped (its status in *wait_status), `deadline` passes, `event_fd`
  // (if >= 0) becomes readable, or the adapter receives SIGTERM/SIGINT/SIGHUP (reported once per
  // signal, so that the cleanup that follows can still run children). Drains `streams` into
  // their tails meanwhile. pid <= 0: waits only for the other conditions.
  Wake Wait(pid_t pid, Clock::time_point deadline, std::vector<Stream>& streams, int event_fd,
            int* wait_status);

  // Reads the streams until all are at EOF or the deadline passes.
  void Drain(std::vector<Stream>& streams, Clock::time_point deadline);

  // The status of an already reaped child.
  std::optional<int> Reaped(pid_t pid) const;

  // The signal (SIGTERM/SIGINT/SIGHUP) that asked the adapter to stop, or 0.
  int stop_signal() const { return stop_signal_; }

 private:
  Supervisor() = default;
  void ReapAll();
  bool HandleSignalFd();  // false: nothing to read

  UniqueFd signal_fd_;
  std::map<pid_t, int> reaped_;
  int stop_signal_ = 0;
  bool stop_pending_ = false;
  bool restore_mask_ = false;
};

struct RunResult {
  int wait_status = 0;
  bool timed_out = false;
  double seconds = 0;
  std::string out;
  std::string err;
  int exit_code() const { return ExitCodeOf(wait_status); }
  bool success() const { return !timed_out && wait_status == 0; }
};

struct RunOptions {
  double timeout_s = 30;
  int stdin_fd = -1;
  std::function<int()> child_hook;
};

// Runs argv to completion with both outputs captured (tails), SIGKILLed at the timeout.
sbx::StatusOr<RunResult> Run(Supervisor& sup, std::vector<std::string> argv,
                             const RunOptions& options = {});

// "runc create: exit 1: <stderr tail>" for error messages.
std::string DescribeFailure(const std::vector<std::string>& argv, const RunResult& r);

}  // namespace sandcheck::adapter
