#include "backend/oci/oci_bundle.h"

#include <fmt/format.h>
#include <sched.h>
#include <sys/ioctl.h>

#include "backend/common/init_client.h"

namespace sbx::backend {
namespace {

using Json = nlohmann::json;

Json MountJson(const OciMount& m) {
  return Json{{"destination", m.destination},
              {"type", m.type},
              {"source", m.source},
              {"options", m.options}};
}

Json Deny(const std::string& name, int err, Json args = Json::array()) {
  Json rule = {{"names", {name}}, {"action", "SCMP_ACT_ERRNO"}, {"errnoRet", err}};
  if (!args.empty()) rule["args"] = std::move(args);
  return rule;
}

Json MaskedEq(int index, uint64_t mask, uint64_t value) {
  return Json::array(
      {{{"index", index}, {"value", mask}, {"valueTwo", value}, {"op", "SCMP_CMP_MASKED_EQ"}}});
}

// The clone(2) flags that create namespaces, by the names host/seccomp.cc uses.
constexpr struct {
  const char* name;
  uint64_t flag;
} kCloneFlags[] = {
    {"CLONE_NEWUSER", CLONE_NEWUSER},     {"CLONE_NEWNS", CLONE_NEWNS},
    {"CLONE_NEWPID", CLONE_NEWPID},       {"CLONE_NEWNET", CLONE_NEWNET},
    {"CLONE_NEWUTS", CLONE_NEWUTS},       {"CLONE_NEWIPC", CLONE_NEWIPC},
    {"CLONE_NEWCGROUP", CLONE_NEWCGROUP},
};

// personality(2): the same union of rules as host/seccomp.cc (every value other than 0, 8 and
// 0xffffffff is denied; the argument behind it is in that file).
void AddPersonalityRules(Json* rules) {
  rules->push_back(
      Deny("personality", EPERM,
           Json::array({{{"index", 0}, {"value", uint64_t{0xffffffff}}, {"op", "SCMP_CMP_GT"}}})));
  auto pair = [&](int set_bit, int clear_bit) {
    uint64_t mask = (uint64_t{1} << set_bit) | (uint64_t{1} << clear_bit);
    rules->push_back(Deny("personality", EPERM, MaskedEq(0, mask, uint64_t{1} << set_bit)));
  };
  for (int i = 0; i < 32; i++) {
    if (i != 3) pair(i, (i + 1) % 32);
  }
  pair(2, 4);
}

}  // namespace

std::map<std::string, std::string> OciBaseEnv() { return AgentBaseEnv(); }

Json OciProcessJson(const OciProcess& p) {
  Json env = Json::array();
  for (const auto& [k, v] : p.env) env.push_back(k + "=" + v);
  Json none = Json::array();
  Json caps = p.capabilities;
  return Json{{"terminal", false},
              // SECURITY: the image's unprivileged user, no supplementary groups.
              {"user", {{"uid", p.uid}, {"gid", p.gid}, {"additionalGids", Json::array()}}},
              {"args", p.args},
              {"env", env},
              {"cwd", p.cwd},
              // SECURITY: no capability in any set (the bounding set too): root powers are gone
              // even for a process that could become uid 0 inside. Only the agent (init) has
              // the few it drops in each command.
              {"capabilities",
               {{"bounding", caps},
                {"effective", caps},
                {"permitted", caps},
                {"inheritable", none},
                {"ambient", none}}},
              // RES-6: descriptors; no core dumps (they could hold secrets).
              {"rlimits",
               {{{"type", "RLIMIT_NOFILE"},
                 {"hard", p.nofile_hard > 0 ? p.nofile_hard : p.nofile},
                 {"soft", p.nofile}},
                {{"type", "RLIMIT_CORE"}, {"hard", 0}, {"soft", 0}}}},
              // SECURITY: setuid binaries in the image cannot regain privileges.
              {"noNewPrivileges", true}};
}

Json OciConfig(const OciBundleSpec& spec) {
  Json mounts = Json::array();
  // FS-3: /proc of the container's own PID namespace.
  mounts.push_back(MountJson({"/proc", "proc", "proc", {"nosuid", "noexec", "nodev"}}));
  // A minimal /dev: the runtime creates null, zero, full, random, urandom and tty in it.
  mounts.push_back(
      MountJson({"/dev", "tmpfs", "tmpfs", {"nosuid", "noexec", "mode=755", "size=64k"}}));
  for (const OciMount& m : spec.mounts) mounts.push_back(MountJson(m));

  Json namespaces =
      Json::array({{{"type", "pid"}}, {{"type", "mount"}}, {{"type", "ipc"}}, {{"type", "uts"}}});
  // SECURITY: either a new network namespace (only lo: SNAP-5) or the instance's egress
  // namespace, whose only route leads to the gateway (RES-7).
  if (spec.netns_path.empty()) {
    namespaces.push_back({{"type", "network"}});
  } else {
    namespaces.push_back({{"type", "network"}, {"path", spec.netns_path}});
  }
  if (spec.cgroup_namespace) namespaces.push_back({{"type", "cgroup"}});

  Json linux_section = {
      {"namespaces", namespaces},
      // SECURITY: what procfs would tell about the host, masked or read-only.
      {"maskedPaths",
       {"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
        "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
        "/proc/kallsyms", "/proc/kmsg", "/proc/sysrq-trigger"}},
      {"readonlyPaths", {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys"}}};
  if (!spec.cgroups_path.empty()) linux_section["cgroupsPath"] = spec.cgroups_path;
  if (spec.resources) {
    Json res = {{"devices", {{{"allow", false}, {"access", "rwm"}}}}};
    // RES-1: the CPU quota is a hard cap (quota per 100 ms period).
    if (spec.limits.cpu_millicores > 0) {
      res["cpu"] = {{"quota", spec.limits.cpu_millicores * kOciCpuPeriodUs / 1000},
                    {"period", kOciCpuPeriodUs}};
    }
    // RES-2: memory, swap capped at the same value so the limit cannot be dodged.
    if (spec.limits.memory_bytes > 0) {
      res["memory"] = {{"limit", spec.limits.memory_bytes}, {"swap", spec.limits.memory_bytes}};
    }
    // RES-4.
    if (spec.limits.pids > 0) res["pids"] = {{"limit", spec.limits.pids}};
    linux_section["resources"] = res;
  }
  if (!spec.seccomp.is_null()) linux_section["seccomp"] = spec.seccomp;

  return Json{{"ociVersion", "1.0.2"},
              {"process", OciProcessJson(spec.init)},
              // FS-1, FS-2: the root is read-only; writes go to the explicit mounts only.
              {"root", {{"path", spec.root_path}, {"readonly", true}}},
              {"hostname", spec.hostname},
              {"mounts", mounts},
              {"linux", linux_section}};
}

StatusOr<Json> OciSeccompFromDenyList(const std::vector<std::string>& denied) {
  Json rules = Json::array();
  for (const std::string& d : denied) {
    if (d.find_first_of("() ") == std::string::npos) {
      if (d == "clone3") {
        // clone3 hides its flags from seccomp: ENOSYS makes libc fall back to clone(2).
        rules.push_back(Deny(d, ENOSYS));
      } else {
        rules.push_back(Deny(d, EPERM));
      }
      continue;
    }
    if (d.rfind("clone(", 0) == 0 && d.back() == ')') {
      std::string flag = d.substr(6, d.size() - 7);
      bool known = false;
      for (const auto& f : kCloneFlags) {
        if (flag == f.name) {
          rules.push_back(Deny("clone", EPERM, MaskedEq(0, f.flag, f.flag)));
          known = true;
        }
      }
      if (!known) return InvalidArgument(fmt::format("seccomp entry '{}': unknown clone flag", d));
      continue;
    }
    if (d.rfind("personality(", 0) == 0) {
      AddPersonalityRules(&rules);
      continue;
    }
    if (d == "ioctl(TIOCSTI)" || d == "ioctl(TIOCLINUX)") {
      uint64_t req = d == "ioctl(TIOCSTI)" ? uint64_t{TIOCSTI} : uint64_t{TIOCLINUX};
      // The kernel truncates the request to 32 bits: compare the low half only.
      rules.push_back(Deny("ioctl", EPERM, MaskedEq(1, 0xffffffffULL, req)));
      continue;
    }
    return InvalidArgument(
        fmt::format("seccomp entry '{}' has no OCI translation (backend/oci_bundle.cc)", d));
  }
  return Json{{"defaultAction", "SCMP_ACT_ALLOW"},
              {"architectures", {"SCMP_ARCH_X86_64"}},
              {"syscalls", rules}};
}

}  // namespace sbx::backend
