// cgroup v1 driver: each controller in the hierarchy it is mounted in (separate "cpu" and
// "cpuacct" on this machine, or co-mounted "cpu,cpuacct" elsewhere; CgroupDirs::For finds it).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <string>

#include "host/cgroup_internal.h"

namespace sbx::host::cgroup_internal {
namespace {

Status NoController(std::string_view c) {
  return Unsupported(fmt::format("cgroup v1: the {} controller is not mounted", c));
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

class V1Driver final : public CgroupDriver {
 public:
  Status PrepareParent(const CgroupDirs& parent, bool /*require_controllers*/) const override {
    const std::string& mem = parent.For("memory");
    if (mem.empty()) return Status::Ok();
    // Limits of a sandbox must count against its ancestors too; kernels ≥ 5.x always do, older
    // ones need memory.use_hierarchy=1, settable only while the cgroup has no children.
    std::optional<int64_t> h = ReadInt(mem + "/memory.use_hierarchy");
    if (h.has_value() && *h == 0) {
      RETURN_IF_ERROR(WriteFile(mem + "/memory.use_hierarchy", "1"));
    }
    return Status::Ok();
  }

  Status SetCpu(const CgroupDirs& d, const CpuQuota& q) const override {
    const std::string& dir = d.For("cpu");
    if (dir.empty()) return NoController("cpu");
    // SECURITY: RES-1 hard cap. Every intermediate (period, quota) pair is valid (quota ≥ 1 ms,
    // period in 1 ms..1 s), so the order of the two writes does not matter.
    if (q.quota_us < 0) return WriteFile(dir + "/cpu.cfs_quota_us", "-1");
    RETURN_IF_ERROR(WriteFile(dir + "/cpu.cfs_period_us", std::to_string(q.period_us)));
    return WriteFile(dir + "/cpu.cfs_quota_us", std::to_string(q.quota_us));
  }

  Status SetMemory(const CgroupDirs& d, int64_t bytes) const override {
    const std::string& dir = d.For("memory");
    if (dir.empty()) return NoController("memory");
    const std::string limit = bytes > 0 ? std::to_string(bytes) : "-1";
    const std::string mem = dir + "/memory.limit_in_bytes";
    const std::string memsw = dir + "/memory.memsw.limit_in_bytes";
    // SECURITY: RES-2. memory+swap is capped at the same value so that swap cannot extend the
    // limit. The kernel requires memsw ≥ mem at every moment: lower mem first, raise memsw first.
    if (Exists(memsw)) {
      std::optional<int64_t> cur_memsw = ReadInt(memsw);
      bool raising = bytes <= 0 || (cur_memsw.has_value() && bytes > *cur_memsw);
      if (raising) {
        RETURN_IF_ERROR(WriteFile(memsw, limit));
        RETURN_IF_ERROR(WriteFile(mem, limit));
      } else {
        RETURN_IF_ERROR(WriteFile(mem, limit));
        RETURN_IF_ERROR(WriteFile(memsw, limit));
      }
    } else {
      RETURN_IF_ERROR(WriteFile(mem, limit));
    }
    // No swap use at all (also where swap accounting is off and memsw does not exist).
    RETURN_IF_ERROR(WriteFile(dir + "/memory.swappiness", "0").WithContext("disabling swap (RES-2)"));
    // SECURITY: RES-8, FAIL-3. v1's OOM killer kills ONE process and the rest of the sandbox
    // runs on: a shell whose child was killed carries on with its next command before any
    // watcher can act (seen in CI: "shell-survived" printed after an OOM). With the kernel's
    // killer disabled for this cgroup, a task that breaches the limit waits in the kernel
    // (under_oom 1) instead, the OOM eventfd fires, and the runtime ends the WHOLE sandbox: no
    // process of it runs past the breach. The waiting tasks hold no more than the limit, and
    // SIGKILL ends them (they sleep killable). With no limit the killer is enabled again.
    return WriteFile(dir + "/memory.oom_control", bytes > 0 ? "1" : "0")
        .WithContext("memory.oom_control (RES-8)");
  }

  Status SetPids(const CgroupDirs& d, int64_t max) const override {
    const std::string& dir = d.For("pids");
    if (dir.empty()) return NoController("pids");
    // SECURITY: RES-4, PROD-2: fork bombs stop at pids.max (fork fails with EAGAIN).
    return WriteFile(dir + "/pids.max", max > 0 ? std::to_string(max) : "max");
  }

  StatusOr<int> OpenOomEventFd(const CgroupDirs& d) const override {
    const std::string& dir = d.For("memory");
    if (dir.empty()) return NoController("memory");
    int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (efd < 0) return ErrnoStatus("eventfd");
    const std::string oom = dir + "/memory.oom_control";
    int cfd = open(oom.c_str(), O_RDONLY | O_CLOEXEC);
    if (cfd < 0) {
      Status s = ErrnoStatus(fmt::format("open {}", oom));
      close(efd);
      return s;
    }
    // "<event_fd> <control_fd>": the kernel signals efd on every OOM in this memcg (and when
    // the cgroup is removed). The registration holds its own references; cfd can go.
    Status s = WriteFile(dir + "/cgroup.event_control", fmt::format("{} {}", efd, cfd));
    close(cfd);
    if (!s.ok()) {
      close(efd);
      return s;
    }
    return efd;
  }

  int64_t OomKills(const CgroupDirs& d) const override {
    const std::string& dir = d.For("memory");
    if (dir.empty()) return 0;
    return ReadKeyed(dir + "/memory.oom_control", "oom_kill").value_or(0);
  }

  bool UnderOom(const CgroupDirs& d) const override {
    const std::string& dir = d.For("memory");
    if (dir.empty()) return false;
    return ReadKeyed(dir + "/memory.oom_control", "under_oom").value_or(0) != 0;
  }

  CgroupUsage Usage(const CgroupDirs& d) const override {
    CgroupUsage u;
    if (const std::string& acct = d.For("cpuacct"); !acct.empty()) {
      // cpuacct.usage (ns, exact) — not cpuacct.stat, which is in ticks and sampled.
      u.cpu_seconds = static_cast<double>(ReadInt(acct + "/cpuacct.usage").value_or(0)) * 1e-9;
    }
    if (const std::string& cpu = d.For("cpu"); !cpu.empty()) {
      u.throttled_seconds =
          static_cast<double>(ReadKeyed(cpu + "/cpu.stat", "throttled_time").value_or(0)) * 1e-9;
    }
    if (const std::string& mem = d.For("memory"); !mem.empty()) {
      u.memory_peak_bytes = ReadInt(mem + "/memory.max_usage_in_bytes").value_or(0);
      u.memory_current_bytes = ReadInt(mem + "/memory.usage_in_bytes").value_or(0);
      u.oom_kills = ReadKeyed(mem + "/memory.oom_control", "oom_kill").value_or(0);
    }
    u.pids_peak = -1;
    if (const std::string& pids = d.For("pids"); !pids.empty()) {
      u.pids_current = ReadInt(pids + "/pids.current").value_or(0);
      u.pids_peak = ReadInt(pids + "/pids.peak").value_or(-1);
    }
    return u;
  }

  bool CanFreeze(const CgroupDirs& d) const override { return !d.For("freezer").empty(); }

  Status SetFrozen(const CgroupDirs& d, bool frozen, double timeout_s) const override {
    const std::string& dir = d.For("freezer");
    if (dir.empty()) return NoController("freezer");
    const std::string state = dir + "/freezer.state";
    const char* want = frozen ? "FROZEN" : "THAWED";
    RETURN_IF_ERROR(WriteFile(state, want));
    std::string last;
    int round = 0;
    bool reached = WaitUntil(
        [&] {
          StatusOr<std::string> s = ReadFile(state);
          last = s.ok() ? Trim(*s) : s.status().ToString();
          // Re-asking helps tasks that were busy in the kernel when the first request came.
          if (last == "FREEZING" && ++round % 16 == 0) (void)WriteFile(state, want);
          return last == want;
        },
        timeout_s);
    if (reached) return Status::Ok();
    return Internal(
        fmt::format("freezer: {} is {} after {} s, wanted {}", state, last, timeout_s, want));
  }

  Status KillAtOnce(const CgroupDirs&) const override {
    return Unsupported("cgroup v1 has no cgroup.kill");
  }

  Status ResetPeak(const CgroupDirs& d) const override {
    const std::string& mem = d.For("memory");
    if (mem.empty()) return NoController("memory");
    RETURN_IF_ERROR(WriteFile(mem + "/memory.max_usage_in_bytes", "0"));
    RETURN_IF_ERROR(WriteFile(mem + "/memory.failcnt", "0"));
    if (Exists(mem + "/memory.memsw.max_usage_in_bytes")) {
      RETURN_IF_ERROR(WriteFile(mem + "/memory.memsw.max_usage_in_bytes", "0"));
      RETURN_IF_ERROR(WriteFile(mem + "/memory.memsw.failcnt", "0"));
    }
    return Status::Ok();
  }
};

}  // namespace

const CgroupDriver& V1DriverInstance() {
  static const V1Driver kDriver;
  return kDriver;
}

}  // namespace sbx::host::cgroup_internal
