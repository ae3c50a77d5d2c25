// Backends: one small interface, sibling implementations found through a registry (style.md
// habit 2). A Backend makes Sandboxes; a Sandbox runs commands until it is destroyed.
//
// Thread-safety: a Backend is thread-safe. A Sandbox is used by one caller at a time (the
// runtime serialises operations per sandbox).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sbx/model.h"
#include "sbx/remote_worker.h"
#include "sbx/status.h"

namespace sbx::host {
class CgroupManager;
class ImageStore;
class SeccompFilter;
}  // namespace sbx::host
namespace sbx::net {
class EgressService;
}

namespace sbx::backend {

// Seconds from `t0` to now on the steady clock: what the backends' stage timings are made of.
inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Shared services a backend may use. Pointers are owned by the runtime and outlive backends.
struct BackendContext {
  std::string runtime_id;
  std::string state_dir;             // per-sandbox directories live below <state_dir>/sb/
  std::string init_path;             // the sbx-init binary
  std::string cache_dir;             // caches shared by runtimes (unpacked images, VM templates)
  host::CgroupManager* cgroups = nullptr;
  host::ImageStore* images = nullptr;
  const host::SeccompFilter* seccomp = nullptr;
  // Started on first use of a policy; may fail (then egress requests get sandbox_unavailable).
  std::function<StatusOr<net::EgressService*>()> egress;
  // Runs work off the caller's path (teardown of a reverted instance, pre-spawning spares).
  // Work scheduled here must not outlive the runtime: the runtime drains it before it goes.
  std::function<void(std::function<void()>)> background;
  std::string snapshot_dir;          // durable snapshots (SNAP-2): <snapshot_dir>/<sandbox id>/
  std::vector<RemoteWorker> remote_workers;  // BK-7 (RuntimeOptions::remote_workers)
  double remote_call_timeout_s = 10;
};

// What a sandbox will be used for, so a backend can prepare what makes that fast.
enum class CreateMode {
  kOneShot,     // one command, then destroyed (LC-9)
  kPersistent,  // create/exec/revert (the demo's actor): keep a spare for fast revert
  kPooled,      // waits in a warm pool (POOL-2): keep the next command's process ready
};

class Sandbox {
 public:
  virtual ~Sandbox() = default;
  virtual const std::string& id() const = 0;
  virtual SandboxState state() const = 0;
  // LC-3..LC-6 for one command. `timings` receives inject_context, execute and collect.
  virtual StatusOr<ExecResult> Exec(const ExecSpec& exec) = 0;
  // SNAP-2: back to the latest durable snapshot (the golden one unless a suspend made one).
  virtual StatusOr<double> Revert() = 0;
  virtual StatusOr<double> Suspend() = 0;
  virtual StatusOr<double> Resume() = 0;
  virtual Status PutFile(const std::string& path, const std::string& content, int mode) = 0;
  // LC-7, LC-8: terminate everything, reclaim every kernel object, zero secrets. Idempotent.
  virtual void Destroy(StageTimings* timings) = 0;
  // SIGKILL to every process now, without waiting; Destroy() may then run in the background.
  virtual void Kill() {}
  // POOL-7: back to a clean state for the next user of a pooled sandbox (same tenant + tool).
  virtual Status Reset() { return Unsupported("reset"); }
  // Waits (bounded) for the sandbox's own readiness work of an idle moment: the pre-spawned
  // shell of the next command has started (POOL-8). Runtime::Drain() and the pool's refill
  // call it, off every caller's clock.
  virtual void Settle() {}
  // The ids under which this sandbox's networks were attached to the egress gateway, oldest
  // first (a revert attaches a fresh network under a new id): for the gateway's decision log.
  virtual std::vector<std::string> NetworkIds() const { return {id()}; }
  // The gateway's decisions when they are not this runtime's gateway's (a sandbox placed on a
  // remote worker: the worker's gateway decided); nullopt: read the local gateway by
  // NetworkIds().
  virtual std::optional<nlohmann::json> ForeignGatewayLog() const { return std::nullopt; }
  // Limits of the next user of a pooled sandbox.
  virtual Status ApplyLimits(const Limits&) { return Unsupported("changing limits"); }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Whether this worker can run the backend, found by probing (never assumed). OK or the reason.
  virtual Status Probe() = 0;
  // What implements it on this worker, after a successful Probe() (e.g. "crun version 1.8.1",
  // "runsc, platform ptrace"); "" when there is nothing to say. Shown in the runtime's info.
  virtual std::string Implementation() const { return ""; }
  // Adapter-protocol feature names this backend supports (limits.cpu, egress, revert, ...).
  virtual std::vector<std::string> Features() const = 0;
  // LC-2, LC-3: allocate and initialize. `timings` receives allocate and initialize.
  virtual StatusOr<std::unique_ptr<Sandbox>> Create(const std::string& id, const SandboxSpec& spec,
                                                    StageTimings* timings, CreateMode mode) = 0;
};

// The registry: every backend this build knows, in strength order (weakest first).
std::vector<std::unique_ptr<Backend>> MakeBackends(const BackendContext& ctx);

}  // namespace sbx::backend
