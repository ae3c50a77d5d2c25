// host/ — what the harness reads off the host, from outside any target: the orphan census (this
// file), host facts for reports (host_facts.h), host scans for the isolation checks
// (host_scan.h). May include common/.
//
// What a runtime holding live sandboxes has on the host, seen from OUTSIDE (NFR-5, FAIL-6):
// the processes below it (/proc), the cgroup directories those processes live in below the
// runtime's own cgroup (cgroupfs, v1 and v2), and directories it owns under its state
// directory. Taken while the runtime is alive, then counted again after it was killed, until a
// reaper has removed everything. No internals of the runtime are used: only /proc, the cgroup
// mounts (/proc/self/mountinfo) and the state directory the caller chose.
//
// Thread-safety: a census is a value; Count() reads the file system.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sandcheck {

struct ProcStamp {
  pid_t pid = 0;
  unsigned long long start_ticks = 0;  // field 22 of /proc/PID/stat: tells a reused pid apart
};

// Every process below `root` (not `root` itself), from the ppid links of /proc/*/stat.
std::vector<ProcStamp> DescendantsOf(pid_t root);
// Alive: the pid exists with the same start time and is not a zombie.
bool StampAlive(const ProcStamp& s);
// The stamp of one pid (start_ticks 0 if it is gone).
ProcStamp StampOf(pid_t pid);

// The cgroup mounts: controller list ("cpu,cpuacct", "memory", "" for cgroup2) → mount point.
struct CgroupMount {
  std::string controllers;  // as in /proc/PID/cgroup's second field
  std::string path;
};
std::vector<CgroupMount> CgroupMounts();

// The cgroup directories process `pid` is in that lie strictly below `ancestor`'s cgroup in the
// same hierarchy, with every directory in between ("own/a", "own/a/b"), as absolute paths.
std::vector<std::string> CgroupDirsBelow(pid_t pid, pid_t ancestor,
                                         const std::vector<CgroupMount>& mounts);

class OrphanCensus {
 public:
  // Captures what the live `holder` has: its descendants, their cgroup directories below the
  // holder's own cgroup, and the entries of `state_dir` that are not in `state_before`.
  static OrphanCensus Capture(pid_t holder, const std::string& state_dir,
                              const std::vector<std::string>& state_before);

  struct Counts {
    int processes = 0, cgroups = 0, state_dirs = 0;
    bool Clean() const { return processes == 0 && cgroups == 0 && state_dirs == 0; }
  };
  // What of the captured objects still exists.
  Counts Count() const;
  nlohmann::json ToJson() const;  // sizes of the capture (for the evidence)
  bool Empty() const { return processes_.empty() && cgroups_.empty() && state_dirs_.empty(); }

 private:
  std::vector<ProcStamp> processes_;
  std::vector<std::string> cgroups_;
  std::vector<std::string> state_dirs_;
};

// Names in a directory (not "." / ".."), sorted; empty if it does not exist.
std::vector<std::string> ListDir(const std::string& dir);

}  // namespace sandcheck
