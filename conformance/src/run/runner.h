// run/ — running things against a target: scenarios (this file), repeats (repeat.h), the NFR
// and load runners, the live log, the mirror fixture. May include report/ and every folder
// below.
//
// The runner replays a scenario against a target: create the sandbox, then for each task run the
// command, fetch the gateway's decisions (when offered), revert, count the files in /work, and
// (for the memory task) prove the sandbox usable again; then destroy it and judge the checks.
// Every call is logged as it happens (live_log.h) and recorded (records.h).
//
// An infrastructure failure of the target (a non-OK call) stops the scenario: the sandbox is
// still destroyed (best effort), the checks not yet judged become `error`, and the run exits 3.
//
// Thread-safety: one thread.
#pragma once

#include <map>
#include <string>

#include "checks/records.h"
#include "drivers/target.h"
#include "run/live_log.h"
#include "run/mirror_fixture.h"
#include "run/sink_fixture.h"
#include "scenario/scenario.h"

namespace sandcheck {

struct RunnerOptions {
  std::string backend;                          // --backend ("" = the target's choice)
  std::map<std::string, std::string> fixtures;  // fixture → "addr:port" ("mirror" → ...)
  // {{harness.NAME}} values this run has (harness_values.h), and whether the target's sandboxes
  // live on this host (else tasks using local-only values are skipped).
  std::map<std::string, std::string> harness;
  bool target_local = true;
  // The harness's own mirror fixture (--mirror local), whose request log is evidence of what
  // reached the service behind the scenario's names; null with --mirror none or HOST:PORT.
  const MirrorFixture* mirror = nullptr;
  // The harness's egress sink (run/sink_fixture.h), started when a task uses {{harness.sink_*}};
  // what reaches it while a task runs is that task's sink_log.
  const SinkFixture* sink = nullptr;
};

// The protocol's create object for the scenario's sandbox: template, limits, egress, backend
// (when asked) and hosts (the fixtures that serve the scenario's service names).
nlohmann::json BuildCreateRequest(const Scenario& scenario, const RunnerOptions& options);
// The same for any sandbox template (a task's own); trust, tenant, tool, env and secrets are
// sent when set. The template's backend wins over --backend.
nlohmann::json BuildCreateRequest(const SandboxTemplate& sandbox, const RunnerOptions& options);
// A copy of a create request fit for a report: secret values replaced by "<redacted>".
nlohmann::json RedactSecrets(nlohmann::json request);

class Runner {
 public:
  Runner(Target& target, const TargetInfo& info, RunnerOptions options, LiveLog& log)
      : target_(target), info_(info), options_(std::move(options)), log_(log) {}

  ScenarioRun Run(const Scenario& scenario);

  nlohmann::json CreateRequest(const Scenario& scenario) const {
    return BuildCreateRequest(scenario, options_);
  }

 private:
  // Runs one call, timing it and logging it under `label`. Returns false on infrastructure failure
  // (recorded in run.abort_error).
  bool ExecStep(ScenarioRun& run, const std::string& label, const std::string& phase,
                const std::string& sandbox, const std::string& cmd, double timeout_s, Step* out);
  enum class Op { kRevert, kDestroy, kSuspend, kResume };
  bool OpStep(ScenarioRun& run, const std::string& label, const std::string& phase,
              const std::string& sandbox, Op op, Step* out);
  // `abort_on_failure` false: a failed create is recorded in `out` only (a refusal the check
  // allows), not as the scenario's abort_error.
  bool CreateStep(ScenarioRun& run, const std::string& label, const std::string& phase,
                  const nlohmann::json& request, Step* out, std::string* id,
                  bool abort_on_failure = true);
  bool RunTask(ScenarioRun& run, TaskRecord& rec, size_t index);
  // TaskSpec::walk (pool_walk.cc): its sandboxes one after the other, each made, probed once
  // and destroyed.
  bool RunWalk(ScenarioRun& run, TaskRecord& rec);
  // TaskSpec::fresh (fresh_rounds.cc): the rounds after the task's command, in `sandbox` (which
  // each round's destroy and create replace).
  bool RunFresh(ScenarioRun& run, TaskRecord& rec, std::string& sandbox,
                const nlohmann::json& request);
  // TaskSpec::bursts (pool_bursts.cc): bursts of one-shot runs of the task's command with
  // `request`, each burst's runs at once from handles of their own (Target::ForThread).
  bool RunBursts(ScenarioRun& run, TaskRecord& rec, const nlohmann::json& request);
  // TaskSpec::foreign (foreign_calls.cc): calls on `sandbox` by other callers, each followed by
  // the owner's look; clears `sandbox` when a call took it from its owner (after a last destroy).
  bool RunForeign(ScenarioRun& run, TaskRecord& rec, std::string& sandbox);
  // The task's calls in `sandbox` (the scenario's or the task's own), phase by phase
  // (task_phases.cc): each phase false on an infrastructure failure (run.abort_error).
  bool RunTaskIn(ScenarioRun& run, TaskRecord& rec, size_t index, const std::string& sandbox,
                 const nlohmann::json& request);
  struct TaskPlan {  // what the task's spec and the target's features ask of its phases
    size_t index = 0;
    bool reverts = false, plant_before = false, cpu = false, threads = false;
    int64_t reference_runs = 0;
    const nlohmann::json* then = nullptr;  // the expect check's follow-up, if any
  };
  TaskPlan PlanTask(const ScenarioRun& run, const TaskRecord& rec, size_t index) const;
  void TaskProgress(const ScenarioRun& run, const TaskRecord& rec, const TaskPlan& plan,
                    const std::string& what);
  bool BeforeTask(ScenarioRun& run, TaskRecord& rec, const TaskPlan& plan,
                  const std::string& sandbox, const nlohmann::json& request);
  bool TaskCommand(ScenarioRun& run, TaskRecord& rec, const TaskPlan& plan,
                   const std::string& sandbox, const nlohmann::json& request);
  bool ThreadReference(ScenarioRun& run, TaskRecord& rec, const TaskPlan& plan,
                       const std::string& sandbox, int64_t from, int64_t to);
  bool CollectGatewayLog(ScenarioRun& run, TaskRecord& rec, const std::string& sandbox);
  bool SuspendAndResume(ScenarioRun& run, TaskRecord& rec, const TaskPlan& plan,
                        const std::string& sandbox);
  bool RevertPhase(ScenarioRun& run, TaskRecord& rec, const TaskPlan& plan,
                   const std::string& sandbox);
  bool RecoveryPhase(ScenarioRun& run, TaskRecord& rec, const TaskPlan& plan,
                     const std::string& sandbox);
  bool ThenAfterRevert(ScenarioRun& run, TaskRecord& rec, const TaskPlan& plan,
                       const std::string& sandbox);
  // cpu_throttled (SCN-5): the calibration sandbox's create and first runs (before = true), or
  // its last runs and destroy; EndCalibration destroys it (once) on any path.
  bool Calibrate(ScenarioRun& run, TaskRecord& rec, const nlohmann::json& request, bool before);
  bool EndCalibration(ScenarioRun& run, TaskRecord& rec);
  // The check's no-op command (overhead_command), overhead_runs times in `sandbox`.
  // Runs `command` in `sandbox` for runs from..to-1 (progress says "what i/total"), each step
  // appended to *out; false once one fails.
  bool RepeatExec(ScenarioRun& run, const TaskSpec& t, const std::string& sandbox,
                  const std::string& command, const std::string& phase, const std::string& what,
                  int64_t from, int64_t to, int64_t total, std::vector<Step>* out);
  bool ExecOverhead(ScenarioRun& run, TaskRecord& rec, const std::string& sandbox,
                    std::vector<Step>* out);
  // Why the task cannot run here ("" = it can): a backend the target lacks, or a
  // {{harness.NAME}} value this run does not have or cannot use against this target.
  std::string CannotRun(const TaskSpec& task) const;
  // kind `expect`: the follow-up command (then) and the host process scan (host_absent).
  // The check's `then` command, as phase `phase` into `out` (default: "then", rec.then).
  bool ThenStep(ScenarioRun& run, TaskRecord& rec, const std::string& sandbox,
                const char* phase = "then", std::optional<Step>* out = nullptr);
  // SNAP-2: canaries before the revert (unless the task ended the sandbox) and the check after.
  bool PlantCanaries(ScenarioRun& run, TaskRecord& rec, const std::string& sandbox);
  bool CheckCanaries(ScenarioRun& run, TaskRecord& rec, const std::string& sandbox);
  // kind resource_exceeded: an allocation below the limit, one above it, a revert (the kill
  // came at the requested limit, not at another one).
  bool Bracket(ScenarioRun& run, TaskRecord& rec, const std::string& sandbox);
  void HostScan(TaskRecord& rec, const std::string& after);
  // LC-7: the beacon's beats in the mirror's log while the sandbox lives ("before-destroy",
  // bounded wait for two) and in `wait_s` after the destroy answered ("destroy").
  void CountBeacon(TaskRecord& rec, const std::string& phase);

  Target& target_;
  const TargetInfo& info_;
  RunnerOptions options_;
  LiveLog& log_;
  size_t gateway_seen_ = 0;
  nlohmann::json
      scenario_request_;  // the scenario sandbox's create request (not redacted)  // decisions of
                          // the scenario's sandbox already attributed to a task
};

}  // namespace sandcheck
