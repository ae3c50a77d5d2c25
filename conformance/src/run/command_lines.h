// One command from the command line, side by side, and each container backend's runtime-CLI
// floor (issue 16, NFR-1; docs/performance.md, "One command from the command line"): what
// `sandcheck compare` measures beside the latency targets, in the same run.
//
//   floor          fork+exec of /bin/true (the same spawner as every other row)
//   oneshot        `bwrap --unshare-all … /bin/true`, `runsc do /bin/true`, and, when the
//                  reference runtime is compared, `sandboxctl info` and `sandboxctl run
//                  [--backend B] -- true`: a fresh process that opens a runtime for one command;
//                  and the same through a sandboxd the harness starts (`sandboxctl --server
//                  unix:… run`): a fresh process that sends the command to a warm pool
//   runtime-exec   a bare `crun exec ID /bin/true` and `runsc exec ID /bin/true` into a container
//                  the harness starts itself (busybox-static rootfs, no network, no cgroups):
//                  the cost of the runtime CLI a container backend would pay per command
//
// Every row is timed by the harness from fork() to waitpid() (stdout to /dev/null), the rows
// taking turns in a rotating order so that a burst of load falls on all of them alike. A row
// whose tool is missing or whose warm-up run fails is reported with the reason, never dropped.
// crun runs in a private mount namespace with an empty tmpfs over a hybrid host's
// /sys/fs/cgroup/unified, as the reference's oci backend runs it (crun 1.8 refuses that layout).
//
// Where the parts are: this file is the loop (the rows, their rotating rounds) and the JSON;
// the process plumbing is common/process.h, the floor containers run/floor_containers.h, the
// local sandboxd drivers/local_sandboxd.h (only drivers/ talk to a target), and the Markdown
// table report/render.h's CommandLinesMarkdown.
//
// Ownership: the floor containers, their state roots, the bundle and the local sandboxd (its
// config, token and socket; stopped with SIGTERM, which destroys its sandboxes) live
// in one scratch directory (/var/tmp/sandcheck-cli-XXXXXX: short, since runsc's sockets are below
// its --root) that MeasureCommandLines removes before it returns; every process whose command
// line names it is killed and waited for (the leak check of
// tests/e2e/test_sandcheck_compare_cli.py); the empty directory runsc do leaves in /tmp is
// removed too.
//
// Thread-safety: one thread.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sandcheck {

struct CommandLineSpec {
  std::string id;       // stable key: "fork-exec", "bwrap", "runsc-do", "crun-exec", …
  std::string label;    // as the table shows it
  std::string role;     // "floor" | "oneshot" | "runtime-exec"
  std::string backend;  // the reference backend it runs ("default" for no --backend), or for a
                        // runtime-exec row the backend it is the floor of ("oci", "gvisor")
  std::vector<std::string> argv;     // argv[0] absolute
  bool private_cgroup_view = false;  // a private mount ns with /sys/fs/cgroup/unified hidden
};

struct CommandLineRow {
  CommandLineSpec spec;
  std::vector<double> samples;  // seconds
  std::string skip;             // non-empty: not measured, and why
};

struct CommandLineOptions {
  int rounds = 20;
  std::string sandboxctl;             // "" = no sandboxctl rows
  std::string sandboxd;               // "" = no rows through a local sandboxd (needs sandboxctl)
  std::vector<std::string> backends;  // the reference's backends: a `run --backend B` row each
  std::function<void(const std::string&)> progress;  // one line per stage/round (may be empty)
};

std::vector<CommandLineRow> MeasureCommandLines(const CommandLineOptions& options);

// Pure. {"rounds", "rows": [{id, label, role, backend, count, p50, p95, samples,
// p50_over_bwrap, p50_over_runsc_do (runsc and gvisor rows), p50_over_floor, p95_over_floor} or
// {…, skip}], "warm_vs_runtime_cli": [{backend, warm_p50, warm_p95, cli, cli_p50, cli_p95,
// p50_ratio, p95_ratio}], "goals": [{goal, ratio, met}]}. The warm-start figures are those of
// `comparison` (BuildComparison's output) for target `ours_target`.
nlohmann::json CommandLinesJson(const std::vector<CommandLineRow>& rows, int rounds,
                                const nlohmann::json& comparison, const std::string& ours_target);

}  // namespace sandcheck
