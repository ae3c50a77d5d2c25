#include "checks/checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <regex>

#include "checks/evidence.h"
#include "checks/verdict.h"
#include "common/json_strict.h"
#include "common/stats.h"

namespace sandcheck {
namespace {

using nlohmann::json;
using namespace eval;

// A limit of the create request of the sandbox the task ran in (its own, or the scenario's).
int64_t RequestedLimit(const ScenarioRun& run, const TaskRecord& t, const char* key) {
  const json& req = t.own_request.is_null() ? run.create_request : t.own_request;
  if (!req.is_object() || !req.contains("limits") || !req["limits"].is_object()) return 0;
  const json& l = req["limits"];
  return l.contains(key) && l[key].is_number_integer() ? l[key].get<int64_t>() : 0;
}

const CheckResult* FindResult(const std::vector<CheckResult>& results, const std::string& id) {
  for (const auto& r : results) {
    if (r.spec->id == id) return &r;
  }
  return nullptr;
}

}  // namespace

json ExecEvidence(const Step& s) {
  json e = {{"phase", s.phase},
            {"command", s.command},
            {"status", s.answer.status},
            {"state", s.answer.state},
            {"exit", s.answer.exit_code},
            {"stdout_tail", TailOf(s.answer.stdout_text, 2000)},
            {"stderr_tail", TailOf(s.answer.stderr_text, 1000)},
            {"reported_seconds", s.answer.seconds},
            {"wall_seconds", s.wall_seconds}};
  if (s.answer.http_status) e["http_status"] = s.answer.http_status;
  return e;
}

void JudgeScenario(ScenarioRun& run, const TargetInfo& info) {
  run.checks.clear();
  for (const CheckSpec* c : run.scenario->AllChecks()) {
    CheckResult r;
    r.spec = c;
    TaskRecord* task = nullptr;
    for (auto& t : run.tasks) {
      if (t.spec->id == c->task_id) task = &t;
    }
    Verdict v;
    std::vector<std::string> missing;
    for (const auto& f : c->features) {
      if (!info.Has(f)) missing.push_back(f);
    }
    if (!run.fatal_error.empty()) {
      v = {Outcome::kError, "not run: " + run.fatal_error, json::object()};
    } else if (!run.skip_reason.empty()) {
      v = {Outcome::kSkip, run.skip_reason, json::object()};
    } else if (!missing.empty()) {
      v = {Outcome::kSkip,
           fmt::format("the target does not offer feature{} {} (its info lists: {})",
                       missing.size() > 1 ? "s" : "", Join(missing, ", "),
                       info.features.empty() ? "none" : Join(info.features, ", ")),
           json::object()};
    } else if (task && !task->create_refused.empty()) {
      json p = c->params;
      SubstituteHarness(p, run.harness);
      v = Expect(*task, p);
    } else if (task && task->task && !task->task->error.empty()) {
      v = {Outcome::kError, "not judged: the target failed: " + task->task->error, json::object()};
    } else if (task && (!task->ran || !task->task)) {
      v = {run.abort_error.empty() ? Outcome::kSkip : Outcome::kError,
           run.abort_error.empty() ? task->skip_reason : "not judged: " + run.abort_error,
           json::object()};
    } else if (!task && !run.abort_error.empty()) {
      v = {Outcome::kError, "not judged: " + run.abort_error, json::object()};
    } else if (!task && !c->task_id.empty()) {
      v = {Outcome::kError, "not judged: the run has no record of task " + c->task_id,
           json::object()};
    } else {
      json p = c->params;
      SubstituteHarness(p, run.harness);
      if (c->kind == "allowed_download")
        v = AllowedDownload(*task, p, info);
      else if (c->kind == "name_not_resolved")
        v = NameNotResolved(*task, p);
      else if (c->kind == "gateway_refused")
        v = GatewayRefused(*task, p, info);
      else if (c->kind == "cpu_throttled")
        v = CpuThrottled(*task, p, RequestedLimit(run, *task, "cpu_millicores"));
      else if (c->kind == "cpu_shared_by_threads")
        v = CpuSharedByThreads(*task, p, RequestedLimit(run, *task, "cpu_millicores"));
      else if (c->kind == "resource_exceeded")
        v = ResourceExceeded(*task, p,
                             p["limit_bytes"].get<int64_t>() > 0
                                 ? p["limit_bytes"].get<int64_t>()
                                 : RequestedLimit(run, *task, "memory_bytes"));
      else if (c->kind == "exit_ok")
        v = ExitOk(*task, p);
      else if (c->kind == "expect")
        v = Expect(*task, p);
      else if (c->kind == "clean_after_revert")
        v = CleanAfterRevert(run, p);
      else if (c->kind == "revert_measured")
        v = RevertMeasured(run);
      else if (c->kind == "pool_walk")
        v = PoolWalk(run, p);
      else if (c->kind == "fresh_vs_revert")
        v = FreshVsRevert(*task, p);
      else if (c->kind == "pool_grows")
        v = PoolGrows(*task, p);
      else if (c->kind == "foreign_refused")
        v = ForeignRefused(*task);
      else
        v = {Outcome::kError, "no evaluator for kind " + c->kind, json::object()};
      if (task) {
        json ev = ExecEvidence(*task->task);
        ev.update(v.evidence);
        v.evidence = ev;
        r.seconds = task->task->wall_seconds;
      }
    }
    // Counts only if the checks it builds on passed in this run.
    if (v.outcome == Outcome::kPass || v.outcome == Outcome::kFail) {
      for (const auto& dep_id : c->requires_pass) {
        const CheckResult* dep = FindResult(run.checks, dep_id);
        if (!dep || dep->raw == Outcome::kPass) continue;
        std::string own = v.reason;
        if (dep->raw == Outcome::kSkip || dep->raw == Outcome::kError) {
          v.outcome = dep->raw;
          v.reason = fmt::format("depends on {}, which did not run: {}", dep_id, dep->reason);
        } else {
          bool download_failed =
              dep->spec->kind == "allowed_download" && !dep->evidence.value("downloaded", false);
          v.outcome = Outcome::kFail;
          v.reason =
              download_failed
                  ? fmt::format("no egress at all: allowed download failed (own evidence: {})", own)
                  : fmt::format(
                        "counts only if {} passed in this run; it failed: {} (own "
                        "evidence: {})",
                        dep_id, dep->reason, own);
        }
        break;
      }
    }
    if (task && !task->ran) task->got = v.outcome == Outcome::kSkip ? "skipped" : "not run";
    r.raw = v.outcome;
    r.outcome = v.outcome;
    r.reason = v.reason;
    r.evidence = v.evidence;
    run.checks.push_back(std::move(r));
  }
}

}  // namespace sandcheck
