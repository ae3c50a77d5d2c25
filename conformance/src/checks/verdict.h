// Internal to checks/: what the evaluators share, and the evaluators themselves (checks.cc
// dispatches to them: network_checks.cc, limit_checks.cc, expect_check.cc, revert_checks.cc).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "checks/records.h"
#include "drivers/target.h"

namespace sandcheck::eval {

// A raw verdict: what an evaluator found, before expectations and the profile adjust it.
struct Verdict {
  Outcome outcome = Outcome::kFail;
  std::string reason;
  nlohmann::json evidence = nlohmann::json::object();
};
Verdict Pass(std::string reason);
Verdict Fail(std::string reason);

// Helpers.
std::string Trimmed(std::string s);
// "exit 1: wget: bad address 'x'" — the short story of a failed command.
std::string Told(const ExecAnswer& a);
// The command ran (ok or timeout), as opposed to being refused or lost.
bool Ran(const ExecAnswer& a);
// A step that ran cleanly: no harness error, status ok, exit 0.
bool RanCleanly(const Step& s);
// The gateway decisions whose destination contains `needle`.
nlohmann::json DecisionsFor(const nlohmann::json& log, const std::string& needle);
// A number the target reported in the exec answer's usage object (its cgroup's figures), if any.
std::optional<double> UsageOf(const ExecAnswer& a, const char* key);
// "256 MiB" / "1.5 GiB".
std::string Mib(double bytes);
// A string for a reason, quoted and cut at 60 characters.
std::string Quoted(const std::string& s);
// The first line of stdout that parses as a JSON object (sbx-probe and friends print one).
std::optional<nlohmann::json> FirstJsonLine(const std::string& out);
// Equal JSON values, numbers compared as numbers.
bool SameValue(const nlohmann::json& got, const nlohmann::json& want);

// The evaluators, one per check kind (docs/scenarios.md, "Check kinds").
Verdict AllowedDownload(TaskRecord& t, const nlohmann::json& p, const TargetInfo& info);
Verdict NameNotResolved(TaskRecord& t, const nlohmann::json& p);
Verdict GatewayRefused(TaskRecord& t, const nlohmann::json& p, const TargetInfo& info);
Verdict CpuThrottled(TaskRecord& t, const nlohmann::json& p, int64_t millicores);
Verdict CpuSharedByThreads(TaskRecord& t, const nlohmann::json& p, int64_t millicores);
Verdict ResourceExceeded(TaskRecord& t, const nlohmann::json& p, int64_t limit_bytes);
Verdict ExitOk(TaskRecord& t, const nlohmann::json& p);
Verdict Expect(TaskRecord& t, const nlohmann::json& p);
Verdict CleanAfterRevert(ScenarioRun& run, const nlohmann::json& p);
Verdict RevertMeasured(ScenarioRun& run);
// kind fresh_vs_revert (revert_checks.cc): PROD-5, the task's fresh rounds.
Verdict FreshVsRevert(TaskRecord& t, const nlohmann::json& p);
// kind pool_walk (pool_checks.cc): the walk's steps by `rule` (reset, context, tenants, untrusted).
Verdict PoolWalk(const ScenarioRun& run, const nlohmann::json& p);
// kind pool_grows (pool_checks.cc): POOL-6, the task's bursts of pooled runs.
Verdict PoolGrows(TaskRecord& t, const nlohmann::json& p);

// kind foreign_refused (tenant_checks.cc): PROD-1, the task's calls by other callers.
Verdict ForeignRefused(TaskRecord& t);

// LC-1: what the stages of a call may add up to, given the call's harness-timed wall seconds.
double StageBudget(double call_wall_seconds);
// SNAP-4: the least a revert's reported seconds may be, as a fraction of the harness's wall
// time of the revert call (the most is all of it, plus kRevertClockSlack for the two clocks).
inline constexpr double kRevertMinFraction = 0.001;
inline constexpr double kRevertClockSlack = 0.002;

}  // namespace sandcheck::eval
