// Reading a container's cgroups from outside (as opencontainers/runtime-tools validates limits):
// which directories the runtime created for a process, its OOM-kill counter, and a notification
// when its memory cgroup runs out of memory. Detects cgroup v1 and v2 per hierarchy (this
// machine is hybrid: v1 controllers plus an empty cgroup2 at /sys/fs/cgroup/unified).
//
// Paths are mapped through /proc/self/mountinfo, so they are right in a private mount namespace
// whose cgroup mounts are bind mounts of a sub-tree (what the crun adapter sets up).
//
// Thread-safety: stateless functions; OomWatch is a single-owner object.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/fd.h"
#include "sbx/status.h"

namespace sandcheck::adapter {

struct CgroupDir {
  std::string controllers;  // "memory", "cpu,cpuacct", "name=systemd", "" for v2
  std::string path;         // as in /proc/PID/cgroup
  std::string dir;          // the directory in this mount namespace
  std::string mount_point;  // where its hierarchy is mounted here
};

// Every cgroup of `pid` whose hierarchy is mounted here.
sbx::StatusOr<std::vector<CgroupDir>> CgroupDirsOf(pid_t pid);

// The hierarchy that carries the memory controller for `pid`: the v1 "memory" hierarchy, or the
// v2 hierarchy if its cgroup.controllers lists "memory". kUnsupported if neither.
struct MemoryCgroup {
  std::string dir;
  bool v2 = false;
};
sbx::StatusOr<MemoryCgroup> MemoryCgroupOf(pid_t pid);

// The directory of the hierarchy that carries `controller` ("pids", "cpu", ...) among `dirs`
// (a v1 hierarchy naming it, else a v2 one whose cgroup.controllers lists it); "" if none.
std::string ControllerDir(const std::vector<CgroupDir>& dirs, const std::string& controller);

// How often a fork was refused because pids.max was reached ("max" in pids.events; v1 and v2).
sbx::StatusOr<uint64_t> PidsLimitHits(const std::string& pids_dir);

// The kernel's count of OOM kills in that cgroup ("oom_kill" of memory.oom_control in v1,
// of memory.events in v2).
sbx::StatusOr<uint64_t> OomKillCount(const MemoryCgroup& cg);

// A file descriptor that becomes readable when the cgroup hits its memory limit:
// v1: an eventfd registered on memory.oom_control through cgroup.event_control (fires when the
// OOM condition starts, ~20 ms before the victim is reaped); v2: inotify on memory.events
// (fires on every change; call Fired() to tell an OOM kill from other events).
class OomWatch {
 public:
  static sbx::StatusOr<OomWatch> Start(const MemoryCgroup& cg);
  int fd() const { return fd_.get(); }
  // Call when fd() is readable: consumes the notification and says whether it means an OOM.
  bool Fired();

 private:
  OomWatch(UniqueFd fd, MemoryCgroup cg) : fd_(std::move(fd)), cg_(std::move(cg)) {}
  UniqueFd fd_;
  MemoryCgroup cg_;
};

// Removes the (empty) directories in `dirs` whose last component is `name` — nothing else, so a
// cgroup the adapter did not name is never touched. Missing ones are fine; EBUSY is an error.
sbx::Status RemoveCgroupDirs(const std::vector<std::string>& dirs, const std::string& name);

}  // namespace sandcheck::adapter
