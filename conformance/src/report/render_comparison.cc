// comparison.md and comparison.html of `sandcheck compare` (commands/cmd_nfr.cc), from the
// comparison's JSON alone: a table per latency target (every runtime against ours and the
// machine's floor), its CDFs, and the command-line table (render_command_lines.cc).
#include <fmt/format.h>

#include <ctime>
#include <string>
#include <vector>

#include "report/chart.h"
#include "report/render.h"

namespace sandcheck {

using nlohmann::json;

std::string ComparisonMarkdown(const json& c, const json& host, double when_unix) {
  std::time_t t = static_cast<std::time_t>(when_unix);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char date[40];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", &tm);
  const json& f = c["floor"];
  std::string out = fmt::format(
      "Measured {} on {} ({}, kernel {}, {} CPUs, {} MiB, cgroup {}). Harness clock; ratios are "
      "p50 ÷ p50 and p95 ÷ p95. \"Ours\" is the first target (the reference runtime) on its "
      "native backend. The floor is a bare fork+exec of /bin/true by the harness in the same run: "
      "p50 {}, p95 {} (n={}).\n\n",
      date, host.value("hostname", "?"), host.value("os", "?"), host.value("kernel", "?"),
      host.value("cpus", 0), host.value("memory_bytes", int64_t{0}) >> 20,
      host.value("cgroup", "?"), FormatSeconds(f["p50"]), FormatSeconds(f["p95"]),
      f.value("count", 0));
  for (const auto& tg : c["targets"]) {
    std::string limit =
        tg["limit_s"].is_number()
            ? fmt::format("{} target: p{:g} < {}", tg.value("requirement", ""),
                          tg.value("percentile", 95.0), FormatSeconds(tg["limit_s"]))
            : "no product limit (ratio gates only)";
    out += fmt::format("### {} — {}\n\n{}\n\n", tg.value("id", ""), tg.value("title", ""), limit);
    out +=
        "| runtime | backend | n | p50 | p95 | p50 ÷ ours | p95 ÷ ours | p50 ÷ floor | p95 ÷ "
        "floor | verdict |\n|---|---|---|---|---|---|---|---|---|---|\n";
    std::vector<std::string> skips;
    for (const auto& r : tg["rows"]) {
      if (r.contains("skip")) {
        skips.push_back(fmt::format("{} / {}: {}", r.value("target", ""), r.value("backend", ""),
                                    r.value("skip", "")));
        continue;
      }
      auto ratio = [&](const char* k) {
        return r[k].is_number() ? fmt::format("{:.2f}×", r[k].get<double>()) : std::string("-");
      };
      out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                         r.value("target", ""), r.value("backend", ""), r.value("count", 0),
                         FormatSeconds(r["p50"]), FormatSeconds(r["p95"]), ratio("p50_over_ours"),
                         ratio("p95_over_ours"), ratio("p50_over_floor"), ratio("p95_over_floor"),
                         r.value("verdict", "-"));
    }
    out +=
        fmt::format("| floor: fork+exec /bin/true | host | {} | {} | {} | | | 1.00× | 1.00× | |\n",
                    f.value("count", 0), FormatSeconds(f["p50"]), FormatSeconds(f["p95"]));
    if (!skips.empty()) {
      out += "\nNot measured:\n";
      for (const auto& s : skips) out += "- " + s + "\n";
    }
    out += "\n";
  }
  if (c.contains("command_lines")) out += CommandLinesMarkdown(c["command_lines"]);
  return out;
}

std::string ComparisonHtml(const json& c, const std::string& markdown) {
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>sandcheck "
      "compare</title><style>body{font-family:Helvetica,Arial,sans-serif;max-width:1040px;"
      "margin:24px auto;padding:0 16px}pre{white-space:pre-wrap;font-size:12px}</style></head>"
      "<body>\n<h1>Latency side by side</h1>\n";
  for (const auto& tg : c["targets"]) {
    std::vector<CdfSeries> series;
    for (const auto& r : tg["rows"]) {
      if (!r.contains("samples")) continue;
      series.push_back({r.value("target", "") + " / " + r.value("backend", ""),
                        r["samples"].get<std::vector<double>>()});
    }
    if (c["floor"]["samples"].is_array() && !c["floor"]["samples"].empty())
      series.push_back(
          {"floor: fork+exec /bin/true", c["floor"]["samples"].get<std::vector<double>>(), true});
    if (series.size() < 2) continue;
    double limit = tg["limit_s"].is_number() ? tg["limit_s"].get<double>() : 0;
    out += "<h2>" + XmlEscape(tg.value("id", "")) + "</h2>\n<figure>" +
           RenderCdfSvg(tg.value("id", "") + ": " + tg.value("title", ""), series, limit) +
           "</figure>\n";
  }
  if (c.contains("command_lines") && c["command_lines"].is_object()) {
    std::vector<CdfSeries> series;
    for (const auto& r : c["command_lines"]["rows"]) {
      if (r.contains("samples"))
        series.push_back({r.value("label", ""), r["samples"].get<std::vector<double>>(),
                          r.value("role", "") == "floor"});
    }
    if (series.size() >= 2)
      out +=
          "<h2>One command from the command line</h2>\n<figure>" +
          RenderCdfSvg("one command from the command line, and the runtime CLI floors", series, 0) +
          "</figure>\n";
  }
  out += "<h2>Table</h2>\n<pre>" + XmlEscape(markdown) + "</pre>\n</body></html>\n";
  return out;
}

}  // namespace sandcheck
