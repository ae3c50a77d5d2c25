// The latency parts of the reports: CDF figures per measurement (report.html) and the table of
// latency-target verdicts (report.md, report.html). From report.json alone.
#include <fmt/format.h>

#include <map>

#include "report/chart.h"
#include "report/render.h"

namespace sandcheck {

using nlohmann::json;

std::string RenderLatencyCdfs(const json& r) {
  // name → series (backend / clock), in report order; the floor joins every figure.
  std::vector<std::string> order;
  std::map<std::string, std::vector<CdfSeries>> by_name;
  std::map<std::string, double> limits;
  std::vector<double> floor;
  for (const auto& m : r["measurements"]) {
    if (!m.is_object() || !m.contains("samples") || !m["samples"].is_array()) continue;
    std::string name = m.value("name", "");
    std::vector<double> v;
    for (const auto& x : m["samples"]) {
      if (x.is_number()) v.push_back(x.get<double>());
    }
    if (v.size() < 2) continue;
    if (m.value("backend", "") == "host") {  // the machine's floor joins every figure
      if (name == "floor") floor = v;
      continue;
    }
    if (name.find(".stage.") != std::string::npos) continue;  // in the tables, not drawn
    std::string key = m.value("scenario", "") + "/" + name;
    if (!by_name.count(key)) order.push_back(key);
    by_name[key].push_back(
        {fmt::format("{} / {} clock", m.value("backend", ""), m.value("clock", "")), v});
  }
  for (const auto& c : r["checks"]) {
    if (c.value("kind", "") != "nfr_latency") continue;
    const json& ev = EvidenceOf(c);
    if (ev.contains("limit_s") && ev["limit_s"].is_number())
      limits[c.value("scenario", "") + "/" + ev.value("target", "")] = ev["limit_s"].get<double>();
  }
  std::string out;
  for (const auto& key : order) {
    std::vector<CdfSeries> series = by_name[key];
    if (!floor.empty()) series.push_back({"machine floor: fork+exec /bin/true", floor, true});
    double limit = limits.count(key) ? limits[key] : 0;
    out += "<figure>\n" + RenderCdfSvg(key, series, limit) + "</figure>\n";
  }
  return out;
}

std::string NfrMarkdownTable(const json& r) {
  std::string rows;
  for (const auto& c : r["checks"]) {
    if (c.value("kind", "") != "nfr_latency") continue;
    const json& ev = EvidenceOf(c);
    std::string reason = SanitizeUtf8(c.value("reason", ""));
    for (auto& ch : reason) {
      if (ch == '|' || ch == '\n') ch = ' ';
    }
    rows += fmt::format(
        "| `{}` | {} | {} | {} | {} | {} | p{} < {} | {} | {} |\n", ev.value("target", ""),
        ev.value("requirement", ""), ev.value("backend", ""), ev.value("count", 0),
        FormatSeconds(ev.value("p50_s", json())), FormatSeconds(ev.value("p95_s", json())),
        ev.value("percentile", 95.0), FormatSeconds(ev.value("limit_s", json())),
        c.value("outcome", ""), c.value("outcome", "") == "pass" ? "" : reason);
  }
  if (rows.empty()) return "";
  return "| target | requirement | backend | n | p50 | p95 | limit | outcome | reason |\n"
         "|---|---|---|---|---|---|---|---|---|\n" +
         rows;
}

}  // namespace sandcheck
