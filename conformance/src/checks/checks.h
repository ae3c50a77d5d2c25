// checks/ — verdicts: this dispatcher and one evaluator per check kind (verdict.h lists them),
// the records they judge (records.h), evidence (evidence.h), expectations (expectations.h).
// May include drivers/, scenario/, host/ and common/.
//
// The checks: verdicts on evidence, one evaluator per check kind (scenarios name the kind).
// Rules that hold for every kind:
//  - a feature the check needs and the target's `info` lacks → skip, naming the feature;
//  - a task that did not run because the target failed → error (exit 3), never a verdict;
//  - `requires_pass`: the check counts only if those checks passed in the same run (a runtime
//    with no network at all must not pass the denials: "no egress at all: allowed download
//    failed").
// The raw verdict is then adjusted by expectations and profile (expectations.h).
#pragma once

#include "checks/records.h"
#include "drivers/target.h"

namespace sandcheck {

// Judges every check of `run` in order (task checks, then scenario-level ones), filling
// run.checks and each task's `got` / `refused`.
void JudgeScenario(ScenarioRun& run, const TargetInfo& info);

// Evidence common to exec steps: command, status, state, exit, stdout/stderr tails, timings.
nlohmann::json ExecEvidence(const Step& step);

}  // namespace sandcheck
