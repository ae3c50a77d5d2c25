// TEST DOUBLE — not a sandbox. The simulated adapter emulates, for the six-task scenario's
// commands only, the answers a well-behaved runtime gives (adapter protocol v1), so that the
// harness's logic can be tested against runtimes broken on purpose. Nothing is isolated: the
// "sandbox" is a directory, and the commands are interpreted, never executed.
//
// Faults ($SIM_FAULTS, comma separated):
//   never-revert            revert leaves /work as it is (a crashed sandbox still restarts)
//   partial-revert          revert removes the visible files of /work only (hidden files,
//                           /tmp and processes stay); a crashed sandbox is reverted whole
//   no-memory-limit         sbx-memhog completes
//   memory-limit-doubled    the memory limit applied is twice the one asked for
//   cpu-limit-halved        the CPU cap applied is half the one asked for
//   oom-kills-one           a breach kills the hog only: the shell runs on (and the answer still
//                           says resource_exceeded / CRASHED)
//   no-cpu-limit            sbx-cpu is not slowed by cpu_millicores
//   cpu-cap-per-thread      the CPU cap holds each thread, not the sandbox: `sbx-cpu -t 2` gets
//                           twice the quota asked for (RES-1)
//   dns-resolves-everything every name resolves (then meets the gateway: 403)
//   ip-through              requests to IP literals get through (200)
//   drops-denied            NOT a defect: what the policy denies is dropped, not refused (the
//                           NetworkPolicy default): wget waits until `timeout N` kills it (143)
//   oom-as-ok               the OOM-killed command is reported as status ok, RUNNING, exit 137
//   slow-exec               NOT a defect: every exec spends 0.7 s before the command runs
//   no-network              the sandbox has no network at all (no resolver, no route)
//   flaky-network           every second sandbox with egress rules made in $SIM_STATE_DIR has
//                           no-network (so a check's outcome changes between --repeat's runs)
//   no-isolation            runs "on the host": every name resolves and connects, IPs connect,
//                           no limits, no gateway (and no egress.log)
//   garbage@OP hang@OP exit@OP   the adapter misbehaves for OP (prints garbage, hangs, exits 3)
// Isolation and limits (scenarios isolation, limits, failure, backends; each names what it
// breaks in tests/e2e/test_sandcheck_isolation.py):
//   shared-tmp              /tmp is one directory for all sandboxes (FS-4)
//   writable-system         /, /usr, /etc, /bin are writable (FS-2)
//   host-pid-ns             the sandbox sees the host's processes (FS-3)
//   empty-policy-open       no egress rules = everything open (SNAP-5)
//   no-disk-limit, disk-full-as-ok, disk-not-reclaimed   RES-3: no quota / the breach reported
//                           as ok / the space not given back by revert
//   no-pids-limit, pids-breach-crashes   RES-4: no pids.max / a breach ends the sandbox (legal)
//   bomb-ended-no-pids      RES-4: no pids.max; a fork bomb ends the sandbox as
//                           resource_exceeded for another reason once past 100 processes, with
//                           no refused fork (its peak lines show 400: caught by the bomb's own
//                           count, issue 32)
//   no-fd-limit             RLIMIT_NOFILE not applied (RES-6)
//   fd-soft-only            only the soft RLIMIT_NOFILE is the limit; the hard one stays high,
//                           so the command may raise its own (RES-6)
//   timeout-no-term         SIGKILL without SIGTERM first (RES-5)
//   timeout-doubled         SIGTERM at twice the timeout asked for (RES-5)
//   privileged              the command holds every capability in the host's user namespace:
//                           /proc/sys/kernel and its own cgroup's limits writable (FS-1)
//   wrong-workdir           commands run in /tmp, not /work (LC-5)
//   leaks-host-env          the sandbox's environment holds the runtime's own (LC-3, LC-4)
//   timeout-leaves-orphans  a setsid'd grandchild survives the timeout — for real, as a host
//                           process (`timeout 20 sleep N`), killed at destroy (RES-5, FAIL-4)
//   destroy-leaves-processes  destroy does not kill what the sandbox started (LC-7)
//   env-ignored             create's env is not applied (LC-3)
//   secrets-on-disk         create writes the secrets into the sandbox's /run (LC-4)
//   secrets-leak-across     every sandbox sees every secret ever given (LC-8)
//   no-diagnostics          stderr is never collected (LC-6, FAIL-2)
//   no-stages               exec answers carry no stage timings (LC-1)
//   fake-stages             exec answers carry every stage, each timed 0 s (LC-1)
//   trust-ignored           an untrusted sandbox runs on the backend it asked for (SEL-6)
// $SIM_FEATURES replaces the features `info` lists; $SIM_BACKENDS the backends (default sim;
// the first is the default); $SIM_STATE_DIR holds the sandboxes;
// $SIM_CPU_SECONDS_PER_MILLION scales sbx-cpu's emulated work (default 1/600).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace sim {

struct Sandbox {
  std::string root;     // the state directory of all sandboxes
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

// Kills the host processes the sandbox started for real (timeout-leaves-orphans and the
// destroy check): their process groups are listed in DIR/orphans.
void KillOrphans(const Sandbox& sb);

// Appends a gateway decision to the sandbox's log.
void LogDecision(const Sandbox& sb, const std::string& protocol, const std::string& destination,
                 const std::string& rule, const std::string& verdict);

}  // namespace sim
