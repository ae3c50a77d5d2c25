// `sandcheck gate REPORT`: absolute gates on the product's latency limits and ratio gates
// against a baseline report (gate.h, docs/nfr.md). Exit 0 every gate passed, 1 a gate failed
// (or nothing could be gated), 2 bad usage or bad input.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "commands/cli.h"
#include "common/json_strict.h"
#include "gate/gate.h"
#include "report/render.h"
#include "scenario/nfr_spec.h"

namespace sandcheck {
namespace {

using nlohmann::json;

constexpr const char* kHelp =
    R"(usage: sandcheck gate REPORT.json [--nfr NAME|FILE] [--baseline REPORT.json]
                      [--tolerance 10%] [--statistic p50|p95|p99|mean] [--min-samples N]
                      [--noise DURATION] [--allow-other-host] [--junit OUT.xml]

Judges the measurements of a report:
  absolute gates  the product limits of the latency-target file (default: the built-in nfr):
                  the gated percentile of each target's samples, recomputed from the raw
                  samples, must be below its limit (NFR-1 warm start < 20 ms, ...)
  ratio gates     with --baseline: every measurement present in both reports must not have
                  grown by more than --tolerance (default 10%) in --statistic (default p50)
                  against the baseline, measured on the same machine (--allow-other-host to
                  compare across machines anyway); fewer than --min-samples (default 5) samples
                  on either side is a skip; --noise 1ms ignores growth below 1 ms

  --junit OUT     also write the gates as JUnit XML (one testcase per gate)
Exit codes: 0 every gate passed, 1 a gate failed or nothing could be gated,
2 bad usage or bad input (not a report, malformed samples, a baseline from another machine).
)";

// "1ms", "250us", "0.5s" or a bare number of seconds.
sbx::StatusOr<double> ParseDuration(const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  std::string unit = end ? end : "";
  double scale = unit == "" || unit == "s" ? 1 : unit == "ms" ? 1e-3 : unit == "us" ? 1e-6 : -1;
  if (end == text.c_str() || scale < 0 || !(v >= 0) || v > 3600)
    return sbx::InvalidArgument(fmt::format("'{}': a duration such as 1ms, 250us or 0.5s", text));
  return v * scale;
}

sbx::StatusOr<json> LoadReport(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseJsonText(text, path);
}

}  // namespace

int CmdGate(const std::vector<std::string>& args) {
  auto parsed = ParseArgs(args, {{"nfr"},
                                 {"baseline"},
                                 {"tolerance"},
                                 {"statistic"},
                                 {"min-samples"},
                                 {"noise"},
                                 {"allow-other-host", false},
                                 {"junit"}});
  if (!parsed.ok()) return UsageError("gate", parsed.status().message());
  const ParsedArgs& a = *parsed;
  if (a.help) {
    std::fputs(kHelp, stdout);
    return kExitPass;
  }
  if (a.positional.size() != 1) return UsageError("gate", "give exactly one REPORT.json");
  GateOptions o;
  if (a.Has("tolerance")) {
    if (!a.Has("baseline")) return UsageError("gate", "--tolerance needs --baseline");
    auto t = ParseTolerance(a.Get("tolerance"));
    if (!t.ok()) return UsageError("gate", t.status().message());
    o.tolerance = *t;
  }
  o.statistic = a.Get("statistic", "p50");
  if (auto st = Statistic({1.0}, o.statistic); !st.ok())
    return UsageError("gate", "--" + st.status().message());
  if (a.Has("min-samples")) {
    std::string v = a.Get("min-samples");
    char* end = nullptr;
    long n = std::strtol(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0' || n < 1 || n > 1000000)
      return UsageError("gate", fmt::format("--min-samples '{}': an integer >= 1", v));
    o.min_samples = static_cast<int>(n);
  }
  if (a.Has("noise")) {
    auto d = ParseDuration(a.Get("noise"));
    if (!d.ok()) return UsageError("gate", "--noise: " + d.status().message());
    o.min_delta_s = *d;
  }
  o.allow_other_host = a.Has("allow-other-host");
  auto spec = LoadNfrByName(a.Get("nfr", "nfr"), {}, nullptr);
  if (!spec.ok()) return UsageError("gate", spec.status().message());
  auto report = LoadReport(a.positional[0]);
  if (!report.ok()) return UsageError("gate", report.status().message());
  std::optional<json> baseline;
  if (a.Has("baseline")) {
    auto b = LoadReport(a.Get("baseline"));
    if (!b.ok()) return UsageError("gate", b.status().message());
    baseline = std::move(*b);
  }
  // A field of the wrong type deep in a report (nlohmann throws on it) is bad input, exit 2.
  sbx::StatusOr<GateReport> gates = sbx::InvalidArgument("not evaluated");
  std::string junit;
  try {
    gates = EvaluateGates(*report, *spec, baseline ? &*baseline : nullptr, o);
    if (gates.ok() && a.Has("junit")) junit = RenderGateJunit(*gates, *report);
  } catch (const json::exception& e) {
    return UsageError("gate", fmt::format("{}: a field has the wrong type (see "
                                          "docs/report.schema.json): {}",
                                          a.positional[0], e.what()));
  }
  if (!gates.ok()) return UsageError("gate", gates.status().message());
  std::printf("gate\toutcome\tvalue\tlimit\tdetail\n");
  for (const auto& g : gates->gates) {
    std::printf("%s\t%s\t%s\t%s\t%s\n", g.id.c_str(), g.outcome.c_str(),
                g.value >= 0 ? FormatSeconds(json(g.value)).c_str() : "-",
                g.limit >= 0 ? FormatSeconds(json(g.limit)).c_str() : "-",
                SanitizeUtf8(g.message).c_str());
  }
  for (const auto& n : gates->notes) std::printf("note: %s\n", n.c_str());
  int code = gates->ExitCode();
  std::printf("\ngate: %s (exit %d): %d evaluated, %d failed, %zu in all%s\n",
              code == 0 ? "pass" : "FAIL", code, gates->Evaluated(), gates->Failed(),
              gates->gates.size(),
              gates->Evaluated() == 0 ? " — nothing could be gated (no measurement this report "
                                        "shares with the limits or the baseline)"
                                      : "");
  std::fflush(stdout);
  if (a.Has("junit")) {
    if (sbx::Status st = WriteFile(a.Get("junit"), junit); !st.ok())
      return UsageError("gate", st.message(), kExitTarget);
  }
  return code;
}

}  // namespace sandcheck
