// `sandcheck run`: load scenarios, reach the target, start the fixtures, replay, judge, write the
// reports. Exit codes: 0 all required checks passed; 1 a check failed; 2 bad usage or input;
// 3 the target or the environment failed.
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>

#include "checks/checks.h"
#include "checks/expectations.h"
#include "commands/cli.h"
#include "commands/run_common.h"
#include "common/json_strict.h"
#include "common/subprocess.h"
#include "report/render.h"
#include "report/report.h"
#include "run/live_log.h"
#include "run/mirror_fixture.h"
#include "run/repeat.h"
#include "run/runner.h"
#include "run/sink_fixture.h"
#include "scenario/catalog.h"
#include "scenario/harness_values.h"

namespace sandcheck {
namespace {

using nlohmann::json;

constexpr const char* kHelp = R"(usage: sandcheck run [OPTIONS]

Replays scenarios against a sandbox runtime and writes the reports.

  --target T            reference (default: the reference runtime, in process),
                        http://HOST:PORT or unix:PATH (a sandboxd-compatible Execution API),
                        adapter:PATH (an executable speaking adapter protocol v1)
  --scenario NAME|FILE  a built-in scenario or a scenario file (repeatable; default six-task);
                        all: every built-in scenario below (six-task, backends, egress,
                        failure, isolation, limits, pool), what certifying a runtime takes;
                        load: many one-shot runs at once, 0 lost / 0 wrong / 0 leaked
  --var NAME=VALUE      override a scenario variable (repeatable), e.g. mirror_host=mirror.local
  --out DIR             where the reports go (default reports/runs/<run-id>, with reports/runs/latest)
  --profile P           default: a failed MUST check or an unexpected pass fails the run
                        strict: failed SHOULD checks fail it too
                        certify: strict, expectations ignored, and a skip is a failure
  --expectations FILE   known gaps of the target (check id -> expected outcome + reason);
                        "none" for none (default for adapter:DIR/X is DIR/../expectations/X.json)
  --backend B           ask the target for backend B (skips if it does not offer it)
  --repeat N            run every scenario N times (1..1000, default 1) against the same target:
                        per check, how often each outcome occurred; a check whose outcome
                        changed is "flaky", which fails the run like a failure
  --tap                 also write report.tap (TAP 13)
  --token T             bearer token for an http/unix target (default $SANDCHECK_TOKEN)
  --second-token T      another tenant's token for an http/unix target (default
                        $SANDCHECK_SECOND_TOKEN): the pool walk's second tenant
  --adapter-timeout S   bound of one call to the target beyond the command's own timeout (default 30)
  --mirror M            local (default: start the mirror fixture on loopback and pass it as hosts),
                        none (the target resolves the mirror itself), or HOST:PORT of a running mirror
  --mirror-bin PATH     the mirror fixture (default: sbx-mirror next to sandcheck)
  --mirror-root DIR     the mirror's content (default: fixtures/mirror/content of the source tree)
  --target-host H       local or remote: whether the target's sandboxes run on this host (default:
                        reference, adapter:, unix: and loopback http are local). Checks that plant
                        files on this host or look at its processes run only for a local target
  --samples N           --scenario nfr only: samples per latency target (docs/nfr.md)
  --runs N              --scenario load only: one-shot runs to make (default 200; docs/load.md)
  --concurrency C       --scenario load only: runs in flight at once (default 8)
  --trust T             --scenario load only: the runs' trust class (first_party, verified,
                        untrusted, unverified; default: the target's)
  --only ID,...         --scenario nfr only: measure these latency targets only

Output: the log "label phase state http seconds result" on stdout, a progress line on stderr
when it is a terminal, then the verdict per check and the paths of the reports.
Exit codes: 0 all required checks passed, 1 a check failed, 2 bad usage or input,
3 the target or the environment failed.
)";

bool IsFile(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Default expectations for an adapter: <dir>/../expectations/<name>.json.
std::string DefaultExpectations(const std::string& target_spec) {
  if (target_spec.rfind("adapter:", 0) != 0) return "";
  std::string path = target_spec.substr(8);
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (auto dot = name.find('.'); dot != std::string::npos) name = name.substr(0, dot);
  std::string candidate = fmt::format("{}/../expectations/{}.json", dir, name);
  return IsFile(candidate) ? candidate : "";
}

void PrintSummary(const json& report, const std::string& out_dir, bool tap) {
  std::printf("\ncheck\trequirements\tlevel\toutcome\treason\n");
  for (const auto& c : report["checks"]) {
    std::string reqs;
    for (const auto& r : c["requirements"])
      reqs += (reqs.empty() ? "" : ",") + r.get<std::string>();
    std::string reason = SanitizeUtf8(c["reason"].get<std::string>());
    for (auto& ch : reason) {
      if (ch == '\t' || ch == '\n') ch = ' ';
    }
    std::printf("%s\t%s\t%s\t%s%s%s\t%s\n", c["id"].get<std::string>().c_str(), reqs.c_str(),
                c["level"].get<std::string>().c_str(), c["outcome"].get<std::string>().c_str(),
                RepeatTally(c).c_str(), c["blocking"].get<bool>() ? " (blocking)" : "",
                reason.c_str());
  }
  const json& s = report["summary"];
  std::printf(
      "\nverdict: %s (exit %d): %d checks: %d pass, %d fail, %d skip, %d xfail, %d xpass, %d "
      "error%s\n",
      s["verdict"].get<std::string>().c_str(), s["exit_code"].get<int>(), s["checks"].get<int>(),
      s["pass"].get<int>(), s["fail"].get<int>(), s["skip"].get<int>(), s["xfail"].get<int>(),
      s["xpass"].get<int>(), s["error"].get<int>(), RepeatSummary(report).c_str());
  PrintErrorsAndReports(report, out_dir, tap);
}

}  // namespace

int CmdRun(const std::vector<std::string>& args) {
  auto parsed = ParseArgs(args, {{"target"},
                                 {"scenario", true, true},
                                 {"out"},
                                 {"profile"},
                                 {"expectations"},
                                 {"var", true, true},
                                 {"backend"},
                                 {"tap", false},
                                 {"token"},
                                 {"second-token"},
                                 {"adapter-timeout"},
                                 {"mirror"},
                                 {"mirror-bin"},
                                 {"mirror-root"},
                                 {"samples"},
                                 {"only"},
                                 {"repeat"},
                                 {"concurrency"},
                                 {"runs"},
                                 {"trust"},
                                 {"target-host"}});
  if (!parsed.ok()) return UsageError("run", parsed.status().message());
  const ParsedArgs& a = *parsed;
  if (a.help) {
    std::fputs(kHelp, stdout);
    return kExitPass;
  }
  if (!a.positional.empty()) return UsageError("run", "unexpected argument " + a.positional[0]);
  auto profile = ParseProfile(a.Get("profile", "default"));
  if (!profile.ok()) return UsageError("run", profile.status().message());
  auto vars = ParseVars(a.All("var"));
  if (!vars.ok()) return UsageError("run", vars.status().message());
  auto parsed_topts = TargetOptionsFromArgs(a);
  if (!parsed_topts.ok()) return UsageError("run", parsed_topts.status().message());
  TargetOptions topts = *parsed_topts;
  std::string mirror_mode = a.Get("mirror", "local");
  std::string target_host = a.Get("target-host");
  if (!target_host.empty() && target_host != "local" && target_host != "remote")
    return UsageError("run", fmt::format("--target-host '{}': local or remote", target_host));

  int repeat = 1;
  if (a.Has("repeat")) {
    std::string text = a.Get("repeat");
    char* rend = nullptr;
    long n = std::strtol(text.c_str(), &rend, 10);
    if (rend == text.c_str() || *rend != '\0' || n < 1 || n > 1000)
      return UsageError("run", fmt::format("--repeat '{}': a whole number from 1 to 1000", text));
    repeat = static_cast<int>(n);
  }

  std::vector<std::string> names;
  for (const auto& n : a.All("scenario")) {
    if (n != "all") {
      names.push_back(n);
      continue;
    }
    // "all": every built-in replayed scenario, the six tasks first (what certifying a runtime
    // takes; nfr and load are measurements with options of their own, asked for by name).
    names.push_back("six-task");
    for (const auto& b : BuiltinScenarioNames()) {
      if (b != "six-task") names.push_back(b);
    }
  }
  if (names.empty()) names.push_back("six-task");
  // The load scenario (docs/load.md) is generated, not a file: many one-shot runs at once.
  for (const auto& n : names) {
    if (n == "load") return CmdRunLoad(args, a);
  }
  if (a.Has("concurrency") || a.Has("runs") || a.Has("trust"))
    return UsageError("run", "--concurrency, --runs and --trust apply to --scenario load only");
  for (const auto& n : names) {
    // Latency targets (docs/nfr.md) are measured, not replayed: their own runner.
    auto src = FindScenarioSource(n);
    if (src.ok() && IsNfrDocument(src->text)) {
      if (a.Has("repeat")) {
        return UsageError("run",
                          "--repeat applies to replayed scenarios; the latency targets of "
                          "--scenario nfr take --samples (each sample is already a repetition)");
      }
      return CmdRunNfr(args, a);
    }
  }
  if (a.Has("samples") || a.Has("only"))
    return UsageError("run", "--samples and --only apply to --scenario nfr only");
  auto scenarios = LoadScenarios(names, *vars, a.Get("backend"));
  if (!scenarios.ok()) return UsageError("run", scenarios.status().message());

  std::optional<Expectations> expectations;
  std::string exp_file = a.Get("expectations", DefaultExpectations(topts.spec));
  if (!exp_file.empty() && exp_file != "none") {
    auto e = LoadExpectations(exp_file);
    if (!e.ok()) return UsageError("run", e.status().message());
    if (sbx::Status st = ValidateExpectations(*e, *scenarios); !st.ok())
      return UsageError("run", st.message());
    expectations = std::move(*e);
  }
  // The pool walk's second lane goes through the reference's warm pool (RunPooled), as
  // sandboxd's one-shot runs do; other runs keep the runtime without one.
  for (const auto& s : *scenarios) {
    for (const auto& t : s.tasks) topts.reference_warm_pool |= t.walk.has_value();
  }
  auto target = MakeTarget(topts);
  if (!target.ok() && target.status().code() == sbx::Code::kInvalidArgument) {
    return UsageError("run", target.status().message());
  }

  RunContext ctx = StartRunContext(args, a, *profile, topts, target);
  ctx.repeat = repeat;
  ctx.vars = *vars;
  ctx.expectations = expectations ? &*expectations : nullptr;

  bool default_out = false;
  auto report_dir = ReportDir(a, ctx.run_id, &default_out);
  if (!report_dir.ok()) return UsageError("run", report_dir.status().message(), kExitTarget);
  const std::string out_dir = *report_dir;

  InterruptOnSignals();

  LiveLog log(stdout, stderr, ::isatty(2) == 1);
  log.Header();
  std::vector<ScenarioRun> runs;
  std::string fatal;
  std::optional<MirrorFixture> mirror;
  std::optional<SinkFixture> sink;
  RunnerOptions ropts;
  ropts.backend = ctx.backend;
  if (!target.ok()) {
    fatal = target.status().ToString();
  } else {
    log.Progress("asking the target for its info");
    auto info = (*target)->Info();
    if (!info.ok()) {
      fatal = "info failed: " + info.status().ToString();
    } else {
      ctx.info = *info;
    }
  }
  bool needs_mirror = false;
  for (const auto& s : *scenarios) {
    for (const auto& [name, fixture] : s.sandbox.services)
      needs_mirror = needs_mirror || fixture == "mirror";
  }
  if (fatal.empty() && needs_mirror) {
    if (mirror_mode == "local") {
      log.Progress("starting the mirror fixture");
      auto m = MirrorFixture::Start({a.Get("mirror-bin"), a.Get("mirror-root"), 10});
      if (!m.ok()) {
        fatal = "mirror fixture: " + m.status().ToString();
      } else {
        mirror = std::move(*m);
        ropts.fixtures["mirror"] = mirror->address();
        ropts.mirror = &*mirror;
        ctx.fixtures["mirror"] = {{"mode", "local"},
                                  {"address", mirror->address()},
                                  {"binary", mirror->binary()},
                                  {"root", mirror->root()}};
      }
    } else if (mirror_mode == "none") {
      ctx.fixtures["mirror"] = {{"mode", "none"}};
    } else {
      ropts.fixtures["mirror"] = mirror_mode;
      ctx.fixtures["mirror"] = {{"mode", "external"}, {"address", mirror_mode}};
    }
  }
  // {{harness.NAME}} values (harness_values.h): canaries are planted only if a task uses them.
  std::optional<HarnessValues> harness;
  if (fatal.empty()) {
    ropts.target_local = TargetIsLocal(topts.spec, target_host);
    std::set<std::string> used;
    for (const auto& s : *scenarios) {
      for (const auto& t : s.tasks) {
        for (const auto& name : t.harness_values) {
          // Values that mean something only on this host are not even made for a target
          // elsewhere (the tasks that use them are skipped, saying why).
          const HarnessValueSpec* spec = FindHarnessValue(name);
          if (spec && (!spec->local_only || ropts.target_local)) used.insert(name);
        }
      }
    }
    auto h = HarnessValues::Make(used, ropts.target_local,
                                 ropts.fixtures.count("mirror") ? ropts.fixtures["mirror"] : "");
    if (!h.ok()) {
      fatal = "harness values: " + h.status().ToString();
    } else {
      harness.emplace(std::move(*h));
      ropts.harness = harness->values();
      if ((used.count("tenant_a") || used.count("tenant_b")) && ctx.info &&
          ctx.info->Has("tenants")) {
        // Two tenants the target serves (the pool walk). An adapter or the in-process reference
        // takes any name in create's `tenant`; over HTTP the tenant is the credential's.
        if (topts.spec.rfind("http", 0) == 0 || topts.spec.rfind("unix:", 0) == 0) {
          std::string mine = ctx.info->raw.value("tenant", "");
          std::string second = ctx.info->raw.value("second_tenant", "");
          if (!mine.empty()) ropts.harness["tenant_a"] = mine;
          if (!mine.empty() && !second.empty() && second != mine)
            ropts.harness["tenant_b"] = second;
        } else {
          ropts.harness["tenant_a"] = "sandcheck-a";
          ropts.harness["tenant_b"] = "sandcheck-b";
        }
      }
      if (used.count("missing_backend") && ctx.info && !ctx.info->backends.empty()) {
        // SEL-5, FAIL-1: a class of the spec that no worker of the target offers. Placements
        // first (no runtime may swap them for another backend), then the strongest isolation.
        for (const char* b :
             {"kubernetes", "remote", "microvm", "gvisor", "oci", "wasm", "native"}) {
          if (std::find(ctx.info->backends.begin(), ctx.info->backends.end(), b) ==
              ctx.info->backends.end()) {
            ropts.harness["missing_backend"] = b;
            break;
          }
        }
      }
      if (used.count("floored_tenant") && ctx.info && ctx.info->Has("tenants")) {
        // SEL-2: a tenant whose policy floor is a kernel of its own (gvisor, microvm), which the
        // sandbox's kernel evidence can tell from the host's. Over HTTP a tenant is a credential:
        // --token's or --second-token's, as GET /v1/info names it with its "tenant_floor".
        auto own_kernel = [](const nlohmann::json& f) {
          return f.is_string() && (f == "gvisor" || f == "microvm");
        };
        const nlohmann::json& raw = ctx.info->raw;
        if (own_kernel(raw.value("tenant_floor", nlohmann::json())) && raw.contains("tenant")) {
          ropts.harness["floored_tenant"] = raw["tenant"].get<std::string>();
        } else if (own_kernel(raw.value("second_tenant_floor", nlohmann::json())) &&
                   raw.contains("second_tenant")) {
          ropts.harness["floored_tenant"] = raw["second_tenant"].get<std::string>();
        } else if (raw.contains("tenant_floors") && raw["tenant_floors"].is_object()) {
          const nlohmann::json& floors = raw["tenant_floors"];
          for (auto it = floors.begin(); it != floors.end(); ++it) {
            if (own_kernel(it.value())) {
              ropts.harness["floored_tenant"] = it.key();
              break;
            }
          }
        }
      }
      bool sink_service = false;  // a scenario's name served by the sink (a TLS passthrough)
      for (const auto& s : *scenarios) {
        for (const auto& [name, fixture] : s.sandbox.services) sink_service |= fixture == "sink";
        for (const auto& t : s.tasks) {
          if (!t.sandbox) continue;
          for (const auto& [name, fixture] : t.sandbox->services) sink_service |= fixture == "sink";
        }
      }
      if (used.count("sink_connect") || used.count("sink_nc") || used.count("sink_resolver") ||
          (sink_service && ropts.target_local)) {
        // The egress sink (run/sink_fixture.h): its record, not the probe's output, is what a
        // denial is judged by. A run without it skips the tasks that use it (no value).
        log.Progress("starting the egress sink");
        auto sk = SinkFixture::Start();
        if (!sk.ok()) {
          ctx.fixtures["sink"] = {{"mode", "none"}, {"error", sk.status().ToString()}};
        } else {
          sink.emplace(std::move(*sk));
          ropts.sink = &*sink;
          ropts.harness["sink_connect"] = sink->probe_args();
          ropts.harness["sink_nc"] = sink->nc_target();
          ropts.harness["sink_resolver"] = sink->resolver();
          ropts.fixtures["sink"] = sink->tcp_address();
          ctx.fixtures["sink"] = sink->describe();
          ctx.fixtures["sink"]["mode"] = "local";
        }
      }
      ctx.fixtures["harness"] = {{"mode", ropts.target_local ? "local" : "none"},
                                 {"values", ropts.harness},
                                 {"target_local", ropts.target_local}};
    }
  }
  for (const auto& s : *scenarios) {
    if (!fatal.empty() || InterruptCount() > 0) {
      ScenarioRun run;
      run.scenario = &s;
      run.fatal_error = fatal.empty() ? "interrupted before this scenario" : fatal;
      run.create_request = BuildCreateRequest(s, ropts);
      for (const auto& t : s.tasks) {
        TaskRecord rec;
        rec.spec = &t;
        rec.skip_reason = "not run";
        run.tasks.push_back(std::move(rec));
      }
      JudgeScenario(run, ctx.info.value_or(TargetInfo{}));
      runs.push_back(std::move(run));
      continue;
    }
    // --repeat N: the same scenario N times against the same target, merged per check
    // (repeat.h: an outcome that changed is flaky).
    std::vector<ScenarioRun> reps;
    for (int i = 0; i < repeat && (i == 0 || InterruptCount() == 0); ++i) {
      if (repeat > 1) log.Progress(fmt::format("{}: run {} of {}", s.name, i + 1, repeat));
      Runner runner(**target, *ctx.info, ropts, log);
      reps.push_back(runner.Run(s));
    }
    if (static_cast<int>(reps.size()) < repeat) {
      reps.back().abort_error +=
          fmt::format("{}interrupted after {} of {} runs",
                      reps.back().abort_error.empty() ? "" : "; ", reps.size(), repeat);
    }
    runs.push_back(MergeRepeats(std::move(reps)));
  }
  log.ClearProgress();
  if (mirror) {
    json mlog = mirror->Log();
    ctx.fixtures["mirror"]["log"] = mlog;
  }
  mirror.reset();
  sink.reset();
  harness.reset();  // removes the canaries
  ApplyExpectationsAndProfile(runs, ctx.expectations, ctx.profile);
  FinishRunContext(ctx);
  json report = BuildReport(ctx, runs);
  if (int rc = WriteRunReports(report, out_dir, a.Has("tap"), default_out, ctx.run_id); rc != 0)
    return rc;
  PrintSummary(report, out_dir, a.Has("tap"));
  return report["summary"]["exit_code"].get<int>();
}

}  // namespace sandcheck
