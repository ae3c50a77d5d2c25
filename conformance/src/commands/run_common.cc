#include "commands/run_common.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "commands/cli.h"
#include "common/clock.h"
#include "common/json_strict.h"
#include "common/subprocess.h"
#include "report/render.h"
#include "report/report.h"
#include "run/mirror_fixture.h"

namespace sandcheck {

namespace {
void OnSignal(int) { Interrupt(); }
}  // namespace

void InterruptOnSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

RunContext StartRunContext(const std::vector<std::string>& args, const ParsedArgs& a,
                           Profile profile, const TargetOptions& topts,
                           const sbx::StatusOr<std::unique_ptr<Target>>& target) {
  RunContext ctx;
  ctx.run_id = NewRunId();
  ctx.command_line = MaskedCommandLine(args);
  ctx.profile = profile;
  ctx.target_spec = topts.spec;
  ctx.target_driver = target.ok() ? (*target)->Kind() : "";
  ctx.backend = a.Get("backend");
  ctx.started_unix = NowUnix();
  ctx.load_start = ReadMachineLoad();
  return ctx;
}

void FinishRunContext(RunContext& ctx) {
  ctx.finished_unix = NowUnix();
  ctx.machine_load = DescribeMachineLoad(ctx.load_start, ReadMachineLoad());
}

using nlohmann::json;

sbx::StatusOr<TargetOptions> TargetOptionsFromArgs(const ParsedArgs& a) {
  TargetOptions topts;
  topts.spec = a.Get("target", "reference");
  const char* env_token = std::getenv("SANDCHECK_TOKEN");
  topts.token = a.Get("token", env_token ? env_token : "");
  const char* env_second = std::getenv("SANDCHECK_SECOND_TOKEN");
  topts.second_token = a.Get("second-token", env_second ? env_second : "");
  std::string timeout_text = a.Get("adapter-timeout", "30");
  char* end = nullptr;
  topts.call_timeout_s = std::strtod(timeout_text.c_str(), &end);
  if (end == timeout_text.c_str() || *end != '\0' || topts.call_timeout_s <= 0 ||
      topts.call_timeout_s > 3600) {
    return sbx::InvalidArgument(
        fmt::format("--adapter-timeout '{}': seconds, > 0 and <= 3600", timeout_text));
  }
  if (std::string tools = SelfDir() + "/../tools"; ::access(tools.c_str(), X_OK) == 0)
    topts.tools_dir = tools;
  return topts;
}

sbx::StatusOr<std::string> ReportDir(const ParsedArgs& a, const std::string& run_id,
                                     bool* default_out) {
  *default_out = !a.Has("out");
  std::string out_dir = *default_out ? "reports/runs/" + run_id : a.Get("out");
  if (sbx::Status st = MakeDirs(out_dir); !st.ok())
    return sbx::InvalidArgument(
        fmt::format("cannot create the report directory: {}", st.message()));
  return out_dir;
}

int WriteRunReports(const json& report, const std::string& out_dir, bool tap, bool default_out,
                    const std::string& run_id) {
  if (sbx::Status st = WriteFile(out_dir + "/report.json", DumpJson(report)); !st.ok())
    return UsageError("run", st.message(), kExitTarget);
  if (sbx::Status st = WriteRenderedReports(report, out_dir, tap); !st.ok())
    return UsageError("run", st.message(), kExitTarget);
  if (default_out) {
    std::string link = "reports/runs/latest";
    ::unlink(link.c_str());
    if (::symlink(run_id.c_str(), link.c_str()) != 0) {
      std::fprintf(stderr, "sandcheck run: cannot point %s at the run: %s\n", link.c_str(),
                   std::strerror(errno));
    }
  }
  return kExitPass;
}

void PrintVerdictAndChecks(const json& report, bool only_failed) {
  const json& s = report["summary"];
  std::printf("\nverdict: %s (exit %d): %d checks: %d pass, %d fail, %d skip, %d error\n",
              s["verdict"].get<std::string>().c_str(), s["exit_code"].get<int>(),
              s["checks"].get<int>(), s["pass"].get<int>(), s["fail"].get<int>(),
              s["skip"].get<int>(), s["error"].get<int>());
  for (const auto& c : report["checks"]) {
    if (only_failed && c["outcome"] == "pass") continue;
    std::printf("  %s %s: %s\n", c["id"].get<std::string>().c_str(),
                c["outcome"].get<std::string>().c_str(),
                SanitizeUtf8(c["reason"].get<std::string>()).c_str());
  }
}

void PrintErrorsAndReports(const json& report, const std::string& out_dir, bool tap) {
  for (const auto& e : report["errors"])
    std::printf("error: %s\n", SanitizeUtf8(e.get<std::string>()).c_str());
  std::printf("reports:\n");
  for (const char* f : {"report.json", "junit.xml", "report.md", "report.html"}) {
    std::printf("  %s/%s\n", out_dir.c_str(), f);
  }
  if (tap) std::printf("  %s/report.tap\n", out_dir.c_str());
  std::fflush(stdout);
}

}  // namespace sandcheck
