// Measures the latency targets of an NfrSpec (docs/nfr.md) against a Target, through the same
// driver calls as every scenario: per target and backend, N samples on the harness's clock, with
// the target's own reported figures (exec seconds, LC-1 stages, destroy seconds) recorded beside
// them; plus the machine's physical floor (fork+exec of /bin/true) in the same run.
//
// Outcomes per (target, backend): pass / fail (the gated percentile is not below the limit, or
// the sandbox could not run the command), skip with the reason (a backend the target does not
// offer, a method it has no way to serve), error (a driver call failed: exit 3).
//
// Thread-safety: one thread.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "checks/expectations.h"
#include "drivers/target.h"
#include "run/live_log.h"
#include "scenario/nfr_spec.h"

namespace sandcheck {

struct NfrRunOptions {
  std::string backend;  // --backend: only this backend ("" = every backend the target offers)
  int samples = 0;      // --samples: overrides every target's count (clamped to its max)
  Profile profile = Profile::kDefault;
  double call_timeout_s = 30;  // one exec's own timeout
  std::set<std::string> only;  // --only: measure these target ids only (empty: all)
};

struct NfrRunResult {
  nlohmann::json checks = nlohmann::json::array();        // report.json "checks" entries
  nlohmann::json measurements = nlohmann::json::array();  // report.json "measurements" entries
  std::vector<std::string> errors;                        // infrastructure failures (exit 3)
};

// `target_name`: the measurements' "target" key (the target's info name).
NfrRunResult RunNfr(Target& target, const TargetInfo& info, const NfrSpec& spec,
                    const NfrRunOptions& options, const std::string& target_name, LiveLog& log);

// The physical floor: `samples` starts of argv (no PATH search) until waitpid() returns, in
// seconds: fork()+execv() (the definition of the floor), or posix_spawn() (vfork+exec).
enum class FloorKind { kForkExec, kPosixSpawn };
sbx::StatusOr<std::vector<double>> MeasureSpawnFloor(const std::vector<std::string>& argv,
                                                     int samples,
                                                     FloorKind kind = FloorKind::kForkExec);

// The target's own figure for an exec answer: the sum of its allocate..collect stages that ran
// (>= 0), else its "seconds"; -1 when it reports neither.
double TargetFigure(const ExecAnswer& a);

// A report.json "measurements" entry.
nlohmann::json MeasurementJson(const std::string& name, const std::string& scenario,
                               const std::string& target, const std::string& backend,
                               const std::string& clock, const std::vector<double>& samples);

}  // namespace sandcheck
