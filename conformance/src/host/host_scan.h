// The harness looks at its OWN host's process table (/proc): after a timeout or a destroy, a
// process a sandbox started must be gone (RES-5, FAIL-4, LC-7). Black-box with respect to the
// runtime — it reads nothing of the runtime's — and meaningful only when the target's
// sandboxes run on this host (a local target); the runner does not call it otherwise.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace sandcheck {

// Processes of this host whose command line (arguments joined by spaces) holds `needle` as
// whole words (preceded by start, space or '/', followed by end or space), excluding the
// harness itself. Polls every 50 ms until none is left or `wait_s` has passed (a SIGKILLed
// process takes a moment to be reaped). Returns
//   {"process": needle, "found": [{"pid", "cmdline"}...], "waited_seconds": x}
// where "found" is what was still there at the end (empty: gone).
nlohmann::json ScanHostProcesses(const std::string& needle, double wait_s);
// The opposite wait: scans until a process whose command line holds `needle` is seen, for at
// most `wait_s` (a control: what a sandbox just started in the background may not have exec'd
// yet when its command returns). Same object; "found" empty if it never appeared.
nlohmann::json AwaitHostProcess(const std::string& needle, double wait_s);

// Whether `cmdline` (arguments joined by spaces) holds `needle` as whole words (see above).
bool CmdlineHolds(const std::string& cmdline, const std::string& needle);

}  // namespace sandcheck
