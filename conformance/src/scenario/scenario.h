// scenario/ — scenarios as data: the model and its loader (this file), check kinds and harness
// values (kinds.cc), the requirement catalogue (catalog.h), coverage notes, the latency-target
// file (nfr_spec.h) and the data compiled in (embedded.h). May include host/ and common/.
//
// Scenarios as data (scenarios/*.json, schema scenarios/schema/scenario.schema.json, prose in
// docs/scenarios.md): one sandbox template, tasks run in it in order — each followed by a revert
// and a file count of /work — and the checks that judge the evidence.
//
// Loading is strict: malformed JSON, unknown keys, wrong types, an undeclared {{variable}} or a
// value that does not match its variable's pattern are kInvalidArgument (exit 2) with the path of
// the offending key. Every optional field has the default documented in the schema.
//
// Thread-safety: values; immutable after loading.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "sbx/status.h"

namespace sandcheck {

struct Variable {
  std::string name, default_value, pattern, description;
};

// One check: a verdict on evidence, citing requirement IDs (requirements.json) and a level.
struct CheckSpec {
  std::string id;  // "<scenario>/<name>", stable: expectations files refer to it
  std::string title;
  std::vector<std::string> requirements;
  std::string level;                       // "MUST" | "SHOULD"
  std::vector<std::string> features;       // the target must offer them, else skip
  std::vector<std::string> requires_pass;  // checks that must have passed in this run
  std::string kind;                        // evaluator: allowed_download, name_not_resolved, ...
  nlohmann::json params;                   // validated for the kind, defaults filled in
  std::string task_id;                     // "" for scenario-level checks
};

struct SandboxTemplate {
  std::string template_name = "sandbox";
  nlohmann::json limits = nlohmann::json::object();  // adapter protocol v1 "limits"
  nlohmann::json egress = {{"rules", nlohmann::json::array()}};
  std::map<std::string, std::string> services;  // name → fixture ("mirror", "sink")
  // Optional fields of the protocol's create object ("" / empty = not sent). `backend` here
  // wins over --backend (a task that needs one backend names it).
  std::string backend, trust, tenant, tool;
  std::map<std::string, std::string> env, secrets;
};

struct TaskSpec {
  std::string id, label, tries, command;
  double timeout_s = 20;
  std::optional<CheckSpec> check;
  // A sandbox of the task's own: created (fresh) before the task, destroyed after it. Fields the
  // task does not give are the scenario's.
  std::optional<SandboxTemplate> sandbox;
  std::optional<bool> revert;  // overrides after_each_task.revert for this task
  // A neighbour (issue 32: limits per sandbox): a second sandbox of the task's own request,
  // created first and left holding load (`command`, whose stdout must hold `stdout_contains`)
  // while the task runs in its own sandbox; destroyed after it. What the neighbour holds may not
  // count against the task's sandbox. Only for a task with a sandbox of its own.
  struct Neighbour {
    std::string command, stdout_contains;
    double timeout_s = 20;
  };
  std::optional<Neighbour> neighbour;
  // SNAP-3: after the command, the harness suspends the sandbox, holds it suspended for hold_s
  // by its own clock, and resumes it (phases suspend, resume); the check's `then` runs after the
  // resume. The expect condition `suspended` judges it from a heartbeat the command left behind.
  struct Suspend {
    double hold_s = 3;
  };
  std::optional<Suspend> suspend;
  // POOL-1..7, LC-2, LC-9, LC-10 (scenario pool): a seeded random walk of `steps` sandboxes, one
  // after the other, each created with a (tenant, tool, trust) drawn from the lists, given an
  // environment variable and a secret of its own (SBX_POOL_STEP, SBX_POOL_SECRET), running the
  // task's command once ({{walk.token}}: the step's canary token; {{walk.earlier}}: the tokens of
  // the earlier steps it must not see) and destroyed. The draw is repeated (same seed stream)
  // until the walk holds every transition a pool can get wrong next to each other (the same
  // tenant and tool twice, trusted and untrusted; another tenant or another tool after a
  // trusted step). The checks of kind pool_walk judge it (checks/pool_checks.cc).
  struct Walk {
    int steps = 16;
    std::vector<std::string> tenants, tools, trust;
    std::string seed;  // "" = new per run (a harness value); the report names the seed used
  };
  std::optional<Walk> walk;
  // PROD-5: after the task's command, `rounds` times in turn: canaries planted, a revert and the
  // first request after it (which looks for them); canaries planted again, a destroy, a create
  // of the same request and its first request (which looks for them in the NEW sandbox). Both
  // ways to a clean sandbox, timed by the harness's clock and judged by kind fresh_vs_revert.
  struct Fresh {
    int rounds = 3;
  };
  std::optional<Fresh> fresh;
  // POOL-6: after the task's command, `count` bursts of `size` one-shot runs of the same command
  // through the target's warm pool (Target::RunPooled), the runs of a burst at once, the target
  // settled before each burst. The command prints sbx-probe --instance: a PID 1 that had run
  // longer than the whole call took tells a warm sandbox from one made for the call. Judged by
  // kind pool_grows.
  struct Bursts {
    int count = 5, size = 6;
    // The quiet time between the target settling and the burst: a sandbox the refill made then
    // has a PID 1 older than a quick call by at least this much.
    double pause_s = 0.3;
  };
  std::optional<Bursts> bursts;
  // PROD-1: after the task's command, in the task's own sandbox (made by the scenario's tenant):
  // the harness plants a canary as the sandbox's owner, then calls exec, revert and destroy on
  // it as `caller` (another tenant the target serves) and as a caller with no credential at
  // all, the owner looking at its sandbox after each call. Judged by kind foreign_refused from
  // the owner's side: every call refused, and nothing of it reached the sandbox.
  struct Foreign {
    std::string caller;
  };
  std::optional<Foreign> foreign;
  // Plant the revert canaries BEFORE the task rather than after it: for a task that ends its
  // sandbox (a limit breach), after which nothing can be planted — so the revert of a crashed
  // sandbox is held to the same standard (with after_each_task.canaries).
  bool canaries_before = false;
  // {{harness.NAME}} values the task refers to (command, check, own sandbox); see HarnessValue.
  std::set<std::string> harness_values;
  // Not run on the run's backend, and why: its backend overlay does not list the task (or says
  // "skip"). A skip, never a pass.
  std::string backend_skip;
};

// Values only the harness knows at run time, referred to as {{harness.NAME}} in a task's
// command, its check's params or its own sandbox: substituted when the task runs. A task that
// uses a `local_only` value runs only against a target on the harness's own host (else it is
// skipped with the reason); a value the run does not have (e.g. mirror_addr under --mirror
// none) skips the task too.
struct HarnessValueSpec {
  const char* name;
  bool local_only;
  const char* description;
};
const std::vector<HarnessValueSpec>& HarnessValueSpecs();
const HarnessValueSpec* FindHarnessValue(std::string_view name);
// Replaces {{harness.NAME}} in every string (and key) of `j` with `values[NAME]`; names that
// `values` lacks are left as they are.
void SubstituteHarness(nlohmann::json& j, const std::map<std::string, std::string>& values);
std::string SubstituteHarness(const std::string& s,
                              const std::map<std::string, std::string>& values);

struct AfterEachTask {
  bool revert = true;
  std::string clean_check = "find /work -mindepth 1 | wc -l";
  double timeout_s = 20;
  // SNAP-2, LC-10: before every revert, plant canaries of every kind of state a revert must
  // erase (`sbx-canary plant`: hidden files in /work, /tmp, $HOME, outside /work, a process, a
  // listening socket); after it, ask which survived (`sbx-canary check`). The scenario's
  // clean_after_revert check judges them.
  bool canaries = true;
};

struct Scenario {
  std::string name, title, description, source;
  std::string origin;  // file path, or "embedded:scenarios/NAME.json"
  std::vector<Variable> variables;
  std::map<std::string, std::string> values;  // resolved: defaults + --var overrides
  SandboxTemplate sandbox;
  AfterEachTask after_each;
  std::vector<TaskSpec> tasks;
  std::vector<CheckSpec> checks;  // scenario-level
  // Not run at all on the run's backend, and why (its backend overlay's "skip").
  std::string backend_skip;

  // Task checks in task order, then scenario-level checks.
  std::vector<const CheckSpec*> AllChecks() const;
  const TaskSpec* FindTask(const std::string& id) const;
};

// Describes a check kind's parameters, for loading and for `sandcheck list`.
struct ParamSpec {
  std::string name;
  nlohmann::json::value_t type;  // string, boolean, number_float (any number), number_integer
  bool required = false;
  nlohmann::json default_value;
};
struct KindSpec {
  std::string kind;
  bool task_level = true;  // judged on one task's evidence (else on the whole scenario)
  std::vector<ParamSpec> params;
};
const std::vector<KindSpec>& CheckKinds();
const KindSpec* FindKind(std::string_view kind);

// Parses a scenario. `overrides` are --var values; names the scenario declares are applied and
// inserted into `used`. Unknown names are left for the caller (they may belong to another
// scenario).
//
// `backend` is the run's --backend: a scenario may carry "backend_overlays" (docs/scenarios.md),
// one per backend whose sandboxes cannot run its commands as written (the wasm backend runs a
// module's command, not a shell). Every overlay is checked; the one of `backend` is applied:
// its sandbox and after_each_task keys replace the scenario's, its tasks get their command and
// check parameters from it, and a task it does not list is skipped with the overlay's "why".
sbx::StatusOr<Scenario> LoadScenario(std::string_view text, const std::string& origin,
                                     const std::map<std::string, std::string>& overrides,
                                     std::set<std::string>* used, const std::string& backend = "");

// Reads a "variables" object (null: none): each value is checked against its pattern and
// control characters; `overrides` (--var) replace defaults and are recorded in `used`.
sbx::Status ReadVariables(const nlohmann::json* vars,
                          const std::map<std::string, std::string>& overrides,
                          std::set<std::string>* used, std::vector<Variable>* variables,
                          std::map<std::string, std::string>* values);

// Replaces {{name}} in every string (and object key) of `j`; an unknown name is an error.
sbx::Status SubstituteVariables(nlohmann::json& j, const std::map<std::string, std::string>& values,
                                const std::string& path);

}  // namespace sandcheck
