// report.md: the same content as the HTML page, as GitHub-flavoured Markdown tables.
#include <fmt/format.h>

#include "host/machine_load.h"
#include "report/render.h"

namespace sandcheck {
namespace {

using nlohmann::json;

// A table cell: one line, pipes escaped.
std::string Cell(const std::string& s) {
  std::string out;
  for (char c : SanitizeUtf8(s)) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n' || c == '\r' || c == '\t')
      out += ' ';
    else
      out.push_back(c);
  }
  return out;
}
std::string Cell(const json& j) { return Cell(j.is_string() ? j.get<std::string>() : j.dump()); }

}  // namespace

std::string RenderMarkdown(const json& r) {
  const json& target = r["target"];
  const json& sum = r["summary"];
  std::string out = fmt::format("# sandcheck report: {} {}\n\n", Cell(target.value("name", "")),
                                Cell(target.value("version", "")));
  out += fmt::format(
      "**Verdict: {}** (exit code {}) · {} checks: {} pass, {} fail, {} skip, {} xfail, {} xpass, "
      "{} error{} · profile `{}` · run `{}`\n\n",
      Cell(sum.value("verdict", "error")), sum.value("exit_code", 3), sum.value("checks", 0),
      sum.value("pass", 0), sum.value("fail", 0), sum.value("skip", 0), sum.value("xfail", 0),
      sum.value("xpass", 0), sum.value("error", 0), Cell(RepeatSummary(r)),
      Cell(r.value("profile", "")), Cell(r.value("run_id", "")));
  std::string features;
  for (const auto& f : target.value("features", json::array()))
    features += (features.empty() ? "" : ", ") + Cell(f);
  const json& host = r["host"];
  out += fmt::format("- target: `{}` ({} driver); features: {}\n", Cell(target.value("spec", "")),
                     Cell(target.value("driver", "")), features.empty() ? "none" : features);
  std::string backends;
  for (const auto& b : target.value("backends", json::array()))
    backends += (backends.empty() ? "" : ", ") + Cell(b);
  if (const json req = target.value("backend_requested", json());
      req.is_string() && !req.get<std::string>().empty()) {
    backends += fmt::format(" (requested: **{}**)", Cell(req));
  }
  if (!backends.empty()) out += fmt::format("- backends: {}\n", backends);
  out += fmt::format("- host: {} · {} · kernel {} · {} CPUs · cgroup {}\n",
                     Cell(host.value("hostname", "")), Cell(host.value("os", "")),
                     Cell(host.value("kernel", "")), host.value("cpus", 0),
                     Cell(host.value("cgroup", "")));
  if (std::string load = MachineLoadLine(r.value("machine_load", json())); !load.empty())
    out += fmt::format("- machine during the run: {}\n", load);
  out += "\n";
  if (!r["errors"].empty()) {
    out += "## Errors (target or environment)\n\n";
    for (const auto& e : r["errors"]) out += "- " + Cell(e) + "\n";
    out += "\n";
  }
  for (const auto& s : r["scenarios"]) {
    out += fmt::format("## {}: {}\n\n", Cell(s.value("name", "")), Cell(s.value("title", "")));
    if (const json b = s.value("backend", json()); b.is_string() && !b.get<std::string>().empty()) {
      out += fmt::format("Ran on the **{}** backend.\n\n", Cell(b));
    }
    if (!s.value("skip_reason", "").empty()) out += "Skipped: " + Cell(s["skip_reason"]) + "\n\n";
    out +=
        "| the command tries | what it gets | revert | files in /work | check "
        "|\n|---|---|---|---|---|\n";
    for (const auto& t : s["tasks"]) {
      const json* c = CheckForTask(r, s.value("name", ""), t.value("id", ""));
      bool refused = t.value("refused", false);
      json files = t.value("files_after", json());
      out += fmt::format("| {} | {}{}{} | {} | {} | {} |\n", Cell(t.value("tries", "")),
                         refused ? "**" : "", Cell(t.value("got", "")), refused ? "**" : "",
                         FormatSeconds(t["timings"].value("revert_seconds", json())),
                         files.is_number() ? files.dump() : "-",
                         c ? Cell(c->value("outcome", "")) : "");
    }
    out += "\nBold: the command was refused or failed.\n\n";
  }
  out +=
      "## Checks\n\n| check | requirements | level | outcome | reason |\n|---|---|---|---|---|\n";
  for (const auto& c : r["checks"]) {
    std::string reqs;
    for (const auto& q : c["requirements"]) reqs += (reqs.empty() ? "" : ", ") + Cell(q);
    out += fmt::format("| `{}` | {} | {} | {}{}{} | {} |\n", Cell(c["id"]), reqs, Cell(c["level"]),
                       Cell(c["outcome"]), Cell(RepeatTally(c)),
                       c.value("blocking", false) ? " (blocking)" : "", Cell(c["reason"]));
  }
  if (!r["measurements"].empty()) {
    out +=
        "\n## Measurements\n\n| measurement | backend | clock | n | p50 | p95 | p99 | max "
        "|\n|---|---|---|---|---|---|---|---|\n";
    for (const auto& m : r["measurements"]) {
      out += fmt::format(
          "| {}/{} | {} | {} | {} | {} | {} | {} | {} |\n", Cell(m.value("scenario", "")),
          Cell(m.value("name", "")), Cell(m.value("backend", "-")), Cell(m.value("clock", "")),
          m.value("count", 0), FormatSeconds(m.value("p50", json())),
          FormatSeconds(m.value("p95", json())), FormatSeconds(m.value("p99", json())),
          FormatSeconds(m.value("max", json())));
    }
  }
  if (std::string nfr = NfrMarkdownTable(r); !nfr.empty()) out += "\n## Latency targets\n\n" + nfr;
  out += "\nRendered from report.json.\n";
  return out;
}

}  // namespace sandcheck
