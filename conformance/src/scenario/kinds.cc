// The check kinds and their parameters, and the harness values a scenario may name
// ({{harness.NAME}}) with their substitution (docs/scenarios.md).
#include <fmt/format.h>

#include <regex>

#include "common/json_strict.h"
#include "scenario/scenario.h"

namespace sandcheck {
namespace {
using VT = json::value_t;
}  // namespace

const std::vector<KindSpec>& CheckKinds() {
  static const std::vector<KindSpec> kKinds = {
      {"allowed_download",
       true,
       {{"content", VT::string, true, ""},
        {"file", VT::string, false, ""},
        {"host", VT::string, true, ""}}},
      {"name_not_resolved",
       true,
       {{"name", VT::string, true, ""}, {"require_nxdomain", VT::boolean, false, false}}},
      {"gateway_refused", true, {{"address", VT::string, true, ""}}},
      // SCN-5, RES-1: fixed work against the same work without the cap. The slowdown must match
      // the requested quota within [min_ratio, max_ratio] (0: no upper bound), and where the
      // target reports usage, the capped run's host CPU share must not pass the cap.
      {"cpu_throttled",
       true,
       {{"min_ratio", VT::number_float, false, 1.6},
        {"max_ratio", VT::number_float, false, 0.0},
        {"calibration_millicores", VT::number_integer, false, 0},
        {"calibration_runs", VT::number_integer, false, 2},
        {"overhead_command", VT::string, false, "true"},
        {"overhead_runs", VT::number_integer, false, 2}}},
      // RES-1 (issue 32): the cap holds the sandbox, not each thread. In the task's own capped
      // sandbox, the task (N threads of fixed work each) against `reference_command` (one thread
      // of the same work): under a cap on the sandbox the task takes N times as long; under a cap
      // per thread (or per vCPU) about as long. Reference runs before and after the task.
      {"cpu_shared_by_threads",
       true,
       {{"reference_command", VT::string, true, ""},
        {"min_ratio", VT::number_float, false, 1.6},
        {"reference_runs", VT::number_integer, false, 2},
        {"overhead_command", VT::string, false, "true"},
        {"overhead_runs", VT::number_integer, false, 2}}},
      // SCN-6, RES-2, RES-8, FAIL-3: the breach ends the sandbox — at the REQUESTED limit
      // (limit_bytes, 0: the sandbox's memory_bytes): the hog's last progress line ("allocated
      // N MiB") is below it and at least progress_floor of it, a reported usage peak is within
      // peak_slack of it, `survivor_marker` (printed by the shell after the hog) is absent; after
      // the revert the recover command runs, then `under_command` (an allocation below the
      // limit) completes and `over_command` (one a little above it) is ended too.
      {"resource_exceeded",
       true,
       {{"recover_command", VT::string, false, "echo ok"},
        {"recover_stdout", VT::string, false, "ok"},
        {"limit_bytes", VT::number_integer, false, 0},
        {"progress_floor", VT::number_float, false, 0.5},
        {"peak_slack", VT::number_float, false, 0.05},
        {"survivor_marker", VT::string, false, ""},
        {"under_command", VT::string, false, ""},
        {"under_stdout", VT::string, false, ""},
        {"over_command", VT::string, false, ""}}},
      {"exit_ok", true, {{"stdout_contains", VT::string, false, ""}}},
      // POOL-1..5, POOL-7, LC-2, LC-9, LC-10: the scenario's walk (TaskSpec::Walk), by one rule:
      // reset (nothing of an earlier step in a later one), context (each step's own env and
      // secret), tenants (an instance serves again only the same tenant, tool and trusted
      // class), untrusted (an untrusted instance never serves again).
      {"pool_walk", false, {{"rule", VT::string, true, ""}}},
      // PROD-5: the task's fresh rounds (TaskSpec::Fresh): revert and delete-and-create both
      // give a sandbox where nothing of the last use shows, and delete-and-create (with its first
      // request) takes at most max_fresh_seconds at the median; both timed by the harness.
      {"fresh_vs_revert", true, {{"max_fresh_seconds", VT::number_float, false, 30.0}}},
      // POOL-6: the task's bursts (TaskSpec::Bursts): a run was warm when its sandbox's PID 1
      // had run longer than the call took, less margin_s (a clock tick); the pool must serve more
      // of a burst warm as the bursts go on, or all of one.
      {"pool_grows", true, {{"margin_s", VT::number_float, false, 0.02}}},
      // PROD-1: the task's calls by other callers (TaskSpec::Foreign) refused, and nothing of
      // them in the owner's sandbox as the owner sees it after each.
      {"foreign_refused", true, {}},
      // The general kind: what the exec answer, its output and (optionally) a follow-up command
      // must show. Lists accept a string too; see ReadExpectation and docs/scenarios.md.
      {"expect",
       true,
       {{"status", VT::array, false, json::array({"ok"})},
        {"state", VT::string, false, ""},
        {"exit", VT::number_integer, false, nullptr},
        {"exit_nonzero", VT::boolean, false, false},
        {"stdout_contains", VT::array, false, json::array()},
        {"stdout_not_contains", VT::array, false, json::array()},
        {"stderr_contains", VT::array, false, json::array()},
        {"output_not_contains", VT::array, false, json::array()},
        {"stdout_equals", VT::string, false, nullptr},
        {"stdout_matches", VT::array, false, json::array()},
        {"stdout_not_matches", VT::array, false, json::array()},
        {"output_matches", VT::array, false, json::array()},
        {"output_not_matches", VT::array, false, json::array()},
        {"json", VT::object, false, json::object()},
        {"max_seconds", VT::number_float, false, 0.0},
        {"backend_in", VT::array, false, json::array()},
        {"answer_has", VT::array, false, json::array()},
        {"answer_min", VT::object, false, json::object()},
        {"may_refuse", VT::boolean, false, false},
        {"must_refuse", VT::boolean, false, false},
        {"then", VT::object, false, nullptr},
        {"any_of", VT::array, false, json::array()},
        {"host_absent", VT::object, false, nullptr},
        {"beacon", VT::object, false, nullptr},
        {"kernel", VT::string, false, nullptr},
        {"namespaces_apart", VT::array, false, json::array()},
        {"sink_untouched", VT::boolean, false, false},
        {"sink_reached", VT::boolean, false, false},
        {"sink_silent", VT::boolean, false, false},
        {"mirror_untouched", VT::boolean, false, false},
        {"mirror_not_for", VT::array, false, json::array()},
        {"suspended", VT::object, false, nullptr}}},
      {"clean_after_revert", false, {{"expect_files", VT::number_integer, false, 0}}},
      {"revert_measured", false, {}},
  };
  return kKinds;
}

const std::vector<HarnessValueSpec>& HarnessValueSpecs() {
  static const std::vector<HarnessValueSpec> kValues = {
      {"pid", true, "the harness's own process id (a process the sandbox must not see)"},
      {"canary_tmp", true,
       "path of a world-readable file the harness plants in its host's /tmp for the run"},
      {"canary_var_tmp", true, "the same in its host's /var/tmp"},
      {"canary_run", true, "the same in its host's /run"},
      {"canary_dev_shm", true, "the same in its host's /dev/shm"},
      {"canary_home", true,
       "the same in the harness's $HOME, where every directory down to it lets "
       "other users through; else a path there that does not exist, and the reason in the "
       "report's harness values (canary_home_not_planted)"},
      {"canary_content", true, "what the canary files hold (random per run)"},
      {"env_canary", true,
       "a random value the harness puts in its own environment as SANDCHECK_HOST_CREDENTIAL "
       "for the run (inherited by the adapters and runtimes it starts): a sandbox must not see "
       "it"},
      {"host_kernel", true,
       "the harness's host kernel as JSON {boot_id, btime, version} (sbx-probe's kernel_id read "
       "on the host): for the expect check's `kernel` condition"},
      {"host_namespaces", true,
       "the harness's own namespaces as JSON {pid, mnt, net, ipc, uts, user, cgroup: inode} "
       "(sbx-probe's namespaces read by the harness): for `namespaces_apart`"},
      {"sink_connect", true,
       "sbx-probe's arguments to reach every endpoint of the harness's egress sink (run/"
       "sink_fixture.h: tcp and udp on 127.0.0.1 and [::1], tls on 443 and dns on 53 of a "
       "127.83.84.N address): \"--connect KIND:ADDR:PORT[:NAME] ...\""},
      {"sink_nc", true, "\"127.0.0.1 PORT\": the sink's tcp endpoint, for nc"},
      {"sink_resolver", true,
       "the sink's udp endpoint as an explicit resolver (127.83.84.N, or 127.83.84.N:PORT where "
       "port 53 is taken), for nslookup NAME SERVER"},
      {"tenant_a", false,
       "a tenant the target serves (the pool scenario's walk): for an adapter or the in-process "
       "reference that offers `tenants`, \"sandcheck-a\"; over HTTP (sandboxd), the caller's "
       "own tenant as GET /v1/info names it"},
      {"tenant_b", false,
       "a second tenant: \"sandcheck-b\" for an adapter or the in-process reference that offers "
       "`tenants`; over HTTP the tenant of --second-token (without it, a walk over HTTP is a "
       "skip, saying so)"},
      {"floored_tenant", false,
       "a tenant whose policy floor is a kernel of its own (gvisor or microvm, SEL-2), as the "
       "target publishes it: info's \"tenant_floors\" {TENANT: BACKEND} (an adapter, the "
       "in-process reference: \"sandcheck-floored\"), or over HTTP the \"tenant_floor\" GET "
       "/v1/info names for --token's or --second-token's tenant"},
      {"missing_backend", false,
       "a backend class of the spec's seven the target's info does not list (the first of "
       "kubernetes, remote, microvm, gvisor, oci, wasm, native): SEL-5 and FAIL-1's request "
       "that no worker of the target can provision"},
      {"token", false, "random hex, new for every run"},
      {"token_number", false, "a random 7-digit number, new for every run"},
      {"mirror_addr", false,
       "ADDR:PORT of the mirror fixture (the service behind the scenario's services), if any"},
  };
  return kValues;
}

const HarnessValueSpec* FindHarnessValue(std::string_view name) {
  for (const auto& v : HarnessValueSpecs()) {
    if (name == v.name) return &v;
  }
  return nullptr;
}

std::string SubstituteHarness(const std::string& in,
                              const std::map<std::string, std::string>& values) {
  std::string out;
  size_t pos = 0;
  static constexpr std::string_view kOpen = "{{harness.";
  while (true) {
    size_t open = in.find(kOpen, pos);
    size_t close = open == std::string::npos ? open : in.find("}}", open);
    if (close == std::string::npos) break;
    std::string name = in.substr(open + kOpen.size(), close - open - kOpen.size());
    auto it = values.find(name);
    out += in.substr(pos, open - pos);
    out += it == values.end() ? in.substr(open, close + 2 - open) : it->second;
    pos = close + 2;
  }
  return out + in.substr(pos);
}

void SubstituteHarness(json& j, const std::map<std::string, std::string>& values) {
  if (j.is_string()) {
    j = SubstituteHarness(j.get<std::string>(), values);
  } else if (j.is_array()) {
    for (auto& x : j) SubstituteHarness(x, values);
  } else if (j.is_object()) {
    json out = json::object();
    for (auto it = j.begin(); it != j.end(); ++it) {
      json v = it.value();
      SubstituteHarness(v, values);
      out[SubstituteHarness(it.key(), values)] = std::move(v);
    }
    j = std::move(out);
  }
}

const KindSpec* FindKind(std::string_view kind) {
  for (const auto& k : CheckKinds()) {
    if (k.kind == kind) return &k;
  }
  return nullptr;
}

}  // namespace sandcheck
