// Internals of host/cgroup: discovery (pure parsing, cgroup_layout.cc), cgroupfs file helpers
// (cgroup_fs.cc) and the v1/v2 drivers (cgroup_v1.cc, cgroup_v2.cc) behind one interface.
// Not part of the runtime's API; included by cgroup*.cc and the unit test.
//
// Thread-safety: everything here is stateless or works on values; the drivers are immutable
// singletons.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "host/cgroup.h"
#include "sbx/status.h"

namespace sbx::host::cgroup_internal {

// ---------------------------------------------------------------------------------------------
// Discovery (cgroup_layout.cc): pure functions over the text of /proc/self/cgroup and
// /proc/self/mountinfo.

// One line of /proc/<pid>/cgroup: "hierarchy-ID:controller-list:cgroup-path".
struct ProcCgroupEntry {
  int hierarchy_id = 0;                  // 0 = the v2 unified hierarchy
  std::vector<std::string> controllers;  // v1: {"cpu","cpuacct"} / {"name=systemd"}; v2: {}
  std::string path;                      // relative to the cgroup namespace root, starts "/"
};
StatusOr<std::vector<ProcCgroupEntry>> ParseProcCgroup(std::string_view text);

// A cgroup or cgroup2 mount from /proc/self/mountinfo.
struct CgroupMount {
  bool v2 = false;
  std::string root;                      // the hierarchy path mounted there (field 4), "/" usually
  std::string mount_point;               // unescaped (\040 etc.)
  std::vector<std::string> controllers;  // v1: controllers from the super options; v2: {}
};
// Returns only the cgroup/cgroup2 mounts; malformed lines are kInvalidArgument.
StatusOr<std::vector<CgroupMount>> ParseCgroupMounts(std::string_view mountinfo);

// One hierarchy we manage.
struct Hierarchy {
  std::vector<std::string> controllers;  // v1: the controllers we use in it ({"cpu","cpuacct"}
                                         // when co-mounted); v2: {}
  std::string mount_point;
  std::string own_dir;  // absolute: the runtime's own cgroup in it
};

struct CgroupLayout {
  CgroupVersion version = CgroupVersion::kV1;
  std::vector<Hierarchy> hierarchies;  // v1: one per distinct hierarchy; v2: exactly one
  // Index of the hierarchy holding `controller` (v2: 0 for any), or -1.
  int IndexOf(std::string_view controller) const;
};

// The v1 controllers we use, each in whatever hierarchy it is mounted (co-mounted or not).
inline constexpr std::string_view kV1Controllers[] = {"cpu", "cpuacct", "memory", "pids",
                                                      "freezer"};
// The v2 controllers we enable for sandboxes (freeze and kill are core files in v2).
inline constexpr std::string_view kV2Controllers[] = {"cpu", "memory", "pids"};

// Chooses the version and finds the runtime's own cgroup per hierarchy. kUnsupported when
// the needed hierarchies are missing (with require_controllers) or our cgroup lies outside
// the mounted part of the hierarchy ("/.." paths, a mount of a different subtree).
StatusOr<CgroupLayout> ResolveLayout(std::string_view proc_self_cgroup, std::string_view mountinfo,
                                     const CgroupOptions& options);

// Replaces each hierarchy's own_dir by the recorded path that lies inside its mount point
// (CgroupOptions::adopt_own_dirs, the reaper). kInvalidArgument for a path that is not
// absolute, has "." / ".." / empty components, or lies in no hierarchy of the layout.
Status AdoptOwnDirs(const std::vector<std::string>& dirs, CgroupLayout* layout);

// "[A-Za-z0-9_.-]{1,64}", not "." or "..": safe as one path component.
Status ValidateName(std::string_view name, std::string_view what);

// ---------------------------------------------------------------------------------------------
// Quota arithmetic (cgroup_layout.cc). RES-1.

inline constexpr int64_t kCfsPeriodUs = 100000;      // 100 ms
inline constexpr int64_t kCfsMinQuotaUs = 1000;      // the kernel's minimum quota (1 ms)
inline constexpr int64_t kCfsMaxPeriodUs = 1000000;  // the kernel's maximum period (1 s)

struct CpuQuota {
  int64_t quota_us = -1;  // -1: no cap
  int64_t period_us = kCfsPeriodUs;
};
// quota = millicores * period / 1000 with period 100 ms; below 10 millicores period 1 s (so
// the quota stays ≥ 1 ms). 0 = no cap. Negative or > 1024 cores: kInvalidArgument.
StatusOr<CpuQuota> CpuQuotaFor(int64_t millicores);
// v2 cpu.max value: "50000 100000" or "max 100000".
std::string CpuMaxValue(const CpuQuota& q);

// ---------------------------------------------------------------------------------------------
// Parsing of cgroupfs file contents (cgroup_layout.cc).

// Value of `key` in a flat-keyed file ("key value\n" lines: cpu.stat, memory.events,
// memory.oom_control, cgroup.events). nullopt if absent or not an integer.
std::optional<int64_t> KeyedValue(std::string_view text, std::string_view key);
// One pid per line (cgroup.procs).
std::vector<pid_t> ParsePidList(std::string_view text);

// ---------------------------------------------------------------------------------------------
// cgroupfs file helpers (cgroup_fs.cc). Errors through sbx::ErrnoStatus.

StatusOr<std::string> ReadFile(const std::string& path);
// One write(2) of `value` (cgroupfs takes a value per write). EINTR retried.
Status WriteFile(const std::string& path, std::string_view value);
bool Exists(const std::string& path);
std::optional<int64_t> ReadInt(const std::string& path);  // "max" → nullopt
std::optional<int64_t> ReadKeyed(const std::string& path, std::string_view key);
std::vector<std::string> SubDirs(const std::string& dir);  // names, sorted
// Pids in `dir` and every cgroup below it (a sandbox may have made sub-cgroups).
std::vector<pid_t> ReadProcsRecursive(const std::string& dir);
// rmdir of `dir` and every cgroup below it, deepest first; EBUSY retried until `timeout_s`.
// A missing `dir` is OK (already gone).
Status RemoveTree(const std::string& dir, double timeout_s);
// Sleeps with backoff until `done()` or `timeout_s`; returns done()'s last value.
template <typename F>
bool WaitUntil(F done, double timeout_s);
void SleepBackoff(int round);  // 50 µs doubling up to 2 ms
double MonotonicSeconds();

template <typename F>
bool WaitUntil(F done, double timeout_s) {
  const double deadline = MonotonicSeconds() + timeout_s;
  for (int round = 0;; ++round) {
    if (done()) return true;
    if (MonotonicSeconds() >= deadline) return done();
    SleepBackoff(round);
  }
}

// ---------------------------------------------------------------------------------------------
// Drivers.

// One sandbox cgroup's directories, parallel to layout->hierarchies.
struct CgroupDirs {
  std::shared_ptr<const CgroupLayout> layout;
  std::vector<std::string> dirs;
  // Directory of the hierarchy holding `controller` (v2: the unified dir); "" if unmanaged.
  const std::string& For(std::string_view controller) const;
};

// What differs between v1 and v2. Stateless; errors are Status, never exceptions.
class CgroupDriver {
 public:
  virtual ~CgroupDriver() = default;
  static const CgroupDriver& For(CgroupVersion version);

  // After the runtime's parent cgroups were made (v1: memory.use_hierarchy; v2: enable the
  // delegated controllers in its cgroup.subtree_control).
  virtual Status PrepareParent(const CgroupDirs& parent, bool require_controllers) const = 0;
  virtual Status SetCpu(const CgroupDirs& d, const CpuQuota& q) const = 0;
  virtual Status SetMemory(const CgroupDirs& d, int64_t bytes) const = 0;  // ≤0: no limit
  virtual Status SetPids(const CgroupDirs& d, int64_t max) const = 0;      // ≤0: no limit
  // Returns an fd (O_CLOEXEC|O_NONBLOCK) that becomes readable on an OOM event.
  virtual StatusOr<int> OpenOomEventFd(const CgroupDirs& d) const = 0;
  virtual int64_t OomKills(const CgroupDirs& d) const = 0;
  // v1: a task of the cgroup waits in OOM (memory.oom_control under_oom, with the kernel's OOM
  // killer disabled for the cgroup); v2: always false (the kernel kills the group at once).
  virtual bool UnderOom(const CgroupDirs& d) const = 0;
  virtual CgroupUsage Usage(const CgroupDirs& d) const = 0;
  virtual bool CanFreeze(const CgroupDirs& d) const = 0;
  // Freezes/thaws and waits until the kernel says the state was reached.
  virtual Status SetFrozen(const CgroupDirs& d, bool frozen, double timeout_s) const = 0;
  // Kills every process at once if the kernel offers it (v2 cgroup.kill); else kUnsupported.
  virtual Status KillAtOnce(const CgroupDirs& d) const = 0;
  virtual Status ResetPeak(const CgroupDirs& d) const = 0;
};
const CgroupDriver& V1DriverInstance();  // cgroup_v1.cc
const CgroupDriver& V2DriverInstance();  // cgroup_v2.cc

}  // namespace sbx::host::cgroup_internal
