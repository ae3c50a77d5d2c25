// The revert checks: the canaries planted before a revert, and the revert's cost (SCN-7,
// SNAP-2, LC-10).
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <regex>

#include "checks/checks.h"
#include "checks/evidence.h"
#include "checks/verdict.h"
#include "common/json_strict.h"
#include "common/stats.h"

namespace sandcheck::eval {

using nlohmann::json;

namespace {

// SNAP-2, LC-10: what the canaries planted before a task's revert say about it: "" if the
// revert erased everything planted (or nothing was planted, with the reason in `note`), else
// the problem. `e` receives the evidence.
std::string CanaryFindings(const TaskRecord& t, json* e, std::string* note) {
  if (!t.canary_note.empty()) {
    *note = t.canary_note;
    return "";
  }
  if (!t.plant) return "";  // the scenario plants none
  (*e)["plant"] = ExecEvidence(*t.plant);
  const ExecAnswer& pa = t.plant->answer;
  auto planted = ParseCanaryPlant(pa.stdout_text);
  if ((pa.status == "sandbox_unavailable" || pa.state == "CRASHED") && t.spec->check &&
      t.spec->check->kind == "resource_exceeded") {
    // The task's own breach ended the sandbox although its answer did not say so: that answer
    // is the memory check's to judge; there was nothing left to plant canaries in.
    *note = fmt::format("none planted: the sandbox had ended after the task ('{}': {})",
                        t.plant->command, Told(pa));
    return "";
  }
  if (pa.status != "ok" || !planted) {
    return fmt::format("the canaries could not be planted before the revert ('{}': {}){}",
                       t.plant->command, Told(pa),
                       pa.exit_code == 127
                           ? "; the target's image needs the fixture tool sbx-canary "
                             "(docs/images.md)"
                           : "");
  }
  (*e)["planted"] = planted->planted;
  (*e)["not_planted"] = planted->not_planted;
  if (planted->planted.empty()) {
    *note = "nothing could be planted (read-only everywhere)";
    return "";
  }
  if (!t.canary_check) return "the canaries were planted but not checked after the revert";
  (*e)["canary_check"] = ExecEvidence(*t.canary_check);
  const ExecAnswer& ca = t.canary_check->answer;
  auto checked = ParseCanaryCheck(ca.stdout_text);
  if (ca.status != "ok" || !checked) {
    return fmt::format("the canary check after the revert failed ({})", Told(ca));
  }
  std::vector<std::string> survived;
  for (const auto& k : checked->survivors) {
    if (std::find(planted->planted.begin(), planted->planted.end(), k) != planted->planted.end())
      survived.push_back(k);
  }
  (*e)["survivors"] = survived;
  if (survived.empty()) return "";
  return fmt::format("{} of {} canaries survived ({})", survived.size(), planted->planted.size(),
                     Join(survived, ", "));
}

}  // namespace

Verdict CleanAfterRevert(ScenarioRun& run, const json& p) {
  int64_t want = p["expect_files"];
  Verdict v;
  json per = json::array();
  std::vector<std::pair<std::vector<std::string>, std::string>> bad;  // tasks → finding
  int checked = 0, canaries = 0;
  // The kinds planted before at least one revert, and those the target never let be planted
  // (kind -> why), in the order first seen: the pass names what was really tried.
  std::vector<std::string> kinds;
  std::vector<std::pair<std::string, std::string>> refused;
  for (const TaskRecord& t : run.tasks) {
    if (!t.ran || !t.revert) continue;
    ++checked;
    json e = {{"task", t.spec->id},
              {"files_after", t.files_after ? json(*t.files_after) : json(nullptr)}};
    if (t.clean_check) e["clean_check"] = ExecEvidence(*t.clean_check);
    std::vector<std::string> wrong;
    if (!t.files_after) {
      wrong.push_back(fmt::format("the file count failed ({})",
                                  t.clean_check ? Told(t.clean_check->answer) : "not run"));
    } else if (*t.files_after != want) {
      wrong.push_back(
          fmt::format("{} file{} in /work", *t.files_after, *t.files_after == 1 ? "" : "s"));
    }
    std::string note;
    json ce = json::object();
    std::string canary = CanaryFindings(t, &ce, &note);
    if (t.plant || !t.canary_note.empty()) {
      if (!note.empty()) ce["note"] = note;
      e["canaries"] = ce;
      if (t.plant && note.empty()) ++canaries;
      if (ce.contains("planted") && ce["planted"].is_array()) {
        for (const auto& k : ce["planted"])
          if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(k);
      }
      if (ce.contains("not_planted") && ce["not_planted"].is_object()) {
        for (const auto& [k, why] : ce["not_planted"].items()) {
          if (std::none_of(refused.begin(), refused.end(),
                           [&](const auto& r) { return r.first == k; }))
            refused.push_back({k, why.is_string() ? why.get<std::string>() : why.dump()});
        }
      }
    }
    if (!canary.empty()) wrong.push_back(canary);
    per.push_back(e);
    if (!wrong.empty()) {
      // Tasks with the same finding are named together.
      std::string finding = Join(wrong, "; ");
      auto same =
          std::find_if(bad.begin(), bad.end(), [&](const auto& b) { return b.second == finding; });
      if (same == bad.end())
        bad.push_back({{t.spec->id}, finding});
      else
        same->first.push_back(t.spec->id);
    }
  }
  v.evidence["after_each_task"] = per;
  if (checked == 0) return {Outcome::kSkip, "no task ran with a revert", v.evidence};
  if (!bad.empty()) {
    std::vector<std::string> parts;
    for (const auto& [tasks, finding] : bad) {
      parts.push_back(fmt::format("after '{}': {}", Join(tasks, "', '"), finding));
    }
    return {Outcome::kFail, fmt::format("not clean after revert: {}", Join(parts, "; ")),
            v.evidence};
  }
  std::string canary_part;
  if (canaries) {
    canary_part = fmt::format("; every canary planted before {} of them ({}) was gone after",
                              canaries, Join(kinds, ", "));
    // A kind of a family ("outside:/etc", "outside:/var/tmp") counts as tried when another
    // of its family was planted: only families with nothing planted are named.
    auto family = [](const std::string& k) { return k.substr(0, k.find(':')); };
    std::vector<std::string> never;
    for (const auto& [k, why] : refused) {
      bool tried = std::any_of(kinds.begin(), kinds.end(),
                               [&](const std::string& got) { return family(got) == family(k); });
      if (!tried) never.push_back(fmt::format("{} ({})", k, why));
    }
    if (!never.empty())
      canary_part += fmt::format("; the target let none of these be planted: {}", Join(never, ", "));
  }
  return {Outcome::kPass,
          fmt::format("{} files in /work after each of {} reverts{}", want, checked, canary_part),
          v.evidence};
}

Verdict RevertMeasured(ScenarioRun& run) {
  // SNAP-4: the harness measures every revert with its own clock; that is the figure. The
  // target's own seconds are optional, and where given they must be possible (issue 32): at
  // most the whole call by the harness's clock (kRevertClockSlack for the two clocks), and at
  // least kRevertMinFraction of it (a revert reported in microseconds of a call that took
  // tens of milliseconds is made up). A target that reports none is judged on the harness's
  // clock alone.
  std::vector<double> reported, wall, first;
  std::vector<std::string> impossible;
  int reverts = 0;
  for (const TaskRecord& t : run.tasks) {
    if (!t.revert) continue;
    ++reverts;
    const double w = t.revert->wall_seconds;
    wall.push_back(w);
    if (t.clean_check) first.push_back(t.clean_check->wall_seconds);
    const double r = t.revert->op.seconds;
    if (r < 0) continue;  // not reported
    reported.push_back(r);
    if (r > w + kRevertClockSlack) {
      impossible.push_back(fmt::format("after '{}': {:.6f} s reported, more than the {:.6f} s "
                                       "the whole call took by the harness's clock",
                                       t.spec->id, r, w));
    } else if (r < w * kRevertMinFraction) {
      impossible.push_back(fmt::format(
          "after '{}': {:.6f} s reported, less than {:g} of the {:.6f} s the call took by the "
          "harness's clock",
          t.spec->id, r, kRevertMinFraction, w));
    }
  }
  Verdict v;
  v.evidence["revert_wall_seconds"] = StatsJson(wall);
  v.evidence["revert_reported_seconds"] = StatsJson(reported);
  v.evidence["first_request_after_revert_seconds"] = StatsJson(first);
  v.evidence["reported_bounds"] = {{"min_fraction_of_wall", kRevertMinFraction},
                                   {"max", "the wall time"},
                                   {"clock_slack_seconds", kRevertClockSlack}};
  if (reverts == 0) return {Outcome::kSkip, "no revert ran", v.evidence};
  if (!impossible.empty()) {
    v.evidence["impossible"] = impossible;
    return {Outcome::kFail,
            fmt::format("the target's own revert times are not what the reverts took: {}",
                        Join(impossible, "; ")),
            v.evidence};
  }
  Stats w = ComputeStats(wall);
  std::string own =
      reported.empty()
          ? "; the target reports no time of its own (the harness's clock is the measure)"
      : static_cast<int>(reported.size()) == reverts
          ? fmt::format("; the target's own times (p50 {:.4f} s) lie within the calls",
                        ComputeStats(reported).p50)
          : fmt::format("; the target reported its own time for {} of {} reverts, each within "
                        "the call",
                        reported.size(), reverts);
  return {Outcome::kPass,
          fmt::format("{} reverts: p50 {:.4f} s, max {:.4f} s (harness); first request after: "
                      "p50 {:.4f} s{}",
                      reverts, w.p50, w.max, ComputeStats(first).p50, own),
          v.evidence};
}

// PROD-5: the task's fresh rounds. Both ways to a clean sandbox must give one — the revert, and
// delete-and-create (a runtime whose destroy keeps the sandbox for the next create of the same
// request fails here) — and the harness's clock times both; the figure is the comparison.
Verdict FreshVsRevert(TaskRecord& t, const nlohmann::json& p) {
  using nlohmann::json;
  if (t.fresh.empty()) return Fail("no round ran: nothing to compare");
  std::vector<double> revert_way, fresh_way;
  json rounds = json::array();
  std::vector<std::string> bad;
  for (size_t i = 0; i < t.fresh.size(); ++i) {
    const auto& r = t.fresh[i];
    auto judge = [&](const std::optional<Step>& plant, const std::optional<Step>& check,
                     const char* way) {
      auto planted = plant ? ParseCanaryPlant(plant->answer.stdout_text) : std::nullopt;
      if (!planted || planted->planted.empty()) {
        bad.push_back(fmt::format("round {}: nothing was planted before the {} ({})", i + 1, way,
                                  plant ? Told(plant->answer) : "not run"));
        return;
      }
      auto c = check ? ParseCanaryCheck(check->answer.stdout_text) : std::nullopt;
      if (!c) {
        bad.push_back(fmt::format("round {}: the first request after the {} did not answer ({})",
                                  i + 1, way, check ? Told(check->answer) : "not run"));
      } else if (!c->survivors.empty()) {
        bad.push_back(fmt::format("round {}: after the {} the sandbox still shows {}", i + 1, way,
                                  Join(c->survivors, ", ")));
      }
    };
    judge(r.plant_revert, r.check_revert, "revert");
    judge(r.plant_fresh, r.check_fresh, "destroy and create (in the NEW sandbox)");
    if (r.revert && r.check_revert)
      revert_way.push_back(r.revert->wall_seconds + r.check_revert->wall_seconds);
    if (r.destroy && r.create && r.check_fresh)
      fresh_way.push_back(r.destroy->wall_seconds + r.create->wall_seconds +
                          r.check_fresh->wall_seconds);
    rounds.push_back(
        {{"revert_s", r.revert ? json(r.revert->wall_seconds) : json()},
         {"first_after_revert_s", r.check_revert ? json(r.check_revert->wall_seconds) : json()},
         {"destroy_s", r.destroy ? json(r.destroy->wall_seconds) : json()},
         {"create_s", r.create ? json(r.create->wall_seconds) : json()},
         {"first_after_create_s", r.check_fresh ? json(r.check_fresh->wall_seconds) : json()}});
  }
  json ev = {{"rounds", rounds}};
  if (!bad.empty()) return {Outcome::kFail, Join(bad, "; "), ev};
  if (revert_way.empty() || fresh_way.empty()) return {Outcome::kFail, "no complete round", ev};
  const double rv = Percentile(revert_way, 50), fr = Percentile(fresh_way, 50);
  ev["revert_way_p50_s"] = rv;
  ev["fresh_way_p50_s"] = fr;
  ev["ratio"] = rv > 0 ? json(fr / rv) : json();
  const double bound = p["max_fresh_seconds"];
  std::string figures = fmt::format(
      "revert + first request p50 {:.3f} s; destroy + create + first request p50 {:.3f} s ({} "
      "rounds in turn, the harness's clock{})",
      rv, fr, t.fresh.size(), rv > 0 ? fmt::format("; {:.1f}x the revert", fr / rv) : "");
  if (fr > bound) {
    return {Outcome::kFail,
            fmt::format("delete-and-create is offered but slow: {} (bound {:g} s)", figures, bound),
            ev};
  }
  return {Outcome::kPass,
          fmt::format("both ways give a clean sandbox (nothing planted before shows after either); "
                      "{}",
                      figures),
          ev};
}

}  // namespace sandcheck::eval
