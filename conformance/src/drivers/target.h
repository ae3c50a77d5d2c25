// drivers/ — how the harness talks to a target: the Target interface (this file) and its
// drivers (adapter_driver.cc, http_driver.cc over sbx/http_client.h, reference_driver.cc).
// May include scenario/, host/ and common/.
//
// A Target is the runtime under test, reached through one of three drivers:
//   adapter:PATH    AdapterDriver   — adapter protocol v1 (docs/adapters.md): `PATH OP`, JSON
//   in/out http://H:P      HttpDriver      — a sandboxd-compatible Execution API (also unix:PATH)
//   reference       ReferenceDriver — the reference runtime in process, through sbx/runtime.h
// All three speak the objects of adapter protocol v1; the runner never knows which one it has.
//
// Errors: a non-OK Status from any call is an infrastructure failure of the target (the adapter
// crashed, hung, answered garbage, the endpoint refused the token): exit code 3, never a verdict
// on the sandbox. A command that fails inside the sandbox is an OK call with a failed ExecAnswer.
//
// Thread-safety: a Target is used by one thread; ForThread() gives another thread its own.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "sbx/status.h"

namespace sandcheck {

struct TargetInfo {
  std::string name, version;
  std::vector<std::string> backends, features;
  // Optional "backend_features": what each backend offers, where they differ (the reference
  // runtime: gvisor has no limits.disk). "features" is what the target offers on some backend.
  std::map<std::string, std::vector<std::string>> backend_features;
  nlohmann::json raw = nlohmann::json::object();
  bool Has(const std::string& feature) const;
  // Whether `feature` is offered on `backend` ("": whichever the target picks): a feature some
  // backend's own list names counts only if this backend's list names it too; a feature no
  // backend's list names (e.g. one the driver derives) is the target's.
  bool HasOn(const std::string& feature, const std::string& backend) const;
};

// What `exec` answered (adapter protocol v1 exec output).
struct ExecAnswer {
  std::string status = "ok";  // ok | timeout | resource_exceeded | tool_error | sandbox_unavailable
  std::string state = "RUNNING";  // RUNNING | CRASHED
  int exit_code = -1;
  std::string stdout_text, stderr_text;
  double seconds = -1;  // as reported by the target (-1: not reported)
  int http_status = 0;  // HTTP status of the call (0: not over HTTP)
  nlohmann::json extra =
      nlohmann::json::object();  // other keys the target gave (stages, usage, ...)
};

// What revert/destroy answered.
struct OpAnswer {
  double seconds = -1;  // reported by the target (-1: not reported)
  int http_status = 0;
};

// PROD-1: what a call on a sandbox by a caller other than the one that made it was answered.
// Only the target's word: pool/other-tenant-refused judges the sandbox's owner's view after it.
struct ForeignAnswer {
  bool refused = false;  // HTTP 401/403/404; an adapter's error not_found/permission_denied/
                         // unauthenticated
  int http_status = 0;   // over HTTP
  std::string said;      // the refusal's code and message, or the answer (at most 300 bytes)
  std::optional<ExecAnswer> exec;  // an exec that was carried out
};

class Target {
 public:
  virtual ~Target() = default;

  virtual std::string Kind() const = 0;  // "adapter" | "http" | "reference"
  virtual std::string Spec() const = 0;  // what --target said

  virtual sbx::StatusOr<TargetInfo> Info() = 0;
  // `request` is the protocol's create object: template, backend?, limits, egress, hosts?.
  virtual sbx::StatusOr<std::string> Create(const nlohmann::json& request) = 0;
  virtual sbx::StatusOr<ExecAnswer> Exec(const std::string& sandbox, const std::string& cmd,
                                         double timeout_s) = 0;
  virtual sbx::StatusOr<OpAnswer> Revert(const std::string& sandbox) = 0;
  virtual sbx::StatusOr<OpAnswer> Destroy(const std::string& sandbox) = 0;
  // Gateway decisions logged for the sandbox (objects with at least destination and verdict).
  // kUnsupported when the target does not offer them (feature "egress.log").
  virtual sbx::StatusOr<nlohmann::json> GatewayLog(const std::string& sandbox) = 0;

  // Optional operations (the measurements of docs/nfr.md and `sandcheck reproduce`). The
  // defaults answer kUnsupported with the reason, which the callers turn into a skip.

  // SNAP-3: suspend / resume (adapter protocol v1 ops "suspend" and "resume").
  virtual sbx::StatusOr<OpAnswer> Suspend(const std::string& sandbox);
  virtual sbx::StatusOr<OpAnswer> Resume(const std::string& sandbox);
  // POOL-2: a one-shot run of `cmd` through the target's warm pool (take a pre-initialised
  // sandbox, run, return it off the caller's path). `request` is the protocol's create object.
  virtual sbx::StatusOr<ExecAnswer> RunPooled(const nlohmann::json& request, const std::string& cmd,
                                              double timeout_s);
  // PROD-1: `op` ("exec" with `cmd`, "revert" or "destroy") on `sandbox`, made by another
  // caller, called as `caller`: a tenant of the target (an adapter gets it as the input's
  // "caller"; over HTTP it must be the tenant of --second-token, whose credential is sent) or
  // "" for a caller with no credential at all (HTTP only). A refusal is an OK answer with
  // `refused`; a failure of the target is a non-OK status. Default: kUnsupported (the target
  // has no callers to tell apart).
  virtual sbx::StatusOr<ForeignAnswer> CallAs(const std::string& caller, const std::string& op,
                                              const std::string& sandbox, const std::string& cmd,
                                              double timeout_s);
  // Another handle on the SAME target for another thread (the load scenario runs one per
  // client): the reference driver shares its runtime, http opens its own connections, an
  // adapter runs its own processes. Default: kUnsupported.
  virtual sbx::StatusOr<std::unique_ptr<Target>> ForThread();
  // Waits until the target's background work (reclaim after destroy, pool refill) is done, so
  // that it is on the clock of the call before it and not on the next one. Default: nothing
  // to wait for (an adapter's ops are synchronous).
  virtual sbx::Status Settle() { return sbx::Status::Ok(); }
  // How Settle() waited, for a report's evidence: "" where the kind of target says it all
  // (reference: Runtime::Drain(); adapter: nothing to wait for); an HTTP target says whether
  // its endpoint reported its background work or was given a fixed pause.
  virtual std::string SettleNote() const { return ""; }
  // NFR-5: kill -9 a runtime that holds live sandboxes and time how long until a sweeping
  // runtime has removed every leftover (docs/nfr.md). One value per sample, in seconds.
  struct OrphanSweep {
    std::vector<double> seconds;
    std::string clock = "harness";  // "target" when the target measured it itself
    nlohmann::json evidence = nlohmann::json::object();
  };
  // `backend`: where the killed runtime's sandboxes live ("" = the target's choice).
  virtual sbx::StatusOr<OrphanSweep> MeasureOrphanSweep(int samples, int sandboxes,
                                                        const std::string& backend);
};

struct TargetOptions {
  std::string spec = "reference";  // --target
  std::string token;               // --token / $SANDCHECK_TOKEN (http)
  // --second-token / $SANDCHECK_SECOND_TOKEN (http): another tenant's credential. The driver asks
  // GET /v1/info whose it is (info.raw["second_tenant"]), makes a sandbox whose create names that
  // tenant with it, and uses it for every later call on that sandbox (the pool walk's tenant_b).
  std::string second_token;
  double call_timeout_s = 30;      // --adapter-timeout: bound of one call beyond the command's own
  std::string tools_dir;           // static tools for the image (adapters get $SANDCHECK_TOOLS_DIR)
  bool reference_warm_pool = false;  // reference: open the runtime with its warm pool (RunPooled)
};

// Parses --target and builds the driver. kInvalidArgument for a malformed spec (exit 2).
sbx::StatusOr<std::unique_ptr<Target>> MakeTarget(const TargetOptions& options);

// Shared by the drivers: validates an exec answer object (protocol v1) into an ExecAnswer.
sbx::StatusOr<ExecAnswer> ParseExecAnswer(const nlohmann::json& j);
sbx::StatusOr<TargetInfo> ParseInfo(const nlohmann::json& j);
sbx::StatusOr<OpAnswer> ParseOpAnswer(const nlohmann::json& j);

// The drivers' factories (each in its own file).
sbx::StatusOr<std::unique_ptr<Target>> MakeAdapterTarget(const std::string& path,
                                                         const TargetOptions& options);
sbx::StatusOr<std::unique_ptr<Target>> MakeHttpTarget(const std::string& spec,
                                                      const TargetOptions& options);
sbx::StatusOr<std::unique_ptr<Target>> MakeReferenceTarget(const TargetOptions& options);

// `sandcheck __hold-sandboxes STATE_DIR COUNT` (internal, NFR-5): opens the reference runtime
// under STATE_DIR, creates COUNT sandboxes each with a background process, prints
// "ready PID" and waits to be killed. Exit 3 when the runtime is not built in or fails.
int RunSandboxHolder(const std::vector<std::string>& args);

}  // namespace sandcheck
