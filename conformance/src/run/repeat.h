// `sandcheck run --repeat N`: every scenario is run N times against the same target, and each
// check's raw outcomes are merged into one verdict. A check that got the same outcome every time
// keeps it; one whose outcome changed is `flaky` (Outcome::kFlaky), which fails the run like a
// failure (a MUST check, or any check under strict/certify) and is named as such in every report
// format. The merged check carries how often each outcome occurred and each run's outcome and
// reason; its reason and evidence are those of the first run that did not pass (so a flaky check
// shows what went wrong when it went wrong).
//
// Thread-safety: pure functions.
#pragma once

#include <vector>

#include "checks/records.h"

namespace sandcheck {

// `reps`: the same scenario's runs, in order (at least one). Returns the merged run: the last
// run's tasks and steps, every check merged across runs, and the runs' infrastructure errors
// (abort_error / fatal_error) joined, each naming its run.
ScenarioRun MergeRepeats(std::vector<ScenarioRun> reps);

}  // namespace sandcheck
