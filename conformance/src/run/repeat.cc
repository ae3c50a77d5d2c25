#include "run/repeat.h"

#include <fmt/format.h>

#include <map>
#include <string>

namespace sandcheck {

using nlohmann::json;

namespace {

// "3 pass, 2 fail" in a stable order.
std::string Tally(const std::map<std::string, int>& counts) {
  std::string out;
  for (const char* o : {"pass", "fail", "skip", "error", "xfail", "xpass", "flaky"}) {
    auto it = counts.find(o);
    if (it == counts.end()) continue;
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", it->second, o);
  }
  return out;
}

// Joins the runs' errors of one kind, naming the run of each.
std::string JoinErrors(const std::vector<ScenarioRun>& reps, std::string ScenarioRun::*field) {
  std::string out;
  for (size_t i = 0; i < reps.size(); ++i) {
    const std::string& e = reps[i].*field;
    if (e.empty()) continue;
    out += fmt::format("{}run {} of {}: {}", out.empty() ? "" : "; ", i + 1, reps.size(), e);
  }
  return out;
}

}  // namespace

ScenarioRun MergeRepeats(std::vector<ScenarioRun> reps) {
  const size_t n = reps.size();
  if (n == 1) return std::move(reps[0]);
  ScenarioRun merged = std::move(reps.back());
  reps.back().abort_error = merged.abort_error;  // still needed for the joined errors
  reps.back().fatal_error = merged.fatal_error;
  merged.abort_error = JoinErrors(reps, &ScenarioRun::abort_error);
  merged.fatal_error = JoinErrors(reps, &ScenarioRun::fatal_error);
  merged.started_unix = reps.front().started_unix;
  merged.seconds = 0;
  for (size_t i = 0; i + 1 < n; ++i) merged.seconds += reps[i].seconds;
  merged.seconds += reps.back().seconds;
  for (size_t c = 0; c < merged.checks.size(); ++c) {
    CheckResult& out = merged.checks[c];
    std::map<std::string, int> counts;
    json per_run = json::array();
    const CheckResult* first_bad = nullptr;
    for (size_t i = 0; i < n; ++i) {
      // The last run's results were moved into `merged`; read them there.
      const CheckResult& r = i + 1 == n ? out : reps[i].checks.at(c);
      counts[OutcomeName(r.raw)]++;
      per_run.push_back({{"run", i + 1}, {"outcome", OutcomeName(r.raw)}, {"reason", r.reason}});
      if (!first_bad && r.raw != Outcome::kPass) first_bad = &r;
    }
    if (counts.size() > 1) {
      // The outcome changed between runs: flaky, told with the first run that did not pass.
      const CheckResult& bad = *first_bad;
      size_t bad_run = 0;
      for (size_t i = 0; i < n; ++i) {
        if (per_run[i]["outcome"] != "pass") {
          bad_run = i + 1;
          break;
        }
      }
      std::string reason = fmt::format("flaky over {} runs ({}); run {} ({}): {}", n, Tally(counts),
                                       bad_run, OutcomeName(bad.raw), bad.reason);
      json evidence = bad.evidence;
      double seconds = bad.seconds;
      out.raw = Outcome::kFlaky;
      out.reason = std::move(reason);
      out.evidence = std::move(evidence);
      out.seconds = seconds;
    } else if (n > 1) {
      out.reason = fmt::format("{} in each of {} runs: {}", OutcomeName(out.raw), n, out.reason);
    }
    out.outcome = out.raw;
    out.repeat_counts = std::move(counts);
    out.repeat_runs = std::move(per_run);
  }
  return merged;
}

}  // namespace sandcheck
