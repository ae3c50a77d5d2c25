// backend/command_watch: LC-5 (execute) and LC-6 (collect) of one command, for the backends
// whose commands run as processes the runtime watches from the host: native (sbx-init forks
// the command) and oci (crun, runc, runsc exec). One loop for both: the deadline with its grace
// period (RES-5), the output tails, stdin, the OOM event (RES-2), the disk quota (RES-3), and the
// usage read from the cgroup afterwards. What differs (how a backend signals its command, how
// it learns of the exit) comes in as hooks and extra descriptors.
// May include: sbx/model.h, host/ (cgroup, fd). Included by: native_instance.cc, oci_exec.cc.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <vector>

#include "host/cgroup.h"
#include "host/fd.h"
#include "sbx/model.h"

namespace sbx::backend {

// RES-3: less than this free on a sandbox's scratch space is a full disk (the quota reached).
inline constexpr int64_t kDiskFullBelow = 64 * 1024;

// The runtime's ends of a command's standard streams.
struct CommandPipes {
  host::UniqueFd in_w;  // closed at once when the command gets no stdin
  host::UniqueFd out_r;
  host::UniqueFd err_r;
};

// What differs between backends.
struct WatchHooks {
  std::function<void()> terminate;  // RES-5, at the deadline: SIGTERM what the command started
  // RES-5, the grace period is over: SIGKILL. Returns when to call it again (oci: the runtime's
  // client may outlive its command), or nothing when the kill is complete. Also called once if
  // the loop itself fails, so nothing of a command nobody watches keeps running.
  std::function<std::optional<std::chrono::milliseconds>()> kill;
  std::function<void()> end_sandbox;  // RES-2, RES-3, RES-8: the sandbox ends now
  // Bytes free on the sandbox's /work (and used, if asked); -1 when it cannot be read.
  std::function<int64_t(int64_t* used)> disk_free;
  // After an OOM wake-up: whether the limit was really breached.
  std::function<bool()> oom_breached;
};

// A further descriptor to poll (the exit report, the init's pidfd): on_ready gets its revents;
// an error abandons the command (the hooks' kill has run).
struct WatchSource {
  int fd;
  short events;
  std::function<Status(short revents)> on_ready;
};

class CommandWatch {
 public:
  using Clock = std::chrono::steady_clock;

  // Arms the deadline (exec.timeout_s from now) and takes a pending OOM wake-up of an earlier
  // command. Output goes to r's tails.
  CommandWatch(const ExecSpec& exec, host::Cgroup* cgroup, WatchHooks hooks, CommandPipes pipes,
               ExecResult* r);

  // LC-5: watch until finished() is true (asked before every round). sources() is asked every
  // round too: a backend's set of descriptors changes as its command ends.
  Status Run(const std::function<std::vector<WatchSource>()>& sources,
             const std::function<bool()>& finished);

  // LC-6: what the pipes still hold. Background processes may keep them open: this waits
  // 20 ms for EOF, not for them.
  void Drain();

  // LC-6: usage from the cgroup (CPU and throttled time since `before`, OOM kills since
  // *oom_kills_seen, which is advanced), the disk used, and the final word on OOM and the disk
  // quota: the OOM wake-up can lose the race with the exit, and a process the command left
  // behind may wait in OOM (v1). disk_readable false: the sandbox is gone, /work is not read.
  void CollectUsage(const host::CgroupUsage& before, int64_t* oom_kills_seen, bool disk_readable);

  bool timed_out() const { return timed_out_; }
  bool oom() const { return oom_; }
  bool disk_full() const { return disk_full_; }
  // When the grace period after the deadline ends (max() until the deadline has passed).
  Clock::time_point grace_end() const { return grace_end_; }

 private:
  void ReadSome(host::UniqueFd& fd, std::string* tail, int64_t* total);
  void CheckDisk();

  const ExecSpec& exec_;
  host::Cgroup* cgroup_;
  WatchHooks hooks_;
  CommandPipes pipes_;
  ExecResult* r_;
  Clock::time_point deadline_;
  Clock::time_point grace_end_ = Clock::time_point::max();
  Clock::time_point kill_at_ = Clock::time_point::max();
  Clock::time_point last_disk_check_;
  size_t stdin_off_ = 0;
  bool timed_out_ = false, oom_ = false, disk_full_ = false;
};

// Bytes free on /work as the sandbox whose init is init_pid sees it (and used, if asked);
// -1 when it cannot be read.
int64_t WorkDiskFree(pid_t init_pid, int64_t* used);

// r's exit code (and signal) from a wait status.
void SetExit(int wait_status, ExecResult* r);
// The verdicts both backends give in the same words.
void SetMemoryExceeded(int64_t limit_bytes, ExecResult* r);        // RES-2
void SetDiskExceeded(int64_t limit_bytes, ExecResult* r);          // RES-3
void SetTimedOut(const ExecSpec& exec, ExecResult* r);             // RES-5
void SetExecFailed(const ExecSpec& exec, int err, ExecResult* r);  // the command cannot run

}  // namespace sbx::backend
