// Runner::RunTaskIn: one task's calls in its sandbox, phase by phase (runner.h). The order is the
// contract with the checks: what runs before the task (canaries of a task that ends its sandbox,
// the CPU calibration, the one-thread reference), the task, the gateway log, suspend and resume,
// the follow-up, the revert with its clean and canary checks, the recovery, and a follow-up
// after the revert.
#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "checks/evidence.h"
#include "run/runner.h"

namespace sandcheck {

using nlohmann::json;

Runner::TaskPlan Runner::PlanTask(const ScenarioRun& run, const TaskRecord& rec,
                                  size_t index) const {
  const TaskSpec& t = *rec.spec;
  TaskPlan p;
  p.index = index;
  p.reverts = t.revert.value_or(run.scenario->after_each.revert) && info_.Has("revert");
  p.plant_before = t.canaries_before && run.scenario->after_each.canaries && p.reverts;
  p.cpu = t.check && t.check->kind == "cpu_throttled";
  // cpu_shared_by_threads: the one-thread reference runs in the task's own sandbox, half before
  // the task and half after.
  p.threads = t.check && t.check->kind == "cpu_shared_by_threads";
  p.reference_runs = p.threads ? t.check->params["reference_runs"].get<int64_t>() : 0;
  const bool expect = t.check && t.check->kind == "expect";
  p.then = expect && t.check->params["then"].is_object() ? &t.check->params["then"] : nullptr;
  return p;
}

void Runner::TaskProgress(const ScenarioRun& run, const TaskRecord& rec, const TaskPlan& plan,
                          const std::string& what) {
  log_.Progress(fmt::format("[{}/{}] {}: {}", plan.index + 1, run.scenario->tasks.size(),
                            rec.spec->label, what));
}

bool Runner::ThreadReference(ScenarioRun& run, TaskRecord& rec, const TaskPlan& plan,
                             const std::string& sandbox, int64_t from, int64_t to) {
  const TaskSpec& t = *rec.spec;
  const std::string cmd =
      SubstituteHarness(t.check->params["reference_command"].get<std::string>(), run.harness);
  return RepeatExec(run, t, sandbox, cmd, "reference", "one-thread reference", from, to,
                    plan.reference_runs, &rec.calibration);
}

bool Runner::BeforeTask(ScenarioRun& run, TaskRecord& rec, const TaskPlan& plan,
                        const std::string& sandbox, const json& request) {
  if (plan.plant_before) {
    // The task will end its sandbox: plant now, while something can still run in it.
    TaskProgress(run, rec, plan, "plant canaries (before the task)");
    if (!PlantCanaries(run, rec, sandbox)) return false;
  }
  if (plan.cpu) {
    TaskProgress(run, rec, plan, "calibration (before the task)");
    if (!Calibrate(run, rec, request, true)) return false;
    TaskProgress(run, rec, plan, "exec overhead");
    if (!ExecOverhead(run, rec, sandbox, &rec.overhead_task)) {
      EndCalibration(run, rec);
      return false;
    }
  }
  if (plan.threads) {
    TaskProgress(run, rec, plan, "exec overhead");
    if (!ExecOverhead(run, rec, sandbox, &rec.overhead_task)) return false;
    if (!ThreadReference(run, rec, plan, sandbox, 0, (plan.reference_runs + 1) / 2)) return false;
  }
  return true;
}

bool Runner::TaskCommand(ScenarioRun& run, TaskRecord& rec, const TaskPlan& plan,
                         const std::string& sandbox, const json& request) {
  const TaskSpec& t = *rec.spec;
  TaskProgress(run, rec, plan, "task");
  rec.task.emplace();
  const size_t mirror_before = options_.mirror ? options_.mirror->LogCount() : 0;
  const size_t sink_before = options_.sink ? options_.sink->LogCount() : 0;
  if (!ExecStep(run, t.label, "task", sandbox, SubstituteHarness(t.command, run.harness),
                t.timeout_s, &*rec.task)) {
    if (plan.cpu) EndCalibration(run, rec);
    return false;
  }
  if (options_.mirror) rec.mirror_log = options_.mirror->LogSince(mirror_before);
  if (options_.sink) rec.sink_log = options_.sink->LogSince(sink_before);
  if (plan.cpu) {
    TaskProgress(run, rec, plan, "calibration (after the task)");
    if (!Calibrate(run, rec, request, false)) return false;
  }
  if (plan.threads &&
      !ThreadReference(run, rec, plan, sandbox, (plan.reference_runs + 1) / 2, plan.reference_runs))
    return false;
  return true;
}

bool Runner::CollectGatewayLog(ScenarioRun& run, TaskRecord& rec, const std::string& sandbox) {
  const TaskSpec& t = *rec.spec;
  if (!info_.Has("egress.log")) {
    rec.gateway_note = "the target does not offer egress.log";
    return true;
  }
  auto log = target_.GatewayLog(sandbox);
  if (log.ok()) {
    // The log is cumulative per sandbox: keep what this task added (all of it if it was reset,
    // or if the sandbox is the task's own).
    size_t seen = t.sandbox ? 0 : gateway_seen_;
    size_t from = log->size() >= seen ? seen : 0;
    rec.gateway = json::array();
    for (size_t i = from; i < log->size(); ++i) rec.gateway.push_back((*log)[i]);
    if (!t.sandbox) gateway_seen_ = log->size();
  } else if (log.status().code() == sbx::Code::kUnsupported) {
    rec.gateway_note = log.status().message();
  } else {
    run.abort_error =
        fmt::format("gateway log after '{}' failed: {}", t.label, log.status().ToString());
    return false;
  }
  return true;
}

bool Runner::SuspendAndResume(ScenarioRun& run, TaskRecord& rec, const TaskPlan& plan,
                              const std::string& sandbox) {
  const TaskSpec& t = *rec.spec;
  // SNAP-3: suspended for hold_s by the harness's clock, then resumed; the follow-up reads
  // what the sandbox did meanwhile, and its command run before the suspend is the control.
  if (t.check && t.check->kind == "expect" && t.check->params["suspended"].is_object()) {
    TaskProgress(run, rec, plan, "control (before the suspend)");
    if (!ThenStep(run, rec, sandbox, "suspend-control", &rec.suspend_control)) return false;
  }
  TaskProgress(run, rec, plan, "suspend");
  rec.suspend.emplace();
  if (!OpStep(run, t.label, "suspend", sandbox, Op::kSuspend, &*rec.suspend)) return false;
  TaskProgress(run, rec, plan, fmt::format("held suspended for {:g} s", t.suspend->hold_s));
  std::this_thread::sleep_for(std::chrono::duration<double>(t.suspend->hold_s));
  TaskProgress(run, rec, plan, "resume");
  rec.resume.emplace();
  return OpStep(run, t.label, "resume", sandbox, Op::kResume, &*rec.resume);
}

bool Runner::RevertPhase(ScenarioRun& run, TaskRecord& rec, const TaskPlan& plan,
                         const std::string& sandbox) {
  const TaskSpec& t = *rec.spec;
  const AfterEachTask& after = run.scenario->after_each;
  if (after.canaries && !plan.plant_before) {
    TaskProgress(run, rec, plan, "plant canaries");
    if (!PlantCanaries(run, rec, sandbox)) return false;
  }
  TaskProgress(run, rec, plan, "revert");
  rec.revert.emplace();
  if (!OpStep(run, t.label, "revert", sandbox, Op::kRevert, &*rec.revert)) return false;
  if (!after.clean_check.empty()) {
    TaskProgress(run, rec, plan, "clean check");
    rec.clean_check.emplace();
    if (!ExecStep(run, t.label, "clean-check", sandbox, after.clean_check, after.timeout_s,
                  &*rec.clean_check)) {
      return false;
    }
    const ExecAnswer& a = rec.clean_check->answer;
    if (a.status == "ok" && a.exit_code == 0) rec.files_after = ParseFileCount(a.stdout_text);
  }
  if (rec.plant) {
    TaskProgress(run, rec, plan, "canary check");
    if (!CheckCanaries(run, rec, sandbox)) return false;
  }
  return true;
}

bool Runner::RecoveryPhase(ScenarioRun& run, TaskRecord& rec, const TaskPlan& plan,
                           const std::string& sandbox) {
  const TaskSpec& t = *rec.spec;
  TaskProgress(run, rec, plan, "recovery");
  rec.recover.emplace();
  std::string cmd = t.check->params["recover_command"];
  if (!ExecStep(run, t.label, "recover", sandbox, cmd, run.scenario->after_each.timeout_s,
                &*rec.recover))
    return false;
  const json& p = t.check->params;
  bool bracket = !p["under_command"].get<std::string>().empty() ||
                 !p["over_command"].get<std::string>().empty();
  if (bracket && rec.revert && rec.recover->answer.status == "ok") {
    if (!Bracket(run, rec, sandbox)) return false;
  }
  return true;
}

bool Runner::ThenAfterRevert(ScenarioRun& run, TaskRecord& rec, const TaskPlan& plan,
                             const std::string& sandbox) {
  const TaskSpec& t = *rec.spec;
  TaskProgress(run, rec, plan, "then");
  if (!ThenStep(run, rec, sandbox)) return false;
  if (!t.sandbox && rec.then->answer.state == "CRASHED") {
    // The follow-up ended the shared sandbox (its check judges that): revert it, so the next
    // task is not blamed for a sandbox it did not break.
    TaskProgress(run, rec, plan, "revert after the follow-up");
    rec.then_revert.emplace();
    if (!OpStep(run, t.label, "then-revert", sandbox, Op::kRevert, &*rec.then_revert)) return false;
  }
  return true;
}

bool Runner::RunTaskIn(ScenarioRun& run, TaskRecord& rec, size_t index, const std::string& sandbox,
                       const json& request) {
  const TaskSpec& t = *rec.spec;
  const TaskPlan plan = PlanTask(run, rec, index);
  if (!BeforeTask(run, rec, plan, sandbox, request)) return false;
  if (!TaskCommand(run, rec, plan, sandbox, request)) return false;
  if (!CollectGatewayLog(run, rec, sandbox)) return false;
  HostScan(rec, "task");
  if (t.suspend && !SuspendAndResume(run, rec, plan, sandbox)) return false;
  if (plan.then && !(*plan.then)["after_revert"].get<bool>()) {
    TaskProgress(run, rec, plan, "then");
    if (!ThenStep(run, rec, sandbox)) return false;
  }
  if (plan.reverts && !RevertPhase(run, rec, plan, sandbox)) return false;
  if (t.check && t.check->kind == "resource_exceeded" && !RecoveryPhase(run, rec, plan, sandbox))
    return false;
  if (plan.then && (*plan.then)["after_revert"].get<bool>() && rec.revert &&
      !ThenAfterRevert(run, rec, plan, sandbox))
    return false;
  return true;
}

}  // namespace sandcheck
