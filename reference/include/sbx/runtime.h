// The reference runtime's public API: what sandboxctl, sandboxd, bench/ and the harness's
// in-process "reference" driver use. Nothing else of reference/ is public.
//
// Thread-safety: Runtime is thread-safe; operations on different sandboxes run concurrently,
// operations on one sandbox are serialised.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "sbx/model.h"
#include "sbx/remote_worker.h"
#include "sbx/status.h"

namespace sbx {

struct RuntimeOptions {
  std::string state_dir = "/run/sandcheck";  // what this runtime owns (for the reaper)
  std::string image_store;                    // "" = <dir of the binary>/../images
  std::string cache_dir;                      // "" = <state_dir>/images
  std::string init_path;                      // "" = sbx-init beside the binary or in ../bin
  std::string snapshot_dir = "/var/lib/sandcheck/snapshots";  // durable snapshots (SNAP-2)
  bool start_reaper = false;                  // sweep orphans now and every interval (NFR-5)
  double reaper_interval_s = 1.0;
  int net_pool_floor = 2;                     // ready network namespaces kept warm
  bool warm_pool = false;                     // Run() takes pre-initialised sandboxes (POOL-*)
  int pool_floor = 1, pool_ceiling = 8;       // fresh sandboxes per pool (POOL-6)
  // LC-10 reuse: reset sandboxes kept per (tenant, tool), and over all keys of a pool.
  int pool_reuse_per_tool = 2, pool_reuse_total = 32;
  // Background work (reclaim, pool refill, spares): threads, and how many tasks may wait or
  // run before the next reclaim runs on its caller's path instead (what waits for reclaim
  // never grows past this, whatever the load).
  int background_threads = 2;
  int reclaim_backlog = 16;
  // LC-10: a trusted pooled sandbox is reset and reused by the same tenant + tool; false keeps
  // every sandbox ephemeral (LC-9: one execution, then destroyed).
  bool pool_reuse = true;
  // SEL-2: minimum isolation per tenant, by backend name ("gvisor", ...).
  std::map<std::string, std::string> tenant_floors;
  // BK-7: the remote backend's workers (none: the backend is listed unsupported), and the bound
  // of each forwarded call other than an exec (an exec: its timeout plus this).
  std::vector<RemoteWorker> remote_workers;
  double remote_call_timeout_s = 10;
};

struct SandboxInfo {
  std::string id, backend, tenant, tool, template_name;
  SandboxState state = SandboxState::kRunning;
  double created_unix = 0;
};

class Runtime {
 public:
  virtual ~Runtime() = default;

  // kPermissionDenied when not root (with a message saying what is missing).
  static StatusOr<std::unique_ptr<Runtime>> Open(const RuntimeOptions& options);

  // What this worker can do: {"name","version","backends":[...],"features":[...]}.
  virtual nlohmann::json Info() const = 0;

  // One-shot (LC-9): allocate → initialize → inject context → execute → collect → destroy →
  // cleanup. Never fails as a call: errors become a result with status sandbox_unavailable or
  // tool_error and a reason.
  virtual ExecResult Run(const ExecRequest& request) = 0;

  // Persistent sandboxes (the demo's actor).
  virtual StatusOr<std::string> Create(const SandboxSpec& spec) = 0;
  virtual StatusOr<ExecResult> Exec(const std::string& id, const ExecSpec& exec) = 0;
  virtual StatusOr<double> Revert(const std::string& id) = 0;   // seconds
  virtual StatusOr<double> Suspend(const std::string& id) = 0;
  virtual StatusOr<double> Resume(const std::string& id) = 0;
  virtual StatusOr<double> Destroy(const std::string& id) = 0;
  virtual Status PutFile(const std::string& id, const std::string& path,
                         const std::string& content, int mode) = 0;
  virtual std::vector<SandboxInfo> List() const = 0;

  // Gateway decisions logged for a sandbox, as JSON objects (see net/egress.h).
  virtual nlohmann::json GatewayLog(const std::string& id) const = 0;

  // Waits until background work (reclaim after Destroy/Revert, spare instances) is done.
  virtual void Drain() {}
};

}  // namespace sbx
