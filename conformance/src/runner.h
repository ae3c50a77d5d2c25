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

#include "live_log.h"
#include "records.h"
#include "scenario.h"
#include "target.h"

namespace sandcheck {

struct RunnerOptions {
  std::string backend;                          // --backend ("" = the target's choice)
  std::map<std::string, std::string> fixtures;  // fixture → "addr:port" ("mirror" → ...)
};

// The protocol's create object for the scenario's sandbox: template, limits, egress, backend
// (when asked) and hosts (the fixtures that serve the scenario's service names).
nlohmann::json BuildCreateRequest(const Scenario& scenario, const RunnerOptions& options);

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
  bool OpStep(ScenarioRun& run, const std::string& label, const std::string& phase,
              const std::string& sandbox, bool revert, Step* out);
  bool CreateStep(ScenarioRun& run, const std::string& label, const std::string& phase,
                  const nlohmann::json& request, Step* out, std::string* id);
  bool RunTask(ScenarioRun& run, TaskRecord& rec, size_t index);
  bool Calibrate(ScenarioRun& run, TaskRecord& rec);

  Target& target_;
  const TargetInfo& info_;
  RunnerOptions options_;
  LiveLog& log_;
  size_t gateway_seen_ = 0;  // decisions of the scenario's sandbox already attributed to a task
};

}  // namespace sandcheck
