// The command-line table of comparison.md (run/command_lines.h builds its JSON).
#include <fmt/format.h>

#include "report/render.h"

namespace sandcheck {

using nlohmann::json;

namespace {
std::string Ms(double s) {
  return s >= 1 ? fmt::format("{:.2f} s", s) : fmt::format("{:.1f} ms", s * 1e3);
}
std::string X(const json& v) {
  return v.is_number() ? fmt::format("{:.2f}×", v.get<double>()) : std::string();
}
}  // namespace

std::string CommandLinesMarkdown(const json& c) {
  if (!c.is_object()) return "";
  std::string out = fmt::format(
      "### One command from the command line, and the runtime CLI floors\n\n"
      "{} rounds, every row once per round in a rotating order; harness clock from fork() to "
      "waitpid(). `runtime-exec` rows are a bare runtime CLI exec into a container the harness "
      "started (busybox rootfs, no network, no cgroups): what a container backend pays per "
      "command if it runs the runtime CLI.\n\n"
      "| command | role | n | p50 | p95 | p50 ÷ bwrap | p50 ÷ runsc do | p50 ÷ fork+exec |\n"
      "|---|---|---|---|---|---|---|---|\n",
      c.value("rounds", 0));
  std::vector<std::string> skips;
  for (const auto& r : c["rows"]) {
    if (r.contains("skip")) {
      skips.push_back(fmt::format("`{}`: {}", r.value("label", ""), r.value("skip", "")));
      continue;
    }
    out += fmt::format("| `{}` | {} | {} | {} | {} | {} | {} | {} |\n", r.value("label", ""),
                       r.value("role", ""), r.value("count", 0), Ms(r["p50"]), Ms(r["p95"]),
                       X(r["p50_over_bwrap"]), X(r["p50_over_runsc_do"]), X(r["p50_over_floor"]));
  }
  if (!skips.empty()) {
    out += "\nNot measured:\n";
    for (const auto& s : skips) out += "- " + s + "\n";
  }
  if (!c["warm_vs_runtime_cli"].empty()) {
    out +=
        "\nWarm exec (NFR-1 warm-start, ours) against the runtime CLI it replaces:\n\n"
        "| backend | warm exec p50 / p95 | runtime CLI | its p50 / p95 | p50 ratio | p95 ratio |\n"
        "|---|---|---|---|---|---|\n";
    for (const auto& w : c["warm_vs_runtime_cli"])
      out += fmt::format("| {} | {} / {} | `{}` | {} / {} | {} | {} |\n", w.value("backend", ""),
                         Ms(w["warm_p50"]), Ms(w["warm_p95"]), w.value("cli", ""), Ms(w["cli_p50"]),
                         Ms(w["cli_p95"]), X(w["p50_ratio"]), X(w["p95_ratio"]));
  }
  if (!c["goals"].empty()) {
    out += "\nGoals (issue 16):\n\n";
    for (const auto& g : c["goals"])
      out += fmt::format("- {}: {} — {}\n", g.value("goal", ""), X(g["ratio"]),
                         g.value("met", false) ? "met" : "**not met**");
  }
  return out + "\n";
}

}  // namespace sandcheck
