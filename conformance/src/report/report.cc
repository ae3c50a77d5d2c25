#include "report/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <random>

#include "checks/checks.h"
#include "checks/evidence.h"
#include "common/stats.h"
#include "host/host_facts.h"

namespace sandcheck {
namespace {

using nlohmann::json;

json TaskJson(const TaskRecord& t) {
  json steps = json::array();
  json calib = json::array();
  if (!t.calibration_ops.empty()) steps.push_back(StepJson(t.calibration_ops.front()));
  for (const Step& s : t.calibration) {
    steps.push_back(StepJson(s));
    calib.push_back(s.wall_seconds);
  }
  if (t.calibration_ops.size() > 1) steps.push_back(StepJson(t.calibration_ops.back()));
  for (const auto* list : {&t.overhead_calibration, &t.overhead_task})
    for (const Step& s : *list) steps.push_back(StepJson(s));
  for (const auto* s :
       {&t.neighbour_create, &t.neighbour, &t.own_create, &t.task, &t.suspend_control, &t.suspend,
        &t.resume, &t.then, &t.plant, &t.revert, &t.clean_check, &t.canary_check, &t.recover,
        &t.then_revert, &t.own_destroy, &t.neighbour_destroy}) {
    if (*s) steps.push_back(StepJson(**s));
  }
  for (const Step& s : t.bracket) steps.push_back(StepJson(s));
  for (const auto& r : t.fresh) {
    for (const auto* s : {&r.plant_revert, &r.revert, &r.check_revert, &r.plant_fresh, &r.destroy,
                          &r.create, &r.check_fresh}) {
      if (*s) steps.push_back(StepJson(**s));
    }
  }
  for (const auto& f : t.foreign) {
    for (const auto* s : {&f.call, &f.look}) {
      if (*s) steps.push_back(StepJson(**s));
    }
  }
  if (t.foreign_plant) steps.push_back(StepJson(*t.foreign_plant));
  for (const auto& burst : t.bursts)
    for (const Step& s : burst) steps.push_back(StepJson(s));
  json walk = nullptr;
  if (t.spec->walk) {
    walk = {{"seed", t.walk_seed}, {"pooled_note", t.walk_pooled_note}, {"steps", json::array()}};
    for (const WalkStep& w : t.walk) {
      for (const auto* s : {&w.create, &w.exec, &w.destroy}) {
        if (*s) steps.push_back(StepJson(**s));
      }
      walk["steps"].push_back({{"tenant", w.tenant},
                               {"tool", w.tool},
                               {"trust", w.trust},
                               {"token", w.token},
                               {"sandbox", w.sandbox},
                               {"pooled", w.pooled},
                               {"refused", w.refused}});
    }
  }
  // In the order they were made (a follow-up `then` may come before or after the revert).
  std::stable_sort(steps.begin(), steps.end(), [](const json& a, const json& b) {
    return a["started_unix"].get<double>() < b["started_unix"].get<double>();
  });
  auto wall = [](const std::optional<Step>& s) {
    return s ? json(s->wall_seconds) : json(nullptr);
  };
  json timings = {
      {"task_seconds", wall(t.task)},
      {"revert_seconds", wall(t.revert)},
      {"revert_reported_seconds",
       t.revert && t.revert->op.seconds >= 0 ? json(t.revert->op.seconds) : json(nullptr)},
      {"first_request_after_revert_seconds", wall(t.clean_check)},
      {"recover_seconds", wall(t.recover)},
      {"calibration_seconds", calib}};
  json stages = nullptr;
  if (t.task && t.task->answer.extra.contains("stages")) stages = t.task->answer.extra["stages"];
  return {{"id", t.spec->id},
          {"label", t.spec->label},
          {"tries", t.spec->tries},
          {"command", t.spec->command},
          {"timeout_s", t.spec->timeout_s},
          {"check", t.spec->check ? json(t.spec->check->id) : json(nullptr)},
          {"ran", t.ran},
          {"skip_reason", t.skip_reason},
          {"steps", steps},
          {"timings", timings},
          {"target_stages", stages},
          {"files_after", t.files_after ? json(*t.files_after) : json(nullptr)},
          {"gateway", t.gateway.is_array() ? t.gateway : json(nullptr)},
          {"gateway_note", t.gateway_note},
          {"got", t.got},
          {"refused", t.refused},
          {"walk", walk}};
}

// The backend a scenario ran on: as the target reported it in an exec answer, else as asked,
// else the target's only backend, else "default".
std::string BackendOf(const ScenarioRun& run, const RunContext& ctx) {
  for (const TaskRecord& t : run.tasks) {
    if (t.task && t.task->answer.extra.contains("backend") &&
        t.task->answer.extra["backend"].is_string()) {
      return t.task->answer.extra["backend"].get<std::string>();
    }
  }
  if (!ctx.backend.empty()) return ctx.backend;
  if (ctx.info && ctx.info->backends.size() == 1) return ctx.info->backends[0];
  return "default";
}

json Measurement(const std::string& name, const std::string& scenario, const std::string& backend,
                 const RunContext& ctx, const std::string& clock,
                 const std::vector<double>& samples) {
  json m = {{"name", name},
            {"scenario", scenario},
            {"target", ctx.info ? ctx.info->name : ctx.target_spec},
            {"backend", backend},
            {"unit", "s"},
            {"clock", clock}};
  m.update(StatsJson(samples));
  return m;
}

}  // namespace

std::string DumpJson(const json& j) {
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string NewRunId() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  std::random_device rd;
  return fmt::format("{}-{:04x}", buf, rd() & 0xffff);
}

json StepJson(const Step& s) {
  json j = {{"phase", s.phase}, {"wall_seconds", s.wall_seconds}, {"started_unix", s.started_unix}};
  if (!s.error.empty()) j["error"] = s.error;
  if (!s.refused.empty()) j["refused"] = s.refused;
  if (s.is_exec) {
    j.update(ExecEvidence(s));
    if (!s.answer.extra.empty()) j["extra"] = s.answer.extra;
  } else if (s.phase == "create" || s.phase == "calibrate-create") {
    j["sandbox"] = s.answer.stdout_text;
  } else {
    j["reported_seconds"] = s.op.seconds >= 0 ? json(s.op.seconds) : json(nullptr);
    if (s.op.http_status) j["http_status"] = s.op.http_status;
  }
  return j;
}

json BuildReport(const RunContext& ctx, const std::vector<ScenarioRun>& runs) {
  json target = {
      {"spec", ctx.target_spec}, {"driver", ctx.target_driver}, {"backend_requested", ctx.backend}};
  if (ctx.info) {
    target["name"] = ctx.info->name;
    target["version"] = ctx.info->version;
    target["backends"] = ctx.info->backends;
    target["features"] = ctx.info->features;
    target["info"] = ctx.info->raw;
  } else {
    target["name"] = ctx.target_spec;
    target["version"] = "";
    target["backends"] = json::array();
    target["features"] = json::array();
    target["info"] = nullptr;
  }
  json scenarios = json::array(), checks = json::array(), measurements = json::array();
  std::vector<std::string> errors = ctx.errors;
  std::map<std::string, int> counts = {{"pass", 0},  {"fail", 0},  {"skip", 0}, {"xfail", 0},
                                       {"xpass", 0}, {"error", 0}, {"flaky", 0}};
  int blocking = 0;
  for (const ScenarioRun& run : runs) {
    const Scenario& s = *run.scenario;
    std::string backend = BackendOf(run, ctx);
    json tasks = json::array();
    std::vector<double> revert_wall, revert_reported, first_after;
    for (const TaskRecord& t : run.tasks) {
      tasks.push_back(TaskJson(t));
      if (t.revert) {
        revert_wall.push_back(t.revert->wall_seconds);
        if (t.revert->op.seconds >= 0) revert_reported.push_back(t.revert->op.seconds);
      }
      if (t.clean_check) first_after.push_back(t.clean_check->wall_seconds);
    }
    if (!run.abort_error.empty()) errors.push_back(fmt::format("{}: {}", s.name, run.abort_error));
    if (!run.fatal_error.empty()) errors.push_back(fmt::format("{}: {}", s.name, run.fatal_error));
    scenarios.push_back({{"name", s.name},
                         {"title", s.title},
                         {"origin", s.origin},
                         {"source", s.source},
                         {"variables", s.values},
                         {"backend", backend},
                         {"sandbox",
                          {{"request", run.create_request},
                           {"id", run.sandbox_id},
                           {"create", run.create ? StepJson(*run.create) : json(nullptr)},
                           {"destroy", run.destroy ? StepJson(*run.destroy) : json(nullptr)}}},
                         {"skip_reason", run.skip_reason},
                         {"abort_error", run.abort_error},
                         {"started_unix", run.started_unix},
                         {"seconds", run.seconds},
                         {"tasks", tasks}});
    if (run.create && run.create->error.empty()) {
      measurements.push_back(Measurement("create_seconds", s.name, backend, ctx, "harness",
                                         {run.create->wall_seconds}));
    }
    if (!revert_wall.empty()) {
      measurements.push_back(
          Measurement("revert_seconds", s.name, backend, ctx, "harness", revert_wall));
      measurements.push_back(
          Measurement("revert_reported_seconds", s.name, backend, ctx, "target", revert_reported));
      measurements.push_back(Measurement("first_request_after_revert_seconds", s.name, backend, ctx,
                                         "harness", first_after));
    }
    for (const CheckResult& r : run.checks) {
      const CheckSpec& c = *r.spec;
      counts[OutcomeName(r.outcome)]++;
      if (r.blocking) ++blocking;
      checks.push_back(
          {{"id", c.id},
           {"scenario", s.name},
           {"task", c.task_id.empty() ? json(nullptr) : json(c.task_id)},
           {"title", c.title},
           {"requirements", c.requirements},
           {"level", c.level},
           {"kind", c.kind},
           {"outcome", OutcomeName(r.outcome)},
           {"raw_outcome", OutcomeName(r.raw)},
           {"reason", r.reason},
           {"expected", r.expected_outcome.empty()
                            ? json(nullptr)
                            : json{{"outcome", r.expected_outcome}, {"reason", r.expected_reason}}},
           {"blocking", r.blocking},
           {"seconds", r.seconds},
           {"evidence", r.evidence}});
      if (ctx.repeat > 1) {
        // --repeat N: how often each outcome occurred, and each run's outcome and reason.
        checks.back()["repeat"] = {
            {"runs", ctx.repeat}, {"counts", r.repeat_counts}, {"per_run", r.repeat_runs}};
      }
    }
  }
  int exit_code = !errors.empty() || counts["error"] > 0 ? 3 : blocking > 0 ? 1 : 0;
  json summary = {{"checks", checks.size()},
                  {"blocking", blocking},
                  {"verdict", exit_code == 0   ? "pass"
                              : exit_code == 1 ? "fail"
                                               : "error"},
                  {"exit_code", exit_code}};
  for (const auto& [k, v] : counts) summary[k] = v;
  json expectations = nullptr;
  if (ctx.expectations) {
    expectations = {{"file", ctx.expectations->file},
                    {"target", ctx.expectations->target},
                    {"count", ctx.expectations->by_check.size()},
                    {"applied", ctx.profile != Profile::kCertify}};
  }
  return {{"schema", kReportSchema},
          {"run_id", ctx.run_id},
          {"sandcheck_version", SANDCHECK_VERSION},
          {"command_line", ctx.command_line},
          {"started_unix", ctx.started_unix},
          {"finished_unix", ctx.finished_unix},
          {"seconds", ctx.finished_unix - ctx.started_unix},
          {"profile", ProfileName(ctx.profile)},
          {"repeat", ctx.repeat},
          {"target", target},
          {"host", HostFacts()},
          {"machine_load", ctx.machine_load},
          {"environment", {{"fixtures", ctx.fixtures}, {"variables", ctx.vars}}},
          {"expectations", expectations},
          {"scenarios", scenarios},
          {"checks", checks},
          {"measurements", measurements},
          {"errors", errors},
          {"summary", summary}};
}

// Recomputes report.summary from its checks and errors (same rules as sandcheck run).
void SummarizeChecks(nlohmann::json& report) {
  std::map<std::string, int> counts = {{"pass", 0},  {"fail", 0},  {"skip", 0},
                                       {"xfail", 0}, {"xpass", 0}, {"error", 0}};
  int blocking = 0;
  for (const auto& c : report["checks"]) {
    counts[c["outcome"].get<std::string>()]++;
    if (c["blocking"].get<bool>()) ++blocking;
  }
  int exit_code = !report["errors"].empty() || counts["error"] > 0 ? 3 : blocking > 0 ? 1 : 0;
  nlohmann::json summary = {{"checks", report["checks"].size()},
                            {"blocking", blocking},
                            {"verdict", exit_code == 0   ? "pass"
                                        : exit_code == 1 ? "fail"
                                                         : "error"},
                            {"exit_code", exit_code}};
  for (const auto& [k, v] : counts) summary[k] = v;
  report["summary"] = summary;
}

}  // namespace sandcheck
