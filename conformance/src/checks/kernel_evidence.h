// Which kernel and which namespaces a sandbox really has, judged from evidence the runtime does
// not get to word: what `sbx-probe` read inside the sandbox (its keys kernel_id and namespaces)
// set against what the harness reads on its own host (host/kernel_identity.h). Used by the
// expect check's `kernel` and `namespaces_apart` conditions (docs/scenarios.md): a runtime that
// says "gvisor" but runs a plain container, or falls back to runc when runsc is missing, shows
// the host's kernel; one that shares the harness's PID namespace (hidepid or not) shows its
// namespace inode. Pure functions (kernel_evidence_test.cc).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sandcheck {

enum class KernelSeen {
  kHost,     // the sandbox's kernel is the harness's host kernel (a process, a container)
  kOwn,      // another kernel answers (a user-space kernel, a VM guest, another machine)
  kUnknown,  // the sandbox showed nothing to judge by
};

struct KernelFinding {
  KernelSeen seen = KernelSeen::kUnknown;
  std::string evidence;  // what decided it, for the verdict's reason
};

// `sandbox`: the probe's kernel_id ({boot_id, btime, version}); `host`: the harness's own.
// The host's kernel if boot_id is the host's, or if /proc/version is the host's and btime is
// within 2 s of it (a boot_id hidden or mounted over does not make a container another kernel);
// another kernel if the facts it shows differ; unknown if it shows none.
KernelFinding JudgeKernel(const nlohmann::json& sandbox, const nlohmann::json& host);

struct NamespaceFinding {
  std::vector<std::string> shared;      // names whose inode is the harness's
  std::vector<std::string> apart;       // names whose inode differs
  std::vector<std::string> not_shown;   // names the sandbox showed no inode for
};

// `sandbox`, `harness`: {name: inode|null}; only `names` are compared.
NamespaceFinding JudgeNamespaces(const nlohmann::json& sandbox, const nlohmann::json& harness,
                                 const std::vector<std::string>& names);

}  // namespace sandcheck
