// What a run collected: one Step per call to the target (a line of the live log), grouped per
// task; and the verdicts (CheckResult). The runner fills these; the checks judge them; the
// report writes them to report.json.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "drivers/target.h"
#include "scenario/scenario.h"

namespace sandcheck {

// One call to the target: a line of the log ("label phase state http seconds result").
struct Step {
  std::string phase;    // create | task | revert | clean-check | recover | calibrate | destroy
  std::string command;  // exec steps
  bool is_exec = false;
  ExecAnswer answer;        // exec steps
  OpAnswer op;              // revert/destroy
  double wall_seconds = 0;  // measured by the harness around the call
  double started_unix = 0;
  std::string error;  // the call failed (infrastructure); the scenario stops
  std::string refused;  // a call by another caller (PROD-1) that the target refused: its answer
  nlohmann::json ToJson() const;
  // Starts an exec step of `phase` running `cmd` (timed by Time()).
  static Step ExecOf(std::string phase, std::string cmd) {
    Step s;
    s.phase = std::move(phase);
    s.is_exec = true;
    s.command = std::move(cmd);
    return s;
  }
  // Makes `call` by the harness's clocks (started_unix, wall_seconds); returns what it returned.
  template <class F>
  auto Time(F&& call) {
    started_unix = NowUnix();
    auto t0 = SteadyClock::now();
    auto r = call();
    wall_seconds = SecondsSince(t0);
    return r;
  }
};

// One sandbox of a pool walk (TaskSpec::Walk): who asked for it, and its three calls.
struct WalkStep {
  std::string tenant, tool, trust, token;
  std::string sandbox;
  std::optional<Step> create, exec, destroy;
  std::string
      refused;  // the create was refused (untrusted code on a backend that will not take it)
  bool pooled = false;  // a one-shot run through the target's warm pool (exec only, phase walk-run)
};

struct TaskRecord {
  const TaskSpec* spec = nullptr;
  bool ran = false;
  std::string skip_reason;  // why the task did not run (missing feature, earlier error)
  std::optional<Step> task, revert, clean_check, recover;
  std::vector<Step> calibration;      // cpu_throttled: the same work without the limit
  std::vector<Step> calibration_ops;  // create/destroy of the calibration sandbox
  std::string calibration_sandbox;
  // cpu_throttled: a no-op command timed in the calibration sandbox and in the capped one (the
  // per-exec overhead taken off both walls).
  std::vector<Step> overhead_calibration, overhead_task;
  std::optional<int64_t> files_after;
  // A task with a sandbox of its own (TaskSpec::sandbox): its create request (secrets
  // redacted), id, the create/destroy calls, and the refusal when the check allows one.
  nlohmann::json own_request;
  std::string own_sandbox;
  std::optional<Step> own_create, own_destroy;
  // The task's neighbour (TaskSpec::neighbour): its create, its command, its destroy.
  std::optional<Step> neighbour_create, neighbour, neighbour_destroy;
  std::string neighbour_sandbox;
  // TaskSpec::suspend: the control before it (the follow-up's command, when the check judges
  // `suspended`), and the suspend and resume calls around the harness's hold.
  std::optional<Step> suspend_control, suspend, resume;
  // TaskSpec::walk: the steps in order, and the seed the draw used.
  std::vector<WalkStep> walk;
  std::string walk_seed;
  // The harness's own host as the walk's probe would show it (run/pool_walk.h), when the
  // target's sandboxes run here: a step showing exactly this cannot be told from another.
  std::string walk_host_identity;
  // Why the walk has no pooled one-shot lane (the target does not offer RunPooled).
  std::string walk_pooled_note;
  // TaskSpec::fresh: per round, the revert way (plant, revert, check) and the delete-and-create
  // way (plant, destroy, create, check in the new sandbox).
  struct FreshRound {
    std::string revert_token, fresh_token;
    std::optional<Step> plant_revert, revert, check_revert;
    std::optional<Step> plant_fresh, destroy, create, check_fresh;
  };
  std::vector<FreshRound> fresh;
  // TaskSpec::bursts: per burst, its one-shot runs (phase burst-run, each timed from the call
  // by the harness's clock); `bursts_note` says why there are none or fewer than asked (the
  // target offers no pooled runs, or no handle per caller).
  std::vector<std::vector<Step>> bursts;
  std::string bursts_note;
  // TaskSpec::foreign: the owner's canary, then per call by another caller (phase
  // foreign-OP) what it was answered and the owner's look after it (phase owner-look).
  struct ForeignCall {
    std::string caller;    // "" = no credential
    std::string op;        // exec | revert | destroy
    std::string not_made;  // why the call was not made (the target cannot take this caller)
    std::optional<ForeignAnswer> answer;
    std::optional<Step> call, look;
  };
  std::string foreign_token;
  std::optional<Step> foreign_plant;
  std::vector<ForeignCall> foreign;
  std::string create_refused;  // why the target refused to create it (may_refuse)
  // kind `expect`: the follow-up command, and the harness's scans of its own host's processes.
  std::optional<Step> then;
  // A follow-up after the revert that ended the scenario's shared sandbox: reverted again
  // (phase then-revert), so the next task does not start in a sandbox another check broke.
  std::optional<Step> then_revert;
  nlohmann::json host_scans = nlohmann::json::array();
  std::string host_note;     // why a scan was not done (a target elsewhere)
  // `beacon` (LC-7): the beats that reached the mirror: {"path", "before", "after", "wait_s"}
  // or {"note": why none could be counted}; `beacon_mark` is the mirror log's count at the task.
  nlohmann::json beacon;
  size_t beacon_mark = 0;
  nlohmann::json gateway;    // decisions seen for this task (array), or null if not offered
  // The lines the harness's own mirror fixture logged while the task ran ("GET /path host=NAME"):
  // what really reached the service behind the scenario's names. None without such a mirror.
  std::optional<std::vector<std::string>> mirror_log;
  // What reached the harness's egress sink while the task ran (run/sink_fixture.h), one line per
  // connection or datagram. None when the run has no sink (no task of it uses one).
  std::optional<std::vector<std::string>> sink_log;
  std::string gateway_note;  // why there is no gateway evidence
  // SNAP-2, LC-10 (after_each_task.canaries): `sbx-canary plant TOKEN` before the revert and
  // `sbx-canary check TOKEN PORT` after it; canary_note says why none were planted.
  std::optional<Step> plant, canary_check;
  std::string canary_token, canary_note;
  // kind resource_exceeded: after the recovery, the allocation below the limit, the one above
  // it, and the revert after that (phases bracket-under, bracket-over, bracket-revert).
  std::vector<Step> bracket;
  // Filled by the check: the figure's WHAT IT GETS column, and whether the command was refused
  // or failed (the figure marks those rows).
  std::string got;
  bool refused = false;
};

// kFlaky: `sandcheck run --repeat N` saw the check's outcome change between runs.
enum class Outcome { kPass, kFail, kSkip, kXfail, kXpass, kError, kFlaky };
const char* OutcomeName(Outcome o);
std::optional<Outcome> ParseOutcome(const std::string& s);

struct CheckResult {
  const CheckSpec* spec = nullptr;
  Outcome raw = Outcome::kSkip;      // the verdict on the evidence alone
  Outcome outcome = Outcome::kSkip;  // after expectations and profile
  std::string reason;
  nlohmann::json evidence = nlohmann::json::object();
  std::string expected_outcome, expected_reason;  // from the expectations file ("" = none)
  bool blocking = false;                          // counts against the run (exit 1)
  double seconds = 0;                             // wall time of the calls it judged
  // --repeat N (N > 1): how often each raw outcome occurred, and each run's outcome and reason.
  std::map<std::string, int> repeat_counts;
  nlohmann::json repeat_runs = nlohmann::json::array();
};

struct ScenarioRun {
  const Scenario* scenario = nullptr;
  nlohmann::json create_request;
  std::string sandbox_id;
  std::optional<Step> create, destroy;
  std::vector<TaskRecord> tasks;
  std::vector<CheckResult> checks;
  std::string skip_reason;                     // the whole scenario could not run on this target
  std::string abort_error;                     // an infrastructure failure stopped the scenario
  std::string fatal_error;                     // the target or environment failed before it started
  std::map<std::string, std::string> harness;  // {{harness.NAME}} values of this run
  double started_unix = 0, seconds = 0;
};

}  // namespace sandcheck
