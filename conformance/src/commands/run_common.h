// commands/ (internal): what the runs of sandcheck share (`run` with its scenarios, nfr and
// load; `reproduce`): the target from the command line, the report directory, and the end — the
// report written in every format, reports/runs/latest, and the summary on stdout.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "commands/cli.h"
#include "common/clock.h"  // NowUnix(): the report's timestamps
#include "drivers/target.h"
#include "report/report.h"
#include "sbx/status.h"

namespace sandcheck {

// SIGINT and SIGTERM raise the interrupt flag (Interrupt(), common/subprocess.h): the run starts
// nothing new, cleans up what it made, and still writes its report.
void InterruptOnSignals();

// The report context every run starts from: a new run id, the command line (tokens masked),
// the profile, the target's spec and driver kind ("" when it could not be opened), --backend,
// and the start time with the machine's load counters (host/machine_load.h).
RunContext StartRunContext(const std::vector<std::string>& args, const ParsedArgs& a,
                           Profile profile, const TargetOptions& topts,
                           const sbx::StatusOr<std::unique_ptr<Target>>& target);

// The end of the run: the finish time, and how busy the machine was since the start
// (report.json "machine_load").
void FinishRunContext(RunContext& ctx);

// --target (default "reference"), --token (default $SANDCHECK_TOKEN), --adapter-timeout (seconds,
// > 0 and <= 3600, default 30) and the tools next to the binary. kInvalidArgument names the
// option.
sbx::StatusOr<TargetOptions> TargetOptionsFromArgs(const ParsedArgs& a);

// --out, or reports/runs/<run_id> (then *default_out), created. kInvalidArgument if it cannot be.
sbx::StatusOr<std::string> ReportDir(const ParsedArgs& a, const std::string& run_id,
                                     bool* default_out);

// Writes report.json and the formats rendered from it (render.h) into `out_dir`; with
// `default_out`, points reports/runs/latest at `run_id`. Returns kExitPass, or kExitTarget
// (after saying why on stderr) when a file cannot be written.
int WriteRunReports(const nlohmann::json& report, const std::string& out_dir, bool tap,
                    bool default_out, const std::string& run_id);

// "verdict: pass (exit 0): N checks: ..." and then every check (`only_failed`: every check that
// did not pass), one line each — the summary of the nfr and load runs.
void PrintVerdictAndChecks(const nlohmann::json& report, bool only_failed);

// The errors of the run, then the paths of the reports written.
void PrintErrorsAndReports(const nlohmann::json& report, const std::string& out_dir, bool tap);

}  // namespace sandcheck
