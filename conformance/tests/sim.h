// TEST DOUBLE — not a sandbox. The simulated adapter emulates, for the six-task scenario's
// commands only, the answers a well-behaved runtime gives (adapter protocol v1), so that the
// harness's logic can be tested against runtimes broken on purpose. Nothing is isolated: the
// "sandbox" is a directory, and the commands are interpreted, never executed.
//
// Faults ($SIM_FAULTS, comma separated):
//   never-revert            revert leaves /work as it is (a crashed sandbox still restarts)
//   no-memory-limit         sbx-memhog completes
//   no-cpu-limit            sbx-cpu is not slowed by cpu_millicores
//   dns-resolves-everything every name resolves (then meets the gateway: 403)
//   ip-through              requests to IP literals get through (200)
//   oom-as-ok               the OOM-killed command is reported as status ok, RUNNING, exit 137
//   no-network              the sandbox has no network at all (no resolver, no route)
//   no-isolation            runs "on the host": every name resolves and connects, IPs connect,
//                           no limits, no gateway (and no egress.log)
//   garbage@OP hang@OP exit@OP   the adapter misbehaves for OP (prints garbage, hangs, exits 3)
// $SIM_FEATURES replaces the features `info` lists; $SIM_STATE_DIR holds the sandboxes;
// $SIM_CPU_SECONDS_PER_MILLION scales sbx-cpu's emulated work (default 1/600).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace sim {

struct Sandbox {
  std::string dir;      // state of this sandbox
  std::string work;     // its /work
  nlohmann::json spec;  // the create request
  std::set<std::string> faults;
  bool crashed = false;
};

struct ExecOut {
  std::string status = "ok", state = "RUNNING";
  int exit = 0;
  std::string out, err;
};

// Interprets `cmd` (sh -c syntax: ';', '&&', '||', one known pipeline) in the sandbox.
ExecOut Interpret(Sandbox& sb, const std::string& cmd, double timeout_s);

// Appends a gateway decision to the sandbox's log.
void LogDecision(const Sandbox& sb, const std::string& protocol, const std::string& destination,
                 const std::string& rule, const std::string& verdict);

}  // namespace sim
