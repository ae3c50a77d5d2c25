// One incarnation of a native sandbox (BK-1): a cgroup, a set of namespaces held by sbx-init
// (PID 1 of the sandbox), a scratch tmpfs + overlay root built by sbx-init, and optionally an
// egress attachment. A native Sandbox is a sequence of instances: revert swaps in a fresh one.
//
// Ownership: an Instance owns every kernel object it made; ~Instance() (or Teardown()) kills
// every process, waits for init, and removes the cgroup and the state directory.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/common/init_client.h"
#include "backend/common/limits.h"
#include "host/cgroup.h"
#include "host/fd.h"
#include "net/egress.h"
#include "sbx/model.h"

namespace sbx::backend {

struct InstanceConfig {
  std::string id;         // unique; names the cgroup "sb-<id>" and <state>/sb/<id>
  std::string lower_dir;  // overlay lower dirs, top first, ':'-separated (snapshot layer:image)
  Limits limits;          // already defaulted (no zeros)
  std::unique_ptr<net::Attachment> net;  // null: a fresh netns with only lo (SNAP-5)
  // Keep a shell pre-spawned (forked, joined to the cgroup, privileges dropped, exec'd) that
  // waits for its command: a command then starts without paying fork+exec (POOL-8, NFR-1).
  bool prespawn = false;
  // What runs a command (init_client.h); for a wasm module's image, its host (wasm_backend.cc).
  // A function of the limits: the wasm host takes the memory limit on its command line.
  std::function<Entrypoint(const Limits&)> entrypoint;  // null: the shell
  // The entrypoint is the wasm host (reference/src/backend/wasm/host/wasm_host_main.c), whose
  // deaths by signal say why (a module cannot raise a signal): SIGKILL of itself = its linear
  // memory reached the cap (resource_exceeded, memory); SIGALRM = its in-engine deadline
  // interrupted the instance (timeout); SIGXCPU = its in-engine CPU budget did (resource_exceeded,
  // cpu).
  bool wasm_host_signals = false;
};

// A native sandbox (namespaces, cgroups, seccomp, sbx-init; revert, suspend, spares) whose
// commands run through another entrypoint: the wasm backend's module host.
struct NativeFlavor {
  std::string backend = "native";                       // ExecResult::backend
  std::function<Entrypoint(const Limits&)> entrypoint;  // null: the shell
  // An argv command (ExecSpec::argv) becomes one command line of quoted words (the entrypoint
  // is not a program loader).
  bool quote_argv = false;
  bool wasm_host_signals = false;  // InstanceConfig::wasm_host_signals
  // A line put before every command (after the environment), from the command and the
  // sandbox's limits: the wasm host's per-command settings (`#sbx-wasm deadline_ms=...`).
  std::function<std::string(const ExecSpec&, const Limits&)> command_prefix;
};
StatusOr<std::unique_ptr<Sandbox>> CreateNativeSandbox(
    const BackendContext& ctx, const std::string& id, const SandboxSpec& spec,
    const std::string& image_dir, NativeFlavor flavor, StageTimings* timings, CreateMode mode);

class Instance {
 public:
  // Allocate (cgroup, dirs) and initialize (clone + sbx-init builds the root and reports ready).
  static StatusOr<std::unique_ptr<Instance>> Spawn(const BackendContext& ctx, InstanceConfig config,
                                                   StageTimings* timings);
  ~Instance();

  // Runs one command to completion (or timeout / limit breach). env holds secrets too: the
  // buffer that carries them is zeroed once sent (LC-4, LC-8).
  StatusOr<ExecResult> Exec(const ExecSpec& exec, const std::map<std::string, std::string>& env,
                            const std::map<std::string, std::string>& secrets);

  // Kills everything, waits for init, removes cgroup and directories. Idempotent.
  void Teardown(StageTimings* timings);
  // Sends SIGKILL to every process of the sandbox without waiting (µs): the caller can move on
  // and leave Teardown() to a background thread.
  void KillNow();
  // POOL-7: every process killed and reaped, the writable directories emptied, counters reset,
  // a new shell pre-spawned. The namespaces, cgroup and network stay.
  Status Reset();
  // Applies limits that may differ between users of a pooled instance (CPU, memory, PIDs).
  Status ApplyLimits(const Limits& limits);
  // Waits (bounded) until the pre-spawned shell has started (Sandbox::Settle).
  void WaitPrespawned() { client_.WaitPrespawned(5); }

  bool crashed() const { return crashed_; }
  pid_t init_pid() const { return init_pid_; }
  host::Cgroup* cgroup() { return cgroup_.get(); }
  const std::string& sbdir() const { return sbdir_; }

 private:
  Instance() = default;
  Status WaitReady(double timeout_s);
  void SignalAll(int sig);

  std::string id_, sbdir_;
  Limits limits_;
  std::function<Entrypoint(const Limits&)> entrypoint_;  // InstanceConfig::entrypoint
  bool wasm_host_signals_ = false;
  std::unique_ptr<host::Cgroup> cgroup_;
  std::unique_ptr<net::Attachment> net_;
  InitClient client_;  // sbx-init's control socket (backend/init_client.h)
  host::UniqueFd pidfd_;
  pid_t init_pid_ = -1;
  int64_t oom_kills_seen_ = 0;
  bool crashed_ = false;
  bool torn_down_ = false;
};

}  // namespace sbx::backend
