// Runs a helper program (an adapter, the mirror fixture) with every call bounded: stdin written,
// stdout/stderr captured, a deadline after which the program's whole process group is killed.
//
// The child is the leader of its own process group (so a timeout kills everything it started)
// and gets default signal dispositions. SIGPIPE must be ignored by the harness (main does it).
//
// Thread-safety: RunSubprocess may be called from several threads; Interrupt is async-signal-safe.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "sbx/status.h"

namespace sandcheck {

struct SubprocessOptions {
  std::vector<std::string> argv;  // argv[0] is the program path (no PATH search)
  std::string stdin_data;
  double timeout_s = 30;
  std::map<std::string, std::string> extra_env;  // added to (or replacing in) the environment
  size_t max_output_bytes = 16 << 20;            // per stream; more is dropped (and flagged)
};

struct SubprocessResult {
  bool timed_out = false;
  bool output_truncated = false;
  int exit_code = -1;  // -1 when killed by a signal
  int term_signal = 0;
  std::string out, err;
  double seconds = 0;
};

// kNotFound / kPermissionDenied when the program cannot be started; kInternal("interrupted")
// when the harness got SIGINT/SIGTERM while waiting (the child group is killed first).
sbx::StatusOr<SubprocessResult> RunSubprocess(const SubprocessOptions& options);

// A process left running (the mirror fixture). The destructor kills its group and reaps it.
class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(pid_t pid, int stdout_fd, int stdin_fd = -1)
      : pid_(pid), stdout_fd_(stdout_fd), stdin_fd_(stdin_fd) {}
  ChildProcess(ChildProcess&& o) noexcept;
  ChildProcess& operator=(ChildProcess&& o) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  int stdout_fd() const { return stdout_fd_; }
  // Kills the group (SIGTERM, then SIGKILL after `grace_s`) and reaps; keeps the stdout fd.
  void Kill(double grace_s = 1.0);
  // Kill, then close the fds; idempotent.
  void Stop(double grace_s = 1.0);

 private:
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int stdin_fd_ = -1;  // held open: the child sees EOF when we exit, even by a crash
};

// Starts `argv` in its own process group with stdout and stderr on one pipe and stdin on a pipe
// that stays open as long as the ChildProcess (or the harness) lives.
sbx::StatusOr<ChildProcess> StartChild(const std::vector<std::string>& argv);

// Reads one line from `fd` within `timeout_s` (the mirror's "listening ADDR:PORT").
sbx::StatusOr<std::string> ReadLine(int fd, double timeout_s);

// Set from the harness's SIGINT/SIGTERM handler; running subprocesses are then killed.
// Interrupted() is the pending interrupt (cleared to let cleanup calls run, which a second
// signal interrupts again); InterruptCount() counts signals and never goes back.
void Interrupt();
bool Interrupted();
void ClearPendingInterrupt();
int InterruptCount();

}  // namespace sandcheck
