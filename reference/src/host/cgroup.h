// Cgroups for sandboxes, v1 (hybrid) and v2: detected, never assumed.
//
// Placement (delegation): every sandbox cgroup is created below the runtime's OWN cgroup in each
// hierarchy (read from /proc/self/cgroup), inside a parent "sandcheck-<runtime-id>" that this
// runtime owns. Never at a hierarchy's root, never touching cgroups we did not create.
//
// Thread-safety: CgroupManager is thread-safe after Open(); a Cgroup is owned by one sandbox.
//
// How it works (placement, detection, limits, OOM detection, kill-all, measured costs):
// docs/cgroups.md. v1 and v2 are sibling drivers (cgroup_v1.cc, cgroup_v2.cc) behind one
// internal interface (cgroup_internal.h); discovery is pure text parsing (cgroup_layout.cc).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sbx/status.h"

namespace sbx::host {

enum class CgroupVersion { kV1, kV2 };

struct CgroupUsage {
  double cpu_seconds = 0;         // v1 cpuacct.usage (NOT cpuacct.stat); v2 cpu.stat usage_usec
  double throttled_seconds = 0;   // cpu.stat throttled_time / throttled_usec
  int64_t memory_peak_bytes = 0;  // v1 memory.max_usage_in_bytes; v2 memory.peak (if present)
  int64_t memory_current_bytes = 0;
  int64_t oom_kills = 0;  // v1 memory.oom_control oom_kill; v2 memory.events oom_kill
  int64_t pids_current = 0;
  int64_t pids_peak = 0;  // pids.peak where the kernel has it (v1 too on 6.18), else -1
};

class Cgroup;

struct CgroupOptions {
  enum class Mode {
    kAuto,  // v1 if every v1 controller we use is mounted (hybrid hosts), else v2
    kV1,
    kV2,  // the unified hierarchy (also on a hybrid host: freezer and kill work there)
  };
  Mode mode = Mode::kAuto;
  // true: Open() fails with kUnsupported unless every controller we use is available
  // (v1: cpu, cpuacct, memory, pids, freezer mounted; v2: cpu, memory, pids delegated to our
  // cgroup). false: open what exists; setters of a missing controller return kUnsupported.
  bool require_controllers = true;
  // The reaper (FAIL-6): a dead runtime's own cgroups as it recorded them (OwnPaths()), to
  // adopt its parents there instead of below this process's own cgroups. A process's own
  // cgroup may differ per hierarchy and per process (e.g. memory:/process_api/<id>), so the
  // reaper must not re-derive it. Each path must lie inside a mounted hierarchy of the layout;
  // hierarchies without a recorded path keep this process's own cgroup.
  std::vector<std::string> adopt_own_dirs;
};

class CgroupManager {
 public:
  // Detects v1/v2, finds the runtime's own cgroup per controller (cpu, cpuacct, memory, pids,
  // freezer on v1; the unified path on v2) and creates the runtime's parent cgroup
  // "sandcheck-<runtime_id>" below it. kPermissionDenied without privilege,
  // kUnsupported if a needed controller is missing.
  // If "sandcheck-<runtime_id>" already exists (a crashed runtime with the same id), it is
  // adopted: List() shows its leftovers and Reap() removes them (FAIL-6).
  static StatusOr<std::unique_ptr<CgroupManager>> Open(const std::string& runtime_id);
  static StatusOr<std::unique_ptr<CgroupManager>> Open(const std::string& runtime_id,
                                                       const CgroupOptions& options);
  ~CgroupManager();  // removes the parent (only if empty)
  CgroupManager(const CgroupManager&) = delete;
  CgroupManager& operator=(const CgroupManager&) = delete;

  CgroupVersion version() const;
  // Creates a sandbox cgroup "<name>" under the parent in every hierarchy.
  StatusOr<std::unique_ptr<Cgroup>> Create(const std::string& name);
  // Names of sandbox cgroups currently under the parent (for the reaper and leak tests).
  std::vector<std::string> List() const;
  // Removes a leftover sandbox cgroup by name (kill all, then rmdir). For the reaper.
  Status Reap(const std::string& name);
  // Every directory this manager created (for leak tests): parent paths per hierarchy.
  std::vector<std::string> ParentPaths() const;
  // The runtime's own cgroup per hierarchy (the directories the parents are created in).
  std::vector<std::string> OwnPaths() const;

  struct Impl;

 private:
  explicit CgroupManager(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One sandbox's cgroup (all hierarchies). RAII: the destructor kills what is left and removes
// the directories. Not copyable.
class Cgroup {
 public:
  ~Cgroup();
  Cgroup(const Cgroup&) = delete;
  Cgroup& operator=(const Cgroup&) = delete;

  // RES-1: cfs quota = millicores * period / 1000 with period 100 ms. 0 = no cap.
  // (Below 10 millicores the quota would be under the kernel's 1 ms minimum, so the period
  // becomes 1 s: the same hard cap, coarser grain.)
  Status SetCpuMillicores(int64_t millicores);
  // RES-2: memory limit (v1: memory.limit_in_bytes and memsw if present; v2: memory.max,
  // memory.swap.max=0). v1: memory.swappiness=0 (no swap use) and the kernel's OOM killer
  // DISABLED for the cgroup (memory.oom_control=1): a breach makes the task wait in the kernel
  // (UnderOom()) and fires the OOM event, and the caller must end the whole sandbox (v1 would
  // otherwise kill one process and let the rest run on). v2: memory.oom.group=1 (the kernel's
  // OOM kill takes the whole sandbox at once). 0 = no limit (v1: killer enabled again).
  Status SetMemoryBytes(int64_t bytes);
  // RES-4: pids.max. 0 = no limit.
  Status SetPidsMax(int64_t pids);

  // Moves a process (all its threads, v1: cgroup.procs) into every hierarchy of this cgroup.
  Status Attach(pid_t pid);
  // fds a SINGLE-THREADED child between fork/clone and exec writes "0" to, to attach itself
  // (v2: cgroup.procs, one fd; v1: `tasks`, one per hierarchy, which moves the calling thread
  // only and so avoids the kernel's global threadgroup lock: cgroup.cc). Owned by the Cgroup.
  // The fds are O_CLOEXEC; writing to them is async-signal-safe (JoinFromChild below).
  std::vector<int> ProcsFds() const;
  // The same files by path (sbx-init opens them itself).
  std::vector<std::string> JoinFiles() const;
  // Child side of clone(): writes "0" to each fd of ProcsFds(). Async-signal-safe, allocates
  // nothing. Returns 0 or -errno of the first failed write.
  static int JoinFromChild(const int* fds, size_t count) noexcept;
  // v2 only: an O_DIRECTORY fd of the cgroup for clone3(CLONE_INTO_CGROUP); -1 on v1.
  int DirFd() const;

  // An eventfd that becomes readable when the kernel OOM-kills in this cgroup
  // (v1: cgroup.event_control on memory.oom_control; v2: inotify on memory.events).
  // Returns -1 if unavailable. Owned by the Cgroup. Readable is a wake-up, not the verdict
  // (v1 also signals it when the cgroup is removed; v2 on every memory.events change):
  // confirm with UnderOom() or OomKills() — and read both after the exit anyway (RES-8, FAIL-3).
  int OomEventFd();
  // The kernel's count of OOM kills in this cgroup (v1 memory.oom_control oom_kill; v2
  // memory.events oom_kill); 0 if unknown.
  int64_t OomKills() const;
  // v1: a task of this cgroup waits in OOM now (the killer is disabled: SetMemoryBytes), so the
  // limit was breached and nothing will end it but the caller. v2: false.
  bool UnderOom() const;
  // Consumes a pending wake-up of OomEventFd() without blocking: true if there was one (a
  // wake-up, not the verdict: confirm with UnderOom() / OomKills() as for OomEventFd()).
  // Call after a command ends (its event may have come after the last poll) and before the
  // next one starts (a wake-up from an earlier command must not be taken for its own).
  bool TakeOomEvent();

  CgroupUsage Usage() const;
  // How often pids.max refused a fork in this cgroup (v1 and v2 pids.events "max N"); 0 if
  // unknown (RES-4).
  int64_t PidsMaxRefusals() const;
  std::vector<pid_t> Pids() const;
  bool Empty() const;

  // Freezer (v1 freezer.state; v2 cgroup.freeze), waits until FROZEN/THAWED.
  Status Freeze();
  Status Thaw();
  // SIGKILL everything inside, including processes that setsid'd or double-forked:
  // freeze, kill each pid of cgroup.procs, thaw, until empty (v2: cgroup.kill where present).
  // (One plain SIGKILL round goes first; the freezer loop handles whatever survives it.)
  // Waits up to `timeout_s` for the cgroup to become empty (the caller reaps its own children).
  Status KillAll(double timeout_s = 2.0);
  // Sends `sig` to every process inside (for SIGTERM before the grace period).
  Status SignalAll(int sig);

  // Resets counters that can be reset (v1 memory.max_usage_in_bytes, failcnt) between execs.
  Status ResetPeak();

  const std::string& name() const;
  std::vector<std::string> Paths() const;

  struct Impl;
  explicit Cgroup(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace sbx::host
