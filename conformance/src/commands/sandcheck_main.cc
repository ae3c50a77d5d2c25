// sandcheck: the conformance harness for tool sandboxes (docs/sandcheck.md).
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "commands/cli.h"
#include "drivers/target.h"
#include "scenario/harness_values.h"

namespace {

constexpr const char* kHelp = R"(usage: sandcheck COMMAND [OPTIONS]

A conformance harness for tool sandboxes: replays scenarios (the demo's six tasks, ...) against
any runtime — the reference runtime in process, a sandboxd-compatible Execution API, or an
executable speaking adapter protocol v1 — and writes report.json, junit.xml, report.md and
report.html.

commands:
  run        replay scenarios against a target and write the reports
             (run --scenario nfr: the latency targets NFR-1..NFR-5, measured)
  list       the scenarios and their checks, with requirement IDs
  coverage   requirement ID -> checks; IDs without a check are gaps
  render     re-render the reports from a report.json
  gate       absolute gates (latency limits) and ratio gates (against a baseline) on a report
  compare    the latency targets against several runtimes and the machine's floor, side by side
  reproduce  the demo's measurements: throttle | revert | suspend (tables and charts)

sandcheck COMMAND --help for the options of each; sandcheck --version.
Exit codes: 0 all required checks passed, 1 a check failed, 2 bad usage or input,
3 the target or the environment failed.
)";

}  // namespace

int main(int argc, char** argv) {
  // A helper that exits while we write its stdin must not kill the harness.
  ::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fputs(kHelp, stderr);
    return sandcheck::kExitUsage;
  }
  std::string cmd = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::fputs(kHelp, stdout);
    return sandcheck::kExitPass;
  }
  if (cmd == "--version" || cmd == "version") {
    std::printf("sandcheck %s (report schema sandcheck-report/1, adapter protocol 1)\n",
                SANDCHECK_VERSION);
    return sandcheck::kExitPass;
  }
  if (cmd == "run") {
    sandcheck::PlantEnvCanary();  // {{harness.env_canary}}: before any thread or child starts
    return sandcheck::CmdRun(rest);
  }
  if (cmd == "list") return sandcheck::CmdList(rest);
  if (cmd == "coverage") return sandcheck::CmdCoverage(rest);
  if (cmd == "render") return sandcheck::CmdRender(rest);
  if (cmd == "gate") return sandcheck::CmdGate(rest);
  if (cmd == "compare") return sandcheck::CmdCompare(rest);
  if (cmd == "reproduce") return sandcheck::CmdReproduce(rest);
  if (cmd == "__hold-sandboxes") return sandcheck::RunSandboxHolder(rest);  // internal: NFR-5
  std::fprintf(stderr,
               "sandcheck: unknown command '%s' (run, list, coverage, render, gate, compare, "
               "reproduce; see sandcheck --help)\n",
               cmd.c_str());
  return sandcheck::kExitUsage;
}
