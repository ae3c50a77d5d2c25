// OCI bundles for the oci (BK-3) and gvisor (BK-4) backends: the runtime-spec config.json of a
// sandbox container, the process.json of one command, and the spec's linux.seccomp form of the
// runtime's own seccomp deny-list (host/seccomp.cc). Pure functions: no I/O.
//
// What every container gets (the same rules as the native backend, docs/isolation.md): a
// read-only root, writable /work, /tmp, /var/tmp and $HOME only, uid/gid 1000, no capabilities,
// no_new_privs, the seccomp deny-list, RLIMIT_NOFILE, new PID/mount/IPC/UTS (and cgroup)
// namespaces, and either a fresh network namespace (only lo: SNAP-5) or the instance's egress
// namespace. See docs/backends.md.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sbx/model.h"
#include "sbx/status.h"

namespace sbx::backend {

inline constexpr uint32_t kOciSandboxUid = 1000;  // "sandbox" in the image's /etc/passwd
inline constexpr uint32_t kOciSandboxGid = 1000;
inline constexpr int64_t kOciCpuPeriodUs = 100000;

struct OciMount {
  std::string destination, type, source;
  std::vector<std::string> options;
};

// One process of a container (the init, or one command run with `<runtime> exec`).
struct OciProcess {
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  uint32_t uid = kOciSandboxUid, gid = kOciSandboxGid;
  std::string cwd = "/work";
  int64_t nofile = 1024;    // RES-6
  int64_t nofile_hard = 0;  // 0: the same as nofile
  // Capabilities in the bounding, effective and permitted sets ("CAP_SETUID", ...): none for a
  // tool; the in-sandbox agent keeps the three it needs to drop privileges in each command.
  std::vector<std::string> capabilities;
};

struct OciBundleSpec {
  std::string root_path;         // absolute; mounted read-only (FS-2)
  std::vector<OciMount> mounts;  // in addition to /proc and /dev
  OciProcess init;
  // "" = a new, empty network namespace (only lo: SNAP-5); else a path to join (egress).
  std::string netns_path;
  bool cgroup_namespace = true;  // gVisor has its own cgroupfs; crun/runc: a cgroup namespace
  std::string cgroups_path;      // "" = leave out (the backend puts processes in its cgroup)
  bool resources = true;         // write linux.resources (cpu, memory, pids)
  Limits limits;                 // already defaulted
  nlohmann::json seccomp;        // null = no linux.seccomp
  std::string hostname = "sandbox";
};

// The base environment of every command (as in the native backend).
std::map<std::string, std::string> OciBaseEnv();

// config.json of the bundle.
nlohmann::json OciConfig(const OciBundleSpec& spec);
// process.json for `<runtime> exec --process`.
nlohmann::json OciProcessJson(const OciProcess& p);

// The OCI linux.seccomp equivalent of host::SeccompFilter's deny-list, built from its
// `denied()` names so there is one source of truth: a name alone is an EPERM rule,
// "clone(CLONE_X)" a masked-equality rule on clone's flags, "clone3" ENOSYS, the personality
// and ioctl entries their argument rules. An entry of any other shape is kInvalidArgument, so
// a rule added to host/seccomp.cc without a translation here fails loudly (oci_bundle_test).
// Only the native x86_64 ABI is listed: the OCI runtime's libseccomp kills other ABIs.
StatusOr<nlohmann::json> OciSeccompFromDenyList(const std::vector<std::string>& denied);

}  // namespace sbx::backend
