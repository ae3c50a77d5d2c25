// `sandcheck run --scenario load [--concurrency C] [--runs N]` (issue 17, docs/load.md): many
// one-shot runs at once against any target; 0 lost, 0 wrong, 0 leaked.
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "commands/cli.h"
#include "commands/run_common.h"
#include "common/json_strict.h"
#include "common/subprocess.h"
#include "report/render.h"
#include "report/report.h"
#include "run/load_runner.h"
#include "run/mirror_fixture.h"
#include "scenario/harness_values.h"

namespace sandcheck {
namespace {

using nlohmann::json;

sbx::StatusOr<int> IntArg(const ParsedArgs& a, const std::string& name, int def, int lo, int hi) {
  if (!a.Has(name)) return def;
  std::string text = a.Get(name);
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v < lo || v > hi)
    return sbx::InvalidArgument(
        fmt::format("--{} '{}': a whole number from {} to {}", name, text, lo, hi));
  return static_cast<int>(v);
}

}  // namespace

int CmdRunLoad(const std::vector<std::string>& args, const ParsedArgs& a) {
  if (!a.positional.empty()) return UsageError("run", "unexpected argument " + a.positional[0]);
  if (a.All("scenario").size() != 1)
    return UsageError("run", "the load scenario runs alone: give it as the only --scenario");
  for (const char* k : {"samples", "only", "repeat", "var"}) {
    if (a.Has(k))
      return UsageError("run", fmt::format("--{} does not apply to --scenario load", k));
  }
  if (a.Has("expectations") && a.Get("expectations") != "none")
    return UsageError(
        "run", "--expectations does not apply to --scenario load: nothing lost is not waivable");
  auto profile = ParseProfile(a.Get("profile", "default"));
  if (!profile.ok()) return UsageError("run", profile.status().message());
  auto runs = IntArg(a, "runs", 200, 1, 10000000);
  if (!runs.ok()) return UsageError("run", runs.status().message());
  auto conc = IntArg(a, "concurrency", 8, 1, 1024);
  if (!conc.ok()) return UsageError("run", conc.status().message());
  static const std::set<std::string> kTrust = {"", "first_party", "verified", "untrusted",
                                               "unverified"};
  if (!kTrust.count(a.Get("trust")))
    return UsageError("run",
                      fmt::format("--trust '{}': first_party, verified, untrusted or unverified",
                                  a.Get("trust")));
  std::string target_host = a.Get("target-host");
  if (!target_host.empty() && target_host != "local" && target_host != "remote")
    return UsageError("run", fmt::format("--target-host '{}': local or remote", target_host));

  auto parsed_topts = TargetOptionsFromArgs(a);
  if (!parsed_topts.ok()) return UsageError("run", parsed_topts.status().message());
  TargetOptions topts = *parsed_topts;
  topts.reference_warm_pool = true;  // one-shot runs through the pool, as sandboxd serves them
  auto target = MakeTarget(topts);
  if (!target.ok() && target.status().code() == sbx::Code::kInvalidArgument)
    return UsageError("run", target.status().message());

  RunContext ctx = StartRunContext(args, a, *profile, topts, target);
  bool default_out = false;
  auto report_dir = ReportDir(a, ctx.run_id, &default_out);
  if (!report_dir.ok()) return UsageError("run", report_dir.status().message(), kExitTarget);
  const std::string out_dir = *report_dir;
  InterruptOnSignals();

  LiveLog log(stdout, stderr, ::isatty(2) == 1);
  LoadResult result;
  if (!target.ok()) {
    ctx.errors.push_back(target.status().ToString());
  } else {
    log.Progress("asking the target for its info");
    auto info = (*target)->Info();
    if (!info.ok()) {
      ctx.errors.push_back("info failed: " + info.status().ToString());
    } else {
      ctx.info = *info;
      LoadOptions o;
      o.runs = *runs;
      o.concurrency = *conc;
      o.backend = ctx.backend;
      o.trust = a.Get("trust");
      o.profile = *profile;
      o.target_local = TargetIsLocal(topts.spec, target_host);
      result = RunLoad(**target, *info, o, ctx.run_id, log);
    }
  }
  log.ClearProgress();
  target = sbx::Internal("closed");  // the runtime (and its background work) ends here
  FinishRunContext(ctx);
  json report = BuildReport(ctx, {});
  report["checks"] = result.checks;
  report["measurements"] = result.measurements;
  report["load"] = result.load;
  for (const auto& e : result.errors) report["errors"].push_back(e);
  SummarizeChecks(report);
  if (int rc = WriteRunReports(report, out_dir, a.Has("tap"), default_out, ctx.run_id); rc != 0)
    return rc;
  PrintVerdictAndChecks(report, /*only_failed=*/false);
  PrintErrorsAndReports(report, out_dir, a.Has("tap"));
  return report["summary"]["exit_code"].get<int>();
}

}  // namespace sandcheck
