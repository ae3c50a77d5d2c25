#include "gate/gate.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <map>
#include <numeric>
#include <tuple>

#include "common/json_strict.h"
#include "common/stats.h"
#include "host/machine_load.h"
#include "report/render.h"

namespace sandcheck {
namespace {

using nlohmann::json;

using Key = std::tuple<std::string, std::string, std::string, std::string, std::string>;

Key KeyOf(const json& m) {
  return {m["name"].get<std::string>(), m["scenario"].get<std::string>(),
          m["target"].get<std::string>(), m["backend"].get<std::string>(),
          m["clock"].get<std::string>()};
}

std::vector<double> SamplesOf(const json& m) { return m["samples"].get<std::vector<double>>(); }

std::string Ms(double s) { return FormatSeconds(json(s)); }

// The report's checks about one latency target (by evidence.target), keyed by backend label.
std::vector<const json*> ChecksFor(const json& report, const std::string& target_id) {
  std::vector<const json*> out;
  for (const auto& c : report["checks"]) {
    if (c.contains("evidence") && c["evidence"].is_object() &&
        c["evidence"].value("target", "") == target_id && c.value("kind", "") == "nfr_latency") {
      out.push_back(&c);
    }
  }
  return out;
}

}  // namespace

int GateReport::Failed() const {
  int n = 0;
  for (const auto& g : gates) n += g.outcome == "fail";
  return n;
}

int GateReport::Evaluated() const {
  int n = 0;
  for (const auto& g : gates) n += g.outcome == "fail" || g.outcome == "pass";
  return n;
}

int GateReport::ExitCode() const { return Failed() > 0 || Evaluated() == 0 ? 1 : 0; }

sbx::StatusOr<double> ParseTolerance(const std::string& text) {
  std::string t = text;
  bool percent = !t.empty() && t.back() == '%';
  if (percent) t.pop_back();
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !std::isfinite(v) || v < 0) {
    return sbx::InvalidArgument(
        fmt::format("--tolerance '{}': a percentage (10%) or a fraction (0.10)", text));
  }
  if (percent) return v / 100.0;
  if (v >= 1) {
    return sbx::InvalidArgument(fmt::format(
        "--tolerance '{}': a bare number is a fraction below 1; write {}% for a percentage", text,
        t));
  }
  return v;
}

sbx::StatusOr<double> Statistic(const std::vector<double>& samples, const std::string& name) {
  if (samples.empty()) return sbx::InvalidArgument("no samples");
  if (name == "mean")
    return std::accumulate(samples.begin(), samples.end(), 0.0) /
           static_cast<double>(samples.size());
  if (name.size() > 1 && name[0] == 'p') {
    char* end = nullptr;
    double q = std::strtod(name.c_str() + 1, &end);
    if (*end == '\0' && q > 0 && q <= 100) return Percentile(samples, q);
  }
  return sbx::InvalidArgument(fmt::format("statistic '{}': p50, p95, p99 or mean", name));
}

sbx::Status ValidateGateInput(const json& r, const std::string& what) {
  if (sbx::Status st = CheckReportShape(r); !st.ok()) {
    std::string_view msg = st.message();
    if (msg.starts_with("report: ")) msg.remove_prefix(8);  // "baseline: 'schema' missing"
    return sbx::InvalidArgument(fmt::format("{}: {}", what, msg));
  }
  for (size_t i = 0; i < r["measurements"].size(); ++i) {
    const json& m = r["measurements"][i];
    std::string w = fmt::format("{}: measurements[{}]", what, i);
    if (!m.is_object()) return sbx::InvalidArgument(w + ": not an object");
    for (const char* k : {"name", "scenario", "target", "backend", "clock"}) {
      if (!m.contains(k) || !m[k].is_string())
        return sbx::InvalidArgument(fmt::format("{}.{}: a string is needed", w, k));
    }
    if (!m.contains("samples") || !m["samples"].is_array())
      return sbx::InvalidArgument(w + ".samples: an array of numbers is needed");
    for (const auto& v : m["samples"]) {
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
        return sbx::InvalidArgument(w + ".samples: holds something that is not a time (s >= 0)");
    }
    if (!m.contains("count") || !m["count"].is_number_integer() ||
        m["count"].get<size_t>() != m["samples"].size()) {
      return sbx::InvalidArgument(w + ".count: does not match the number of samples");
    }
  }
  return sbx::Status::Ok();
}

sbx::StatusOr<GateReport> EvaluateGates(const json& report, const NfrSpec& spec,
                                        const json* baseline, const GateOptions& o) {
  RETURN_IF_ERROR(ValidateGateInput(report, "report"));
  if (baseline) RETURN_IF_ERROR(ValidateGateInput(*baseline, "baseline"));
  RETURN_IF_ERROR(Statistic({1.0}, o.statistic).status());
  if (o.tolerance < 0) return sbx::InvalidArgument("tolerance must be >= 0");
  GateReport out;

  // What the machine was like during the run: context for every absolute figure (a breach on
  // a machine that was busy with something else reads differently from one on a quiet machine).
  for (const auto& m : report["measurements"]) {
    if (m["backend"] != "host" || m["clock"] != "harness") continue;
    std::vector<double> v = SamplesOf(m);
    if (v.empty()) continue;
    out.notes.push_back(fmt::format("machine floor in this run ({}): p50 {}, p95 {} (n={})",
                                    m["name"].get<std::string>(), Ms(Percentile(v, 50)),
                                    Ms(Percentile(v, 95)), v.size()));
  }
  if (std::string load = MachineLoadLine(report.value("machine_load", json())); !load.empty())
    out.notes.push_back("machine during the run: " + load);

  // Absolute gates: product limits.
  for (const NfrTarget& t : spec.targets) {
    if (!t.limited) continue;
    bool any = false;
    for (const auto& m : report["measurements"]) {
      if (m["name"] != t.id || m["clock"] != t.clock) continue;
      any = true;
      GateResult g;
      g.kind = "absolute";
      g.requirement = t.requirement;
      std::string backend = m["backend"];
      g.id = fmt::format("absolute:{}", NfrCheckId(spec, t, t.RuntimeWide() ? "" : backend));
      std::vector<double> v = SamplesOf(m);
      g.count = v.size();
      g.limit = t.limit_s;
      // A run that broke off (a failed command, a driver error) leaves samples that prove
      // nothing: the report's own verdict without a latency value says so.
      const json* broken = nullptr;
      size_t asked = 0;  // the samples the run set out to take (its check's evidence)
      for (const json* c : ChecksFor(report, t.id)) {
        const json& ev = (*c)["evidence"];
        if (ev.value("backend", "") != backend) continue;
        std::string raw = c->value("raw_outcome", c->value("outcome", ""));
        if ((raw == "fail" || raw == "error") && !ev.contains("value_s")) broken = c;
        if (ev.contains("samples_asked") && ev["samples_asked"].is_number_integer() &&
            ev["samples_asked"].get<int64_t>() > 0) {
          asked = static_cast<size_t>(ev["samples_asked"].get<int64_t>());
        }
      }
      if (broken) {
        g.outcome = "fail";
        g.message = fmt::format("{} {} on {}: the run could not measure it: {}", t.requirement,
                                t.id, backend, broken->value("reason", ""));
      } else if (v.empty()) {
        g.outcome = "fail";
        g.message = fmt::format("{} {} on {}: no samples: nothing shows the limit holds",
                                t.requirement, t.id, backend);
      } else if (v.size() < asked) {
        g.outcome = "fail";
        g.message = fmt::format("{} {} on {}: only {} of the {} samples the run set out to take",
                                t.requirement, t.id, backend, v.size(), asked);
      } else {
        g.value = Percentile(v, t.percentile);
        bool ok = g.value < t.limit_s;
        g.outcome = ok ? "pass" : "fail";
        g.message = fmt::format("{} {} on {}: p{:g} {} {} {} ({} clock, n={})", t.requirement, t.id,
                                backend, t.percentile, Ms(g.value), ok ? "<" : "is not below",
                                Ms(t.limit_s), t.clock, v.size());
      }
      out.gates.push_back(std::move(g));
    }
    // Backends the report has a verdict for but no samples: skipped, failed or errored.
    for (const json* c : ChecksFor(report, t.id)) {
      std::string backend = (*c)["evidence"].value("backend", "");
      bool measured = false;
      for (const auto& m : report["measurements"]) {
        measured =
            measured || (m["name"] == t.id && m["clock"] == t.clock && m["backend"] == backend);
      }
      if (measured) continue;
      any = true;
      GateResult g;
      g.kind = "absolute";
      g.requirement = t.requirement;
      g.id = fmt::format("absolute:{}", (*c)["id"].get<std::string>());
      g.limit = t.limit_s;
      std::string outcome = c->value("raw_outcome", c->value("outcome", ""));
      // --profile certify: "a skip is a failure" (docs/sandcheck.md); the gate keeps that.
      const bool certify = report.value("profile", json("")) == json("certify");
      if (outcome == "skip" && certify) {
        g.outcome = "fail";
        g.message = fmt::format("{} {} on {}: not measured, and a certify run accepts no skip: {}",
                                t.requirement, t.id, backend, c->value("reason", ""));
      } else if (outcome == "skip") {
        g.outcome = "skip";
        g.message = fmt::format("{} {} on {}: not measured: {}", t.requirement, t.id, backend,
                                c->value("reason", ""));
      } else {
        g.outcome = "fail";
        g.message = fmt::format("{} {} on {}: the run could not measure it ({}): {}", t.requirement,
                                t.id, backend, outcome, c->value("reason", ""));
      }
      out.gates.push_back(std::move(g));
    }
    if (!any) {
      GateResult g;
      g.kind = "absolute";
      g.requirement = t.requirement;
      g.id = fmt::format("absolute:{}/{}", spec.name, t.id);
      g.limit = t.limit_s;
      g.outcome = "skip";
      g.message = fmt::format("{} {}: not in this report", t.requirement, t.id);
      out.gates.push_back(std::move(g));
    }
  }

  // A run whose target or environment failed proves nothing about what it did not measure
  // (e.g. a backend whose cold start broke off has no check of its own): fail on it.
  if (report.contains("errors") && report["errors"].is_array() && !report["errors"].empty()) {
    GateResult g;
    g.kind = "absolute";
    g.id = "absolute:report-errors";
    g.outcome = "fail";
    std::vector<std::string> errs;
    for (const auto& e : report["errors"])
      errs.push_back(e.is_string() ? e.get<std::string>() : e.dump());
    g.message = fmt::format("the run reported {} error(s) of the target or environment: {}",
                            errs.size(), Join(errs, "; "));
    out.gates.push_back(std::move(g));
  }

  // Ratio gates: regressions against a baseline from the same machine.
  if (baseline) {
    const json& h = report["host"];
    const json& bh = (*baseline)["host"];
    std::vector<std::string> diffs;
    for (const char* k : {"hostname", "machine", "cpus", "kernel"}) {
      if (h.value(k, json()) != bh.value(k, json()))
        diffs.push_back(
            fmt::format("{} {} vs {}", k, bh.value(k, json()).dump(), h.value(k, json()).dump()));
    }
    if (!diffs.empty()) {
      std::string msg =
          fmt::format("the baseline was measured on another machine ({})", Join(diffs, ", "));
      if (!o.allow_other_host)
        return sbx::InvalidArgument(msg +
                                    "; ratio gates compare runs of the same machine "
                                    "(--allow-other-host to compare anyway)");
      out.notes.push_back(msg);
    }
    std::map<Key, const json*> base;
    for (const auto& m : (*baseline)["measurements"]) base[KeyOf(m)] = &m;
    std::map<Key, bool> seen;
    for (const auto& m : report["measurements"]) {
      Key k = KeyOf(m);
      seen[k] = true;
      const auto& [name, scenario, target, backend, clock] = k;
      GateResult g;
      g.kind = "ratio";
      g.id = fmt::format("ratio:{}/{}/{}/{}", scenario, name, backend, clock);
      std::vector<double> v = SamplesOf(m);
      g.count = v.size();
      auto it = base.find(k);
      if (backend == "host") {
        // The machine's floor: context for every ratio, not a verdict on the runtime.
        if (it != base.end() && !v.empty() && !SamplesOf(*it->second).empty()) {
          double now = *Statistic(v, o.statistic),
                 then = *Statistic(SamplesOf(*it->second), o.statistic);
          out.notes.push_back(
              fmt::format("machine floor ({}): {} {} now vs {} in the baseline "
                          "({:+.0f} %)",
                          name, o.statistic, Ms(now), Ms(then), (now / then - 1) * 100));
        }
        continue;
      }
      if (it == base.end()) {
        g.outcome = "skip";
        g.message = fmt::format("{} [{} {} {}]: not in the baseline", name, target, backend, clock);
      } else {
        std::vector<double> b = SamplesOf(*it->second);
        if (static_cast<int>(v.size()) < o.min_samples ||
            static_cast<int>(b.size()) < o.min_samples) {
          g.outcome = "skip";
          g.message = fmt::format("{} [{} {}]: too few samples ({} now, {} baseline; at least {})",
                                  name, backend, clock, v.size(), b.size(), o.min_samples);
        } else {
          g.value = *Statistic(v, o.statistic);
          g.baseline = *Statistic(b, o.statistic);
          g.limit = g.baseline * (1 + o.tolerance);
          double ratio = g.baseline > 0 ? g.value / g.baseline : 1;
          bool regressed = g.value > g.limit && g.value - g.baseline > o.min_delta_s;
          g.outcome = regressed ? "fail" : "pass";
          g.message = fmt::format(
              "{} [{} {}]: {} {} vs baseline {} = {:.2f}× ({} the allowed {:.2f}×{})", name,
              backend, clock, o.statistic, Ms(g.value), Ms(g.baseline), ratio,
              regressed ? "beyond" : "within", 1 + o.tolerance,
              o.min_delta_s > 0 ? fmt::format(", noise floor {}", Ms(o.min_delta_s)) : "");
        }
      }
      out.gates.push_back(std::move(g));
    }
    for (const auto& [k, m] : base) {
      if (seen.count(k) || std::get<3>(k) == "host") continue;
      const auto& [name, scenario, target, backend, clock] = k;
      GateResult g;
      g.kind = "ratio";
      g.id = fmt::format("ratio:{}/{}/{}/{}", scenario, name, backend, clock);
      g.outcome = "skip";
      g.message = fmt::format("{} [{} {} {}]: in the baseline, not measured in this report", name,
                              target, backend, clock);
      out.gates.push_back(std::move(g));
    }
  }
  return out;
}

std::string RenderGateJunit(const GateReport& g, const json& report) {
  std::time_t now = static_cast<std::time_t>(report.value("started_unix", 0.0));
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string host = report["host"].value("hostname", "localhost");
  std::string suites;
  int total = 0, failures = 0, skipped = 0;
  int id = 0;
  for (const char* kind : {"absolute", "ratio"}) {
    int tests = 0, fail = 0, skip = 0;
    std::string body;
    for (const auto& r : g.gates) {
      if (r.kind != kind) continue;
      ++tests;
      std::string inner;
      if (r.outcome == "fail") {
        ++fail;
        inner = fmt::format("      <failure message=\"{}\" type=\"{}\">{}</failure>\n",
                            XmlEscape(r.message), kind, XmlEscape(r.message));
      } else if (r.outcome == "skip") {
        ++skip;
        inner = fmt::format("      <skipped message=\"{}\"/>\n", XmlEscape(r.message));
      }
      body += fmt::format(
          "    <testcase name=\"{}\" classname=\"sandcheck.gate.{}\" time=\"0\">\n{}"
          "      <system-out>{}</system-out>\n    </testcase>\n",
          XmlEscape(r.id), kind, inner, XmlEscape(r.message));
    }
    total += tests;
    failures += fail;
    skipped += skip;
    suites += fmt::format(
        "  <testsuite name=\"gate.{}\" id=\"{}\" package=\"sandcheck\" tests=\"{}\" "
        "failures=\"{}\" "
        "errors=\"0\" skipped=\"{}\" time=\"0\" timestamp=\"{}\" hostname=\"{}\">\n"
        "    <properties>\n      <property name=\"report\" value=\"{}\"/>\n"
        "      <property name=\"target\" value=\"{}\"/>\n    </properties>\n{}  </testsuite>\n",
        kind, id++, tests, fail, skip, ts, XmlEscape(host), XmlEscape(report.value("run_id", "")),
        XmlEscape(report["target"].value("name", "")), body);
  }
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"sandcheck-gate\" "
      "tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" time=\"0\">\n{}</testsuites>\n",
      total, failures, skipped, suites);
}

}  // namespace sandcheck
