// report.html: one self-contained page (inline CSS and SVG, no script, no external resource).
#include <fmt/format.h>

#include <ctime>

#include "report/render.h"

namespace sandcheck {
namespace {

using nlohmann::json;

constexpr const char* kCss = R"css(
body{font-family:Helvetica,Arial,sans-serif;color:#111827;margin:24px auto;max-width:1040px;padding:0 16px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #e5e7eb}
table{border-collapse:collapse;width:100%;font-size:13px;margin:8px 0}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #e5e7eb;vertical-align:top}
th{color:#6b7280;font-weight:normal;text-transform:uppercase;font-size:11px;letter-spacing:1px}
code,pre{font-family:monospace;font-size:12px} pre{background:#f9fafb;padding:8px;overflow-x:auto;white-space:pre-wrap}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-weight:bold;font-size:12px;color:#fff}
.pass{background:#15803d}.fail,.xpass{background:#be123c}.flaky{background:#c2410c}.skip{background:#6b7280}.xfail{background:#b45309}
.error{background:#7c3aed}.verdict{font-size:16px;padding:3px 12px}
.meta td:first-child{color:#6b7280;width:180px} figure{margin:12px 0;overflow-x:auto}
details{margin:4px 0} summary{cursor:pointer}
)css";

std::string E(const std::string& s) { return XmlEscape(s); }
std::string E(const json& j) {
  return XmlEscape(j.is_string() ? j.get<std::string>()
                                 : j.dump(-1, ' ', false, json::error_handler_t::replace));
}

std::string Badge(const std::string& outcome, const std::string& extra = "") {
  return fmt::format("<span class=\"badge {} {}\">{}</span>", E(outcome), extra, E(outcome));
}

std::string When(double unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string StepsTable(const json& task) {
  std::string rows;
  for (const auto& s : task.value("steps", json::array())) {
    std::string result;
    if (s.contains("error")) {
      result = "error: " + E(s["error"]);
    } else if (s.contains("command")) {
      result = fmt::format("status {} · exit {}<br><code>{}</code><pre>{}{}</pre>",
                           E(s.value("status", "")), E(s.value("exit", json())),
                           E(s.value("command", "")), E(s.value("stdout_tail", "")),
                           E(s.value("stderr_tail", "")));
    } else {
      result = "target reported " + FormatSeconds(s.value("reported_seconds", json()));
    }
    rows += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                        E(s.value("phase", "")), E(s.value("state", "-")),
                        FormatSeconds(s.value("wall_seconds", json())), result);
  }
  return "<table><tr><th>phase</th><th>state</th><th>seconds</th><th>result</th></tr>\n" + rows +
         "</table>\n";
}

}  // namespace

std::string RenderHtml(const json& r) {
  const json& target = r["target"];
  const json& sum = r["summary"];
  const json& host = r["host"];
  std::string verdict = sum.value("verdict", "error");
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  out += fmt::format("<title>sandcheck: {} — {}</title>\n<style>{}</style></head><body>\n",
                     E(target.value("name", "")), E(verdict), kCss);
  out += fmt::format("<h1>sandcheck report: {} {}</h1>\n", E(target.value("name", "")),
                     E(target.value("version", "")));
  out += fmt::format(
      "<p>{} exit code {} · {} checks: {} pass, {} fail, {} skip, {} xfail, {} xpass, {} "
      "error{}</p>\n",
      Badge(verdict == "pass"   ? "pass"
            : verdict == "fail" ? "fail"
                                : "error",
            "verdict"),
      sum.value("exit_code", 3), sum.value("checks", 0), sum.value("pass", 0), sum.value("fail", 0),
      sum.value("skip", 0), sum.value("xfail", 0), sum.value("xpass", 0), sum.value("error", 0),
      E(RepeatSummary(r)));
  out += "<table class=\"meta\">\n";
  auto meta = [&](const std::string& k, const std::string& v) {
    out += fmt::format("<tr><td>{}</td><td>{}</td></tr>\n", E(k), v);
  };
  meta("target", fmt::format("<code>{}</code> ({} driver)", E(target.value("spec", "")),
                             E(target.value("driver", ""))));
  std::string features;
  for (const auto& f : target.value("features", json::array()))
    features += (features.empty() ? "" : ", ") + E(f);
  meta("features", features.empty() ? "none" : features);
  std::string backends;
  for (const auto& b : target.value("backends", json::array()))
    backends += (backends.empty() ? "" : ", ") + E(b);
  const json requested = target.value("backend_requested", json());
  if (requested.is_string() && !requested.get<std::string>().empty()) {
    backends += fmt::format(" (requested: <b>{}</b>)", E(requested));
  }
  meta("backends", backends.empty() ? "-" : backends);
  meta("profile", E(r.value("profile", "")));
  meta("run",
       fmt::format("{} · {} · {}", E(r.value("run_id", "")), When(r.value("started_unix", 0.0)),
                   FormatSeconds(r.value("seconds", json()))));
  meta("host",
       fmt::format("{} · {} · kernel {} · {} CPUs · {} MiB · cgroup {}",
                   E(host.value("hostname", "")), E(host.value("os", "")),
                   E(host.value("kernel", "")), host.value("cpus", 0),
                   host.value("memory_bytes", int64_t{0}) >> 20, E(host.value("cgroup", ""))));
  if (r.contains("expectations") && r["expectations"].is_object()) {
    meta("expectations",
         fmt::format("<code>{}</code> ({} entries{})", E(r["expectations"].value("file", "")),
                     r["expectations"].value("count", 0),
                     r["expectations"].value("applied", true) ? "" : ", ignored by the profile"));
  }
  out += "</table>\n";
  if (!r["errors"].empty()) {
    out += "<h2>Errors (target or environment)</h2><ul>\n";
    for (const auto& e : r["errors"]) out += "<li>" + E(e) + "</li>\n";
    out += "</ul>\n";
  }
  for (const auto& s : r["scenarios"]) {
    out += fmt::format("<h2>{}: {}</h2>\n", E(s.value("name", "")), E(s.value("title", "")));
    if (const json b = s.value("backend", json()); b.is_string() && !b.get<std::string>().empty()) {
      out += fmt::format("<p>Ran on the <b>{}</b> backend.</p>\n", E(b));
    }
    if (!s.value("skip_reason", "").empty()) out += "<p>Skipped: " + E(s["skip_reason"]) + "</p>\n";
    if (!s.value("abort_error", "").empty()) out += "<p>Stopped: " + E(s["abort_error"]) + "</p>\n";
    out += "<figure>\n" + RenderTaskFigureSvg(r, s) + "</figure>\n";
    for (const auto& t : s["tasks"]) {
      out += fmt::format("<details><summary>{} — <code>{}</code></summary>\n{}</details>\n",
                         E(t.value("label", "")), E(t.value("command", "")), StepsTable(t));
    }
  }
  out +=
      "<h2>Checks</h2>\n<table><tr><th>check</th><th>requirements</th><th>level</th><th>outcome</"
      "th><th>reason</th></tr>\n";
  for (const auto& c : r["checks"]) {
    std::string reqs;
    for (const auto& q : c["requirements"]) reqs += (reqs.empty() ? "" : " ") + E(q);
    out += fmt::format(
        "<tr><td><code>{}</code><br>{}</td><td>{}</td><td>{}</td><td>{}{}{}</td><td>{}"
        "<details><summary>evidence</summary><pre>{}</pre></details></td></tr>\n",
        E(c["id"]), E(c.value("title", "")), reqs, E(c["level"]), Badge(c["outcome"]),
        E(RepeatTally(c)), c.value("blocking", false) ? " <b>blocking</b>" : "", E(c["reason"]),
        E(c.value("evidence", json::object()).dump(2, ' ', false, json::error_handler_t::replace)));
  }
  out += "</table>\n";
  if (!r["measurements"].empty()) {
    out +=
        "<h2>Measurements</h2>\n<table><tr><th>measurement</th><th>backend</th><th>clock</th>"
        "<th>n</th><th>p50</th><th>p95</th><th>p99</th><th>max</th></tr>\n";
    for (const auto& m : r["measurements"]) {
      out += fmt::format(
          "<tr><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
          "<td>{}</td></tr>\n",
          E(m.value("scenario", "")), E(m.value("name", "")), E(m.value("backend", "-")),
          E(m.value("clock", "")), m.value("count", 0), FormatSeconds(m.value("p50", json())),
          FormatSeconds(m.value("p95", json())), FormatSeconds(m.value("p99", json())),
          FormatSeconds(m.value("max", json())));
    }
    out += "</table>\n";
  }
  if (std::string nfr = NfrMarkdownTable(r); !nfr.empty()) {
    out +=
        "<h2>Latency targets</h2>\n<table><tr><th>target</th><th>requirement</th><th>backend"
        "</th><th>n</th><th>p50</th><th>p95</th><th>limit</th><th>outcome</th></tr>\n";
    for (const auto& c : r["checks"]) {
      if (c.value("kind", "") != "nfr_latency") continue;
      const json& ev = EvidenceOf(c);
      out += fmt::format(
          "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
          "<td>p{} &lt; {}</td><td>{}</td></tr>\n",
          E(ev.value("target", "")), E(ev.value("requirement", "")), E(ev.value("backend", "")),
          ev.value("count", 0), FormatSeconds(ev.value("p50_s", json())),
          FormatSeconds(ev.value("p95_s", json())), ev.value("percentile", 95.0),
          FormatSeconds(ev.value("limit_s", json())), Badge(c["outcome"]));
    }
    out += "</table>\n";
  }
  if (std::string cdfs = RenderLatencyCdfs(r); !cdfs.empty()) {
    out +=
        "<h2>Latency CDFs</h2>\n<p>Fraction of samples at or below each latency, per backend "
        "and clock (harness: measured by sandcheck around the call; target: what the target "
        "reported).</p>\n" +
        cdfs;
  }
  out += fmt::format(
      "<p style=\"color:#6b7280;font-size:12px\">Rendered from report.json (schema {}) by "
      "sandcheck {}.</p>\n",
      E(r.value("schema", "")), E(r.value("sandcheck_version", "")));
  out += "</body></html>\n";
  return out;
}

}  // namespace sandcheck
