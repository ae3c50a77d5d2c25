// cgroup v2 driver: one unified directory per sandbox. Freezing (cgroup.freeze) and killing
// (cgroup.kill) are core files, present without any controller; cpu, memory and pids must be
// delegated to the runtime's own cgroup (its cgroup.subtree_control).
#include <fmt/format.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <string>

#include "host/cgroup_internal.h"

namespace sbx::host::cgroup_internal {
namespace {

Status NoController(std::string_view c, const std::string& dir) {
  return Unsupported(fmt::format(
      "cgroup v2: the {} controller is not enabled for {} (not delegated to the runtime's cgroup)",
      c, dir));
}

bool Has(const std::string& list, std::string_view word) {
  size_t pos = 0;
  while ((pos = list.find(word, pos)) != std::string::npos) {
    bool start = pos == 0 || list[pos - 1] == ' ';
    bool end = pos + word.size() == list.size() || list[pos + word.size()] == ' ' ||
               list[pos + word.size()] == '\n';
    if (start && end) return true;
    pos += word.size();
  }
  return false;
}

class V2Driver final : public CgroupDriver {
 public:
  Status PrepareParent(const CgroupDirs& parent, bool require_controllers) const override {
    const std::string& dir = parent.dirs.at(0);
    // What our own cgroup hands down shows up as the parent's cgroup.controllers. We never
    // write to our own cgroup (we did not create it): if it does not delegate, we say so.
    ASSIGN_OR_RETURN(std::string available, ReadFile(dir + "/cgroup.controllers"));
    std::string enable;
    std::string missing;
    for (std::string_view c : kV2Controllers) {
      if (Has(available, c)) {
        enable += fmt::format("{}+{}", enable.empty() ? "" : " ", c);
      } else {
        missing += fmt::format("{}{}", missing.empty() ? "" : ", ", c);
      }
    }
    if (require_controllers && !missing.empty()) {
      return Unsupported(fmt::format(
          "cgroup v2: controllers {} are not delegated to the runtime's cgroup {} (enable them in "
          "its cgroup.subtree_control, e.g. run under systemd with Delegate=yes)",
          missing, parent.layout->hierarchies.at(0).own_dir));
    }
    if (enable.empty()) return Status::Ok();
    // The parent holds no process (only sandbox cgroups), so it may distribute controllers.
    return WriteFile(dir + "/cgroup.subtree_control", enable);
  }

  Status SetCpu(const CgroupDirs& d, const CpuQuota& q) const override {
    const std::string& dir = d.dirs.at(0);
    if (!Exists(dir + "/cpu.max")) return NoController("cpu", dir);
    // SECURITY: RES-1 hard cap.
    return WriteFile(dir + "/cpu.max", CpuMaxValue(q));
  }

  Status SetMemory(const CgroupDirs& d, int64_t bytes) const override {
    const std::string& dir = d.dirs.at(0);
    if (!Exists(dir + "/memory.max")) return NoController("memory", dir);
    // SECURITY: RES-2 hard limit, and no swap to extend it.
    RETURN_IF_ERROR(WriteFile(dir + "/memory.max", bytes > 0 ? std::to_string(bytes) : "max"));
    if (Exists(dir + "/memory.swap.max")) {
      RETURN_IF_ERROR(WriteFile(dir + "/memory.swap.max", "0"));
    }
    // RES-8: an OOM kill takes the whole sandbox, not one process of it.
    if (Exists(dir + "/memory.oom.group")) {
      RETURN_IF_ERROR(WriteFile(dir + "/memory.oom.group", "1"));
    }
    return Status::Ok();
  }

  Status SetPids(const CgroupDirs& d, int64_t max) const override {
    const std::string& dir = d.dirs.at(0);
    if (!Exists(dir + "/pids.max")) return NoController("pids", dir);
    // SECURITY: RES-4, PROD-2.
    return WriteFile(dir + "/pids.max", max > 0 ? std::to_string(max) : "max");
  }

  StatusOr<int> OpenOomEventFd(const CgroupDirs& d) const override {
    const std::string events = d.dirs.at(0) + "/memory.events";
    if (!Exists(events)) return NoController("memory", d.dirs.at(0));
    int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (fd < 0) return ErrnoStatus("inotify_init1");
    // kernfs reports every change of memory.events (low/high/max/oom/oom_kill) as IN_MODIFY.
    if (inotify_add_watch(fd, events.c_str(), IN_MODIFY) < 0) {
      Status s = ErrnoStatus(fmt::format("inotify_add_watch {}", events));
      close(fd);
      return s;
    }
    return fd;
  }

  int64_t OomKills(const CgroupDirs& d) const override {
    return ReadKeyed(d.dirs.at(0) + "/memory.events", "oom_kill").value_or(0);
  }

  bool UnderOom(const CgroupDirs&) const override { return false; }  // oom.group kills at once

  CgroupUsage Usage(const CgroupDirs& d) const override {
    const std::string& dir = d.dirs.at(0);
    CgroupUsage u;
    if (StatusOr<std::string> stat = ReadFile(dir + "/cpu.stat"); stat.ok()) {
      u.cpu_seconds = static_cast<double>(KeyedValue(*stat, "usage_usec").value_or(0)) * 1e-6;
      u.throttled_seconds =
          static_cast<double>(KeyedValue(*stat, "throttled_usec").value_or(0)) * 1e-6;
    }
    u.memory_current_bytes = ReadInt(dir + "/memory.current").value_or(0);
    u.memory_peak_bytes = ReadInt(dir + "/memory.peak").value_or(u.memory_current_bytes);
    u.oom_kills = ReadKeyed(dir + "/memory.events", "oom_kill").value_or(0);
    u.pids_current = ReadInt(dir + "/pids.current").value_or(0);
    u.pids_peak = ReadInt(dir + "/pids.peak").value_or(-1);
    return u;
  }

  bool CanFreeze(const CgroupDirs& d) const override {
    return Exists(d.dirs.at(0) + "/cgroup.freeze");
  }

  Status SetFrozen(const CgroupDirs& d, bool frozen, double timeout_s) const override {
    const std::string& dir = d.dirs.at(0);
    RETURN_IF_ERROR(WriteFile(dir + "/cgroup.freeze", frozen ? "1" : "0"));
    const int64_t want = frozen ? 1 : 0;
    std::optional<int64_t> last;
    bool reached = WaitUntil(
        [&] {
          last = ReadKeyed(dir + "/cgroup.events", "frozen");
          return last == want;
        },
        timeout_s);
    if (reached) return Status::Ok();
    return Internal(fmt::format("freezer: {}/cgroup.events says frozen {} after {} s, wanted {}",
                                dir, last.value_or(-1), timeout_s, want));
  }

  Status KillAtOnce(const CgroupDirs& d) const override {
    const std::string kill = d.dirs.at(0) + "/cgroup.kill";
    if (!Exists(kill)) return Unsupported("cgroup.kill needs Linux ≥ 5.14");
    // SECURITY: the kernel kills every process of the subtree, new forks included.
    return WriteFile(kill, "1");
  }

  Status ResetPeak(const CgroupDirs&) const override {
    // memory.peak can only be reset per open file (6.12+), not for other readers.
    return Unsupported("cgroup v2: memory.peak cannot be reset for all readers");
  }
};

}  // namespace

const CgroupDriver& V2DriverInstance() {
  static const V2Driver kDriver;
  return kDriver;
}

}  // namespace sbx::host::cgroup_internal
