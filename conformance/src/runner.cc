#include "runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "checks.h"
#include "evidence.h"
#include "json_strict.h"
#include "subprocess.h"

namespace sandcheck {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double NowUnix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

json BuildCreateRequest(const Scenario& s, const RunnerOptions& options) {
  json r = {{"template", s.sandbox.template_name},
            {"limits", s.sandbox.limits},
            {"egress", s.sandbox.egress}};
  if (!options.backend.empty()) r["backend"] = options.backend;
  json hosts = json::object();
  for (const auto& [name, fixture] : s.sandbox.services) {
    auto it = options.fixtures.find(fixture);
    if (it != options.fixtures.end()) hosts[name] = it->second;
  }
  if (!hosts.empty()) r["hosts"] = hosts;
  return r;
}

bool Runner::CreateStep(ScenarioRun& run, const std::string& label, const std::string& phase,
                        const json& request, Step* out, std::string* id) {
  out->phase = phase;
  out->started_unix = NowUnix();
  auto t0 = Clock::now();
  auto r = target_.Create(request);
  out->wall_seconds = Since(t0);
  if (!r.ok()) {
    out->error = r.status().ToString();
    run.abort_error = fmt::format("{} failed: {}", phase, r.status().ToString());
  } else {
    *id = *r;
    out->answer.stdout_text = *r;
  }
  log_.StepLine(label, *out);
  return r.ok();
}

bool Runner::ExecStep(ScenarioRun& run, const std::string& label, const std::string& phase,
                      const std::string& sandbox, const std::string& cmd, double timeout_s,
                      Step* out) {
  out->phase = phase;
  out->is_exec = true;
  out->command = cmd;
  out->started_unix = NowUnix();
  auto t0 = Clock::now();
  auto r = target_.Exec(sandbox, cmd, timeout_s);
  out->wall_seconds = Since(t0);
  if (!r.ok()) {
    out->error = r.status().ToString();
    run.abort_error = fmt::format("{} of '{}' failed: {}", phase, label, r.status().ToString());
  } else {
    out->answer = std::move(*r);
  }
  log_.StepLine(label, *out);
  return r.ok();
}

bool Runner::OpStep(ScenarioRun& run, const std::string& label, const std::string& phase,
                    const std::string& sandbox, bool revert, Step* out) {
  out->phase = phase;
  out->started_unix = NowUnix();
  auto t0 = Clock::now();
  auto r = revert ? target_.Revert(sandbox) : target_.Destroy(sandbox);
  out->wall_seconds = Since(t0);
  if (!r.ok()) {
    out->error = r.status().ToString();
    if (run.abort_error.empty()) {
      run.abort_error =
          fmt::format("{} after '{}' failed: {}", phase, label, r.status().ToString());
    }
  } else {
    out->op = *r;
  }
  log_.StepLine(label, *out);
  return r.ok();
}

bool Runner::Calibrate(ScenarioRun& run, TaskRecord& rec) {
  const CheckSpec& c = *rec.spec->check;
  json req = CreateRequest(*run.scenario);
  int64_t mc = c.params["calibration_millicores"];
  if (mc > 0) {
    req["limits"]["cpu_millicores"] = mc;
  } else {
    req["limits"].erase("cpu_millicores");
  }
  req["egress"] = {{"rules", json::array()}};  // the work needs no network
  req.erase("hosts");
  Step create;
  std::string id;
  bool created = CreateStep(run, rec.spec->label, "calibrate-create", req, &create, &id);
  rec.calibration_ops.push_back(create);
  if (!created) return false;
  rec.calibration_sandbox = id;
  bool ok = true;
  int64_t runs = c.params["calibration_runs"];
  for (int64_t i = 0; i < runs && ok; ++i) {
    log_.Progress(
        fmt::format("{}: calibration {}/{} (no CPU limit)", rec.spec->label, i + 1, runs));
    Step s;
    ok =
        ExecStep(run, rec.spec->label, "calibrate", id, rec.spec->command, rec.spec->timeout_s, &s);
    rec.calibration.push_back(std::move(s));
  }
  Step destroy;
  bool destroyed = OpStep(run, rec.spec->label, "calibrate-destroy", id, false, &destroy);
  rec.calibration_ops.push_back(destroy);
  return ok && destroyed;
}

bool Runner::RunTask(ScenarioRun& run, TaskRecord& rec, size_t index) {
  const TaskSpec& t = *rec.spec;
  const Scenario& s = *run.scenario;
  auto progress = [&](const std::string& what) {
    log_.Progress(fmt::format("[{}/{}] {}: {}", index + 1, s.tasks.size(), t.label, what));
  };
  if (t.check) {
    std::vector<std::string> missing;
    for (const auto& f : t.check->features) {
      if (!info_.Has(f)) missing.push_back(f);
    }
    if (!missing.empty()) {
      rec.skip_reason = fmt::format("not run: the target does not offer {}", Join(missing, ", "));
      Step skip;
      skip.phase = "skip";
      skip.error = rec.skip_reason;
      log_.StepLine(t.label, skip);
      return true;
    }
  }
  rec.ran = true;
  if (t.check && t.check->kind == "cpu_throttled") {
    progress("calibration");
    if (!Calibrate(run, rec)) return false;
  }
  progress("task");
  rec.task.emplace();
  if (!ExecStep(run, t.label, "task", run.sandbox_id, t.command, t.timeout_s, &*rec.task))
    return false;
  if (info_.Has("egress.log")) {
    auto log = target_.GatewayLog(run.sandbox_id);
    if (log.ok()) {
      // The log is cumulative per sandbox: keep what this task added (all of it if it was reset).
      size_t from = log->size() >= gateway_seen_ ? gateway_seen_ : 0;
      rec.gateway = json::array();
      for (size_t i = from; i < log->size(); ++i) rec.gateway.push_back((*log)[i]);
      gateway_seen_ = log->size();
    } else if (log.status().code() == sbx::Code::kUnsupported) {
      rec.gateway_note = log.status().message();
    } else {
      run.abort_error =
          fmt::format("gateway log after '{}' failed: {}", t.label, log.status().ToString());
      return false;
    }
  } else {
    rec.gateway_note = "the target does not offer egress.log";
  }
  const AfterEachTask& after = s.after_each;
  if (after.revert && info_.Has("revert")) {
    progress("revert");
    rec.revert.emplace();
    if (!OpStep(run, t.label, "revert", run.sandbox_id, true, &*rec.revert)) return false;
    if (!after.clean_check.empty()) {
      progress("clean check");
      rec.clean_check.emplace();
      if (!ExecStep(run, t.label, "clean-check", run.sandbox_id, after.clean_check, after.timeout_s,
                    &*rec.clean_check)) {
        return false;
      }
      const ExecAnswer& a = rec.clean_check->answer;
      if (a.status == "ok" && a.exit_code == 0) rec.files_after = ParseFileCount(a.stdout_text);
    }
  }
  if (t.check && t.check->kind == "resource_exceeded") {
    progress("recovery");
    rec.recover.emplace();
    std::string cmd = t.check->params["recover_command"];
    if (!ExecStep(run, t.label, "recover", run.sandbox_id, cmd, after.timeout_s, &*rec.recover))
      return false;
  }
  return true;
}

ScenarioRun Runner::Run(const Scenario& s) {
  ScenarioRun run;
  run.scenario = &s;
  run.started_unix = NowUnix();
  auto t0 = Clock::now();
  for (const auto& t : s.tasks) {
    TaskRecord rec;
    rec.spec = &t;
    run.tasks.push_back(std::move(rec));
  }
  run.create_request = CreateRequest(s);
  gateway_seen_ = 0;
  if (!options_.backend.empty() && !info_.backends.empty() &&
      std::find(info_.backends.begin(), info_.backends.end(), options_.backend) ==
          info_.backends.end()) {
    run.skip_reason = fmt::format("the target does not offer backend '{}' (it offers: {})",
                                  options_.backend, Join(info_.backends, ", "));
    for (auto& t : run.tasks) t.skip_reason = run.skip_reason;
  } else {
    run.create.emplace();
    if (CreateStep(run, "sandbox", "create", run.create_request, &*run.create, &run.sandbox_id)) {
      for (size_t i = 0; i < run.tasks.size(); ++i) {
        if (Interrupted()) {
          run.abort_error = "interrupted";
          break;
        }
        if (!RunTask(run, run.tasks[i], i)) break;
      }
      for (auto& t : run.tasks) {
        if (!t.ran && t.skip_reason.empty()) t.skip_reason = "not run: " + run.abort_error;
      }
      if (Interrupted()) {
        if (run.abort_error.empty()) run.abort_error = "interrupted";
        ClearPendingInterrupt();  // still destroy the sandbox; a second signal stops that too
      }
      run.destroy.emplace();
      log_.Progress("destroy");
      OpStep(run, "sandbox", "destroy", run.sandbox_id, false, &*run.destroy);
    }
  }
  log_.ClearProgress();
  JudgeScenario(run, info_);
  run.seconds = Since(t0);
  return run;
}

}  // namespace sandcheck
