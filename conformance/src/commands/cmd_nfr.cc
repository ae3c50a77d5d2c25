// `sandcheck run --scenario nfr` (the latency targets, docs/nfr.md) and `sandcheck compare`
// (the same measurements against several targets in one go, with the machine's floor, written
// as a comparison table: docs/performance.md).
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <set>
#include <sstream>

#include "commands/cli.h"
#include "commands/run_common.h"
#include "common/json_strict.h"
#include "common/stats.h"
#include "common/subprocess.h"
#include "host/orphan_census.h"
#include "report/chart.h"
#include "report/render.h"
#include "report/report.h"
#include "run/command_lines.h"
#include "run/mirror_fixture.h"
#include "run/nfr_runner.h"
#include "scenario/catalog.h"
#include "scenario/nfr_spec.h"

namespace sandcheck {
namespace {

using nlohmann::json;

constexpr const char* kCompareHelp =
    R"(usage: sandcheck compare [--target T ...] [--samples N] [--scenario NAME|FILE]
                         [--out DIR] [--adapter-timeout S] [--cli-rounds N]

Runs the latency targets (default scenario nfr) against several targets in one go — by default
the reference runtime in process (every backend it offers) and every third-party adapter next
to sandcheck (sandcheck-adapter-*) — each as `sandcheck run --scenario nfr --target T`, measures
the machine's physical floor (fork+exec of /bin/true) in the same run, and writes
comparison.md (per latency target: p50/p95 of every runtime and backend, as ratios to ours —
the reference runtime's first backend — and to the floor), comparison.json, comparison.html
(with CDFs) and every target's own report under DIR/<target>/.

Then, in the same run, one command from the command line side by side (issue 16): fork+exec,
`bwrap --unshare-all /bin/true`, `runsc do /bin/true`, `sandboxctl info` and `sandboxctl run
[--backend B] -- true` for the reference's backends (in process, and through a sandboxd the
harness starts for the purpose: `sandboxctl --server`), and each container backend's runtime-CLI
floor (a bare `crun exec` / `runsc exec` of /bin/true into a container the harness starts),
with the ratios to bwrap, to runsc do and to the floor, and ours warm exec ÷ that runtime CLI.

  --target T      reference, adapter:PATH, http://HOST:PORT or unix:PATH (repeatable);
                  T#BACKEND measures only that backend of T (e.g. reference#native)
  --samples N     samples per latency target (default: the scenario's; clamped to each max)
  --scenario S    the latency-target file (default nfr)
  --out DIR       default reports/runs/<run-id>-compare
  --cli-rounds N  rounds of the command-line table (default 20; 0 leaves it out)
Exit codes: 0 every run finished (whatever its verdict), 2 bad usage, 3 a run could not be made.
)";

sbx::StatusOr<int> ParseSamples(const ParsedArgs& a) {
  if (!a.Has("samples")) return 0;
  std::string text = a.Get("samples");
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v < 1 || v > 100000)
    return sbx::InvalidArgument(fmt::format("--samples '{}': an integer 1..100000", text));
  return static_cast<int>(v);
}

}  // namespace

int CmdRunNfr(const std::vector<std::string>& args, const ParsedArgs& a) {
  if (a.Has("target-host")) {
    return UsageError("run",
                      "--target-host applies to conformance scenarios, not to --scenario nfr");
  }
  if (!a.positional.empty()) return UsageError("run", "unexpected argument " + a.positional[0]);
  std::vector<std::string> names = a.All("scenario");
  if (names.size() != 1) {
    return UsageError("run",
                      "a latency-target scenario (nfr) runs alone: give it as the only --scenario");
  }
  if (a.Has("expectations") && a.Get("expectations") != "none") {
    return UsageError("run",
                      "--expectations does not apply to latency targets: product limits "
                      "are not waived by an expectations file (docs/nfr.md)");
  }
  auto profile = ParseProfile(a.Get("profile", "default"));
  if (!profile.ok()) return UsageError("run", profile.status().message());
  auto vars = ParseVars(a.All("var"));
  if (!vars.ok()) return UsageError("run", vars.status().message());
  auto samples = ParseSamples(a);
  if (!samples.ok()) return UsageError("run", samples.status().message());
  std::set<std::string> used;
  auto spec = LoadNfrByName(names[0], *vars, &used);
  if (!spec.ok()) return UsageError("run", spec.status().message());
  std::set<std::string> only;
  if (a.Has("only")) {
    std::stringstream ss(a.Get("only"));
    std::string id;
    while (std::getline(ss, id, ',')) {
      if (!spec->Find(id)) {
        std::vector<std::string> ids;
        for (const auto& t : spec->targets) ids.push_back(t.id);
        return UsageError("run", fmt::format("--only {}: {} has no target '{}' (it has: {})",
                                             a.Get("only"), spec->name, id, Join(ids, ", ")));
      }
      only.insert(id);
    }
  }
  for (const auto& [k, v] : *vars) {
    if (!used.count(k)) {
      std::vector<std::string> declared;
      for (const auto& var : spec->variables) declared.push_back(var.name);
      return UsageError("run", fmt::format("--var {}: {} does not declare it (declared: {})", k,
                                           spec->name, Join(declared, ", ")));
    }
  }
  auto parsed_topts = TargetOptionsFromArgs(a);
  if (!parsed_topts.ok()) return UsageError("run", parsed_topts.status().message());
  TargetOptions topts = *parsed_topts;
  topts.reference_warm_pool = true;  // NFR-1 through the pool (warm-start-pooled)
  auto target = MakeTarget(topts);
  if (!target.ok() && target.status().code() == sbx::Code::kInvalidArgument)
    return UsageError("run", target.status().message());

  RunContext ctx = StartRunContext(args, a, *profile, topts, target);
  ctx.vars = *vars;
  bool default_out = false;
  auto report_dir = ReportDir(a, ctx.run_id, &default_out);
  if (!report_dir.ok()) return UsageError("run", report_dir.status().message(), kExitTarget);
  const std::string out_dir = *report_dir;
  InterruptOnSignals();

  LiveLog log(stdout, stderr, ::isatty(2) == 1);
  NfrRunResult result;
  if (!target.ok()) {
    ctx.errors.push_back(target.status().ToString());
  } else {
    log.Progress("asking the target for its info");
    auto info = (*target)->Info();
    if (!info.ok()) {
      ctx.errors.push_back("info failed: " + info.status().ToString());
    } else {
      ctx.info = *info;
      NfrRunOptions o;
      o.backend = ctx.backend;
      o.samples = *samples;
      o.profile = *profile;
      o.only = only;
      result = RunNfr(**target, *info, *spec, o, info->name, log);
    }
  }
  log.ClearProgress();
  target = sbx::Internal("closed");  // the runtime (and its background work) ends here
  FinishRunContext(ctx);
  json report = BuildReport(ctx, {});
  report["checks"] = result.checks;
  report["measurements"] = result.measurements;
  for (const auto& e : result.errors) report["errors"].push_back(e);
  SummarizeChecks(report);
  if (int rc = WriteRunReports(report, out_dir, a.Has("tap"), default_out, ctx.run_id); rc != 0)
    return rc;
  PrintVerdictAndChecks(report, /*only_failed=*/true);
  PrintErrorsAndReports(report, out_dir, a.Has("tap"));
  return report["summary"]["exit_code"].get<int>();
}

// ---------------------------------------------------------------------------------------------
// sandcheck compare

namespace {

// A directory name for a target spec: "reference", "bwrap" (adapter:.../sandcheck-adapter-bwrap).
std::string TargetSlug(const std::string& spec) {
  std::string s = spec;
  if (s.rfind("adapter:", 0) == 0) {
    s = s.substr(s.rfind('/') == std::string::npos ? 8 : s.rfind('/') + 1);
    if (s.rfind("sandcheck-adapter-", 0) == 0) s = s.substr(18);
  }
  std::string out;
  for (char c : s) out.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '-');
  return out;
}

}  // namespace

// The comparison from the reports (pure; also used by tests through the CLI).
json BuildComparison(const NfrSpec& spec, const std::vector<json>& reports,
                     const std::vector<double>& floor) {
  json out = {{"scenario", spec.name}, {"floor", StatsJson(floor)}, {"targets", json::array()}};
  std::string ours_name = reports.empty() ? "" : reports[0]["target"].value("name", "");
  for (const NfrTarget& t : spec.targets) {
    json rows = json::array();
    double ours_p50 = 0, ours_p95 = 0;
    bool ours_native = false;
    std::string ours_backend;
    for (size_t ri = 0; ri < reports.size(); ++ri) {
      const json& r = reports[ri];
      for (const auto& m : r["measurements"]) {
        if (m.value("name", "") != t.id || m.value("clock", "") != "harness" ||
            !m["p50"].is_number())
          continue;
        json row = {{"target", r["target"].value("name", "")},
                    {"spec", r["target"].value("spec", "")},
                    {"backend", m.value("backend", "")},
                    {"count", m["count"]},
                    {"p50", m["p50"]},
                    {"p95", m["p95"]},
                    {"samples", m["samples"]}};
        std::string verdict = "-";
        for (const auto& c : r["checks"]) {
          if (c["evidence"].value("target", "") == t.id &&
              c["evidence"].value("backend", "") == m.value("backend", ""))
            verdict = c.value("outcome", "-");
        }
        row["verdict"] = verdict;
        // Ours: the first target's native backend (its first backend if it has no native).
        if (ri == 0 && (ours_p50 == 0 || m.value("backend", "") == "native") && !ours_native) {
          ours_p50 = m["p50"].get<double>();
          ours_p95 = m["p95"].get<double>();
          ours_native = m.value("backend", "") == "native";
          ours_backend = m.value("backend", "");
        }
        rows.push_back(row);
      }
      for (const auto& c : r["checks"]) {
        if (c["evidence"].value("target", "") == t.id && c.value("outcome", "") == "skip") {
          rows.push_back({{"target", r["target"].value("name", "")},
                          {"spec", r["target"].value("spec", "")},
                          {"backend", c["evidence"].value("backend", "")},
                          {"skip", c.value("reason", "")}});
        }
      }
    }
    double floor_p50 = floor.empty() ? 0 : Percentile(floor, 50);
    double floor_p95 = floor.empty() ? 0 : Percentile(floor, 95);
    for (auto& row : rows) {
      if (!row.contains("p50")) continue;
      double p50 = row["p50"], p95 = row["p95"];
      row["p50_over_ours"] = ours_p50 > 0 ? json(p50 / ours_p50) : json(nullptr);
      row["p95_over_ours"] = ours_p95 > 0 ? json(p95 / ours_p95) : json(nullptr);
      row["p50_over_floor"] = floor_p50 > 0 ? json(p50 / floor_p50) : json(nullptr);
      row["p95_over_floor"] = floor_p95 > 0 ? json(p95 / floor_p95) : json(nullptr);
    }
    out["targets"].push_back({{"id", t.id},
                              {"title", t.title},
                              {"requirement", t.requirement},
                              {"limit_s", t.limited ? json(t.limit_s) : json(nullptr)},
                              {"percentile", t.percentile},
                              {"boundary", t.boundary},
                              {"ours", ours_name + " / " + ours_backend},
                              {"rows", rows}});
  }
  return out;
}

int CmdCompare(const std::vector<std::string>& args) {
  auto parsed = ParseArgs(
      args, {{"target", true, true},
             {"samples"},
             {"scenario"},
             {"out"},
             {"adapter-timeout"},
             {"cli-rounds"}});
  if (!parsed.ok()) return UsageError("compare", parsed.status().message());
  const ParsedArgs& a = *parsed;
  if (a.help) {
    std::fputs(kCompareHelp, stdout);
    return kExitPass;
  }
  if (!a.positional.empty()) return UsageError("compare", "unexpected argument " + a.positional[0]);
  auto samples = ParseSamples(a);
  if (!samples.ok()) return UsageError("compare", samples.status().message());
  int cli_rounds = 20;
  if (a.Has("cli-rounds")) {
    std::string text = a.Get("cli-rounds");
    char* end = nullptr;
    long v = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || v < 0 || v > 10000)
      return UsageError("compare", "--cli-rounds needs a whole number 0..10000, not '" + text + "'");
    cli_rounds = static_cast<int>(v);
  }
  std::string scenario = a.Get("scenario", "nfr");
  auto spec = LoadNfrByName(scenario, {}, nullptr);
  if (!spec.ok()) return UsageError("compare", spec.status().message());
  std::vector<std::string> targets = a.All("target");
  if (targets.empty()) {
    targets.push_back("reference");
    for (const std::string& n : ListDir(SelfDir())) {
      if (n.rfind("sandcheck-adapter-", 0) == 0 && n.find('.') == std::string::npos)
        targets.push_back("adapter:" + SelfDir() + "/" + n);
    }
  }
  std::string run_id = NewRunId();
  std::string out_dir = a.Get("out", "reports/runs/" + run_id + "-compare");
  if (sbx::Status st = MakeDirs(out_dir); !st.ok())
    return UsageError("compare", st.message(), kExitTarget);
  InterruptOnSignals();
  double started = NowUnix();
  std::printf("floor: %d x fork+exec of %s\n", spec->floor_samples, spec->floor_argv[0].c_str());
  std::fflush(stdout);
  auto floor = MeasureSpawnFloor(spec->floor_argv, std::max(spec->floor_samples, 50));
  if (!floor.ok()) return UsageError("compare", floor.status().ToString(), kExitTarget);
  std::vector<json> reports;
  std::string self = SelfDir() + "/sandcheck";
  int rc = kExitPass;
  for (const std::string& t : targets) {
    if (Interrupted()) break;
    // "T#BACKEND": measure only that backend of T.
    std::string spec_t = t, backend;
    if (size_t hash = t.rfind('#'); hash != std::string::npos) {
      spec_t = t.substr(0, hash);
      backend = t.substr(hash + 1);
    }
    std::string dir = out_dir + "/" + TargetSlug(spec_t) + (backend.empty() ? "" : "-" + backend);
    std::vector<std::string> argv = {self,       "run",  "--scenario", scenario,
                                     "--target", spec_t, "--out",      dir};
    if (!backend.empty()) {
      argv.push_back("--backend");
      argv.push_back(backend);
    }
    if (*samples > 0) {
      argv.push_back("--samples");
      argv.push_back(std::to_string(*samples));
    }
    if (a.Has("adapter-timeout")) {
      argv.push_back("--adapter-timeout");
      argv.push_back(a.Get("adapter-timeout"));
    }
    std::printf("\n== %s\n", Join(argv, " ").c_str());
    std::fflush(stdout);
    SubprocessOptions so;
    so.argv = argv;
    so.timeout_s = 4 * 3600;
    auto r = RunSubprocess(so);
    if (!r.ok()) {
      std::fprintf(stderr, "sandcheck compare: %s: %s\n", t.c_str(), r.status().ToString().c_str());
      rc = kExitTarget;
      continue;
    }
    std::fputs(r->out.c_str(), stdout);
    auto text = ReadFile(dir + "/report.json");
    if (!text.ok()) {
      std::fprintf(stderr, "sandcheck compare: %s wrote no report (exit %d): %s\n", t.c_str(),
                   r->exit_code, r->err.substr(0, 2000).c_str());
      rc = kExitTarget;
      continue;
    }
    auto j = ParseJsonText(*text, dir + "/report.json");
    if (!j.ok()) {
      rc = kExitTarget;
      continue;
    }
    reports.push_back(*j);
  }
  json comparison = BuildComparison(*spec, reports, *floor);
  comparison["command_lines"] = nullptr;
  if (cli_rounds > 0 && !Interrupted()) {
    // The reference's backends (those its warm-start rows measured) get a `sandboxctl run` row
    // each, when the first target is the reference runtime and sandboxctl is next to sandcheck.
    CommandLineOptions co;
    co.rounds = cli_rounds;
    std::string ours_target;
    bool reference_first = !targets.empty() && targets[0].rfind("reference", 0) == 0;
    if (!reports.empty()) ours_target = reports[0]["target"].value("name", "");
    std::string ctl = SelfDir() + "/sandboxctl";
    if (reference_first && !reports.empty() && ::access(ctl.c_str(), X_OK) == 0) {
      co.sandboxctl = ctl;
      if (std::string d = SelfDir() + "/sandboxd"; ::access(d.c_str(), X_OK) == 0) co.sandboxd = d;
      std::set<std::string> seen;
      for (const auto& m : reports[0]["measurements"]) {
        std::string b = m.value("backend", "");
        if (m.value("name", "") == "warm-start" && b != "native" && !b.empty() &&
            seen.insert(b).second)
          co.backends.push_back(b);
      }
    }
    co.progress = [](const std::string& line) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    };
    std::printf("\n== command lines: %d rounds\n", cli_rounds);
    std::fflush(stdout);
    comparison["command_lines"] =
        CommandLinesJson(MeasureCommandLines(co), cli_rounds, comparison, ours_target);
  }
  comparison["run_id"] = run_id;
  comparison["targets_asked"] = targets;
  comparison["host"] = reports.empty() ? json::object() : reports[0]["host"];
  std::string md = ComparisonMarkdown(comparison, comparison["host"], started);
  for (const auto& [file, content] : {std::pair<std::string, std::string>{"comparison.md", md},
                                      {"comparison.json", DumpJson(comparison)},
                                      {"comparison.html", ComparisonHtml(comparison, md)}}) {
    if (sbx::Status st = WriteFile(out_dir + "/" + file, content); !st.ok())
      return UsageError("compare", st.message(), kExitTarget);
  }
  std::printf("\n%s\nwritten: %s/comparison.md, comparison.json, comparison.html\n", md.c_str(),
              out_dir.c_str());
  return rc;
}

}  // namespace sandcheck
