// One scenario's replay, task by task, with the evidence each task gathers (calibration,
// beacons, canaries, host scans). A task's calls in its sandbox, phase by phase, are
// task_phases.cc; the walk, fresh rounds, bursts and foreign calls have files of their own.
#include "run/runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "checks/checks.h"
#include "checks/evidence.h"
#include "common/clock.h"
#include "common/json_strict.h"
#include "common/subprocess.h"
#include "host/host_scan.h"

namespace sandcheck {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

}  // namespace

json BuildCreateRequest(const SandboxTemplate& sb, const RunnerOptions& options) {
  json r = {{"template", sb.template_name}, {"limits", sb.limits}, {"egress", sb.egress}};
  if (!sb.backend.empty()) {
    r["backend"] = sb.backend;
  } else if (!options.backend.empty()) {
    r["backend"] = options.backend;
  }
  for (const auto& [key, value] :
       {std::pair{"trust", &sb.trust}, {"tenant", &sb.tenant}, {"tool", &sb.tool}}) {
    if (!value->empty()) r[key] = *value;
  }
  if (!sb.env.empty()) r["env"] = sb.env;
  if (!sb.secrets.empty()) r["secrets"] = sb.secrets;
  json hosts = json::object();
  for (const auto& [name, fixture] : sb.services) {
    auto it = options.fixtures.find(fixture);
    if (it != options.fixtures.end()) hosts[name] = it->second;
  }
  if (!hosts.empty()) r["hosts"] = hosts;
  return r;
}

json BuildCreateRequest(const Scenario& s, const RunnerOptions& options) {
  return BuildCreateRequest(s.sandbox, options);
}

json RedactSecrets(json request) {
  if (request.contains("secrets") && request["secrets"].is_object()) {
    for (auto& [k, v] : request["secrets"].items()) v = "<redacted>";
  }
  return request;
}

bool Runner::CreateStep(ScenarioRun& run, const std::string& label, const std::string& phase,
                        const json& request, Step* out, std::string* id, bool abort_on_failure) {
  out->phase = phase;
  auto r = out->Time([&] { return target_.Create(request); });
  if (!r.ok()) {
    out->error = r.status().ToString();
    if (abort_on_failure)
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
  auto r = out->Time([&] { return target_.Exec(sandbox, cmd, timeout_s); });
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
                    const std::string& sandbox, Op op, Step* out) {
  out->phase = phase;
  auto r = out->Time([&] {
    return op == Op::kRevert    ? target_.Revert(sandbox)
           : op == Op::kDestroy ? target_.Destroy(sandbox)
           : op == Op::kSuspend ? target_.Suspend(sandbox)
                                : target_.Resume(sandbox);
  });
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

// SCN-5: the calibration sandbox (the task's own create request, with only the CPU limit
// changed: to calibration_millicores, none by default) lives across the capped run. Half its runs
// come before the task and the rest after, so that load that comes or goes during the task weighs
// on both sides; and a no-op command timed in both sandboxes gives the per-exec overhead that the
// check takes off both walls (the command's own time: a runtime that spends 0.7 s on every exec is
// not a weaker cap).
bool Runner::Calibrate(ScenarioRun& run, TaskRecord& rec, const json& request, bool before) {
  const CheckSpec& c = *rec.spec->check;
  const int64_t runs = c.params["calibration_runs"];
  const int64_t first = (runs + 1) / 2;
  const std::string command = SubstituteHarness(rec.spec->command, run.harness);
  auto calibrate = [&](int64_t from, int64_t to) {
    return RepeatExec(run, *rec.spec, rec.calibration_sandbox, command, "calibrate",
                      "calibration (at the calibration quota)", from, to, runs, &rec.calibration);
  };
  if (!before) {
    bool ok = calibrate(first, runs);
    return EndCalibration(run, rec) && ok;
  }
  json req = request;
  int64_t mc = c.params["calibration_millicores"];
  if (mc > 0) {
    req["limits"]["cpu_millicores"] = mc;
  } else {
    req["limits"].erase("cpu_millicores");
  }
  Step create;
  std::string id;
  bool created = CreateStep(run, rec.spec->label, "calibrate-create", req, &create, &id);
  rec.calibration_ops.push_back(create);
  if (!created) return false;
  rec.calibration_sandbox = id;
  bool ok = ExecOverhead(run, rec, id, &rec.overhead_calibration) && calibrate(0, first);
  if (!ok) EndCalibration(run, rec);
  return ok;
}

bool Runner::EndCalibration(ScenarioRun& run, TaskRecord& rec) {
  if (rec.calibration_sandbox.empty() || rec.calibration_ops.size() != 1) return true;
  Step destroy;
  bool destroyed = OpStep(run, rec.spec->label, "calibrate-destroy", rec.calibration_sandbox,
                          Op::kDestroy, &destroy);
  rec.calibration_ops.push_back(destroy);
  return destroyed;
}

bool Runner::RepeatExec(ScenarioRun& run, const TaskSpec& t, const std::string& sandbox,
                        const std::string& command, const std::string& phase,
                        const std::string& what, int64_t from, int64_t to, int64_t total,
                        std::vector<Step>* out) {
  for (int64_t i = from; i < to; ++i) {
    log_.Progress(fmt::format("{}: {} {}/{}", t.label, what, i + 1, total));
    Step s;
    bool ok = ExecStep(run, t.label, phase, sandbox, command, t.timeout_s, &s);
    out->push_back(std::move(s));
    if (!ok) return false;
  }
  return true;
}

bool Runner::ExecOverhead(ScenarioRun& run, TaskRecord& rec, const std::string& sandbox,
                          std::vector<Step>* out) {
  const json& p = rec.spec->check->params;
  const std::string cmd = p["overhead_command"];
  const int64_t runs = p["overhead_runs"];
  for (int64_t i = 0; i < runs && !cmd.empty(); ++i) {
    Step s;
    bool ok =
        ExecStep(run, rec.spec->label, "exec-overhead", sandbox, cmd, rec.spec->timeout_s, &s);
    out->push_back(std::move(s));
    if (!ok) return false;
  }
  return true;
}

std::string Runner::CannotRun(const TaskSpec& t) const {
  if (!t.backend_skip.empty()) return t.backend_skip;
  // (A backend named by a harness value is one the harness chose from info: missing_backend is
  // one the target does NOT offer, on purpose.)
  if (t.sandbox && !t.sandbox->backend.empty() && !info_.backends.empty() &&
      t.sandbox->backend.find("{{") == std::string::npos &&
      std::find(info_.backends.begin(), info_.backends.end(), t.sandbox->backend) ==
          info_.backends.end()) {
    return fmt::format("not run: the target does not offer backend '{}' (it offers: {})",
                       t.sandbox->backend, Join(info_.backends, ", "));
  }
  for (const auto& name : t.harness_values) {
    const HarnessValueSpec* spec = FindHarnessValue(name);
    if (spec && spec->local_only && !options_.target_local) {
      return fmt::format(
          "not run: it uses {{{{harness.{}}}}} ({}), which means something only for a target "
          "whose sandboxes run on the harness's own host; this target is elsewhere",
          name, spec->description);
    }
    if (!options_.harness.count(name)) {
      std::string why;
      if (name == "mirror_addr") why = " (no mirror fixture: --mirror none)";
      if (name == "floored_tenant") {
        why = info_.Has("tenants")
                  ? " (the target names no tenant whose floor is gvisor or microvm: info's "
                    "tenant_floors, or over HTTP the tenant_floor of --token's or "
                    "--second-token's tenant)"
                  : " (the target's info does not offer the feature tenants)";
      }
      if (name == "missing_backend") {
        why = info_.backends.empty()
                  ? " (the target's info lists no backends, so none is known to be missing)"
                  : " (the target offers every backend class of the spec: " +
                        Join(info_.backends, ", ") + ")";
      }
      if (name == "tenant_a" || name == "tenant_b") {
        why = info_.Has("tenants")
                  ? " (over HTTP a tenant is its credential's: give a second tenant's with "
                    "--second-token)"
                  : " (the target's info does not offer the feature tenants)";
      }
      return fmt::format("not run: this run has no {{{{harness.{}}}}}{}", name, why);
    }
  }
  if (t.check && t.check->kind == "expect" && t.check->params["host_absent"].is_object() &&
      t.check->params["host_absent"]["required"].get<bool>() && !options_.target_local) {
    return "not run: the check looks at the harness's own host's processes, and this target's "
           "sandboxes run elsewhere";
  }
  return "";
}

void Runner::HostScan(TaskRecord& rec, const std::string& after) {
  if (!rec.spec->check || rec.spec->check->kind != "expect") return;
  json h = rec.spec->check->params["host_absent"];
  // "before-destroy": the control of a scan after the destroy — the process must be seen on
  // this host while the sandbox lives, or its absence afterwards proves nothing (a guest's or
  // gVisor's processes are not the host's).
  const bool control = after == "before-destroy";
  if (!h.is_object() || h["after"] != (control ? "destroy" : after)) return;

  if (!options_.target_local) {
    rec.host_note = "no scan of the host's processes: the target's sandboxes run elsewhere";
    return;
  }
  SubstituteHarness(h, options_.harness);
  log_.Progress(fmt::format("{}: looking for '{}' on this host", rec.spec->label,
                            h["process"].get<std::string>()));
  // The control waits (bounded, 3 s) for the process to show: a background process the
  // command started may not have exec'd when the command's answer came back.
  json scan =
      control ? AwaitHostProcess(h["process"], 3.0) : ScanHostProcesses(h["process"], h["wait_s"]);
  scan["after"] = after;
  rec.host_scans.push_back(scan);
}

void Runner::CountBeacon(TaskRecord& rec, const std::string& phase) {
  if (!rec.spec->check || rec.spec->check->kind != "expect") return;
  json b = rec.spec->check->params["beacon"];
  if (!b.is_object()) return;
  if (!options_.mirror) {
    rec.beacon = {{"note",
                   "the harness has no mirror of its own whose log could count the beacon's "
                   "beats (--mirror none or HOST:PORT)"}};
    return;
  }
  if (rec.beacon.contains("note")) return;
  SubstituteHarness(b, options_.harness);
  const std::string path = b["path"];
  auto beats_since = [&](size_t mark) {
    int n = 0;
    for (const auto& line : options_.mirror->LogSince(mark))
      n += line.find(path) != std::string::npos;
    return n;
  };
  if (phase == "before-destroy") {
    // The control: two beats while the sandbox lives (bounded: 5 s), or none after the destroy
    // would prove nothing (a runtime whose background processes end with their command).
    log_.Progress(fmt::format("{}: waiting for the beacon's beats at the mirror", rec.spec->label));
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    int before = beats_since(rec.beacon_mark);
    while (before < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      before = beats_since(rec.beacon_mark);
    }
    rec.beacon = {{"path", path}, {"before", before}, {"wait_s", b["wait_s"]}};
    return;
  }
  if (!rec.beacon.contains("before")) return;
  // After the destroy answered: what still beats is a survivor. The window is the beacon's
  // period many times over (it beats every 0.2 s).
  const size_t mark = options_.mirror->LogCount();
  log_.Progress(fmt::format("{}: listening {:.1f} s for the beacon after the destroy",
                            rec.spec->label, b["wait_s"].get<double>()));
  std::this_thread::sleep_for(std::chrono::duration<double>(b["wait_s"].get<double>()));
  rec.beacon["after"] = beats_since(mark);
}

bool Runner::ThenStep(ScenarioRun& run, TaskRecord& rec, const std::string& sandbox,
                      const char* phase, std::optional<Step>* out) {
  const json& then = rec.spec->check->params["then"];
  std::optional<Step>& step = out ? *out : rec.then;
  step.emplace();
  std::string cmd = SubstituteHarness(then["command"].get<std::string>(), run.harness);
  return ExecStep(run, rec.spec->label, phase, sandbox, cmd, then["timeout_s"], &*step);
}

bool Runner::PlantCanaries(ScenarioRun& run, TaskRecord& rec, const std::string& sandbox) {
  if (rec.task && rec.task->answer.state == "CRASHED") {  // after the task (not canaries_before)
    rec.canary_note = "none planted: the task ended the sandbox";
    return true;
  }
  std::random_device rd;
  rec.canary_token = fmt::format("{:08x}{:04x}", rd(), rd() & 0xffff);
  rec.plant.emplace();
  return ExecStep(run, rec.spec->label, "plant", sandbox, "sbx-canary plant " + rec.canary_token,
                  run.scenario->after_each.timeout_s, &*rec.plant);
}

bool Runner::CheckCanaries(ScenarioRun& run, TaskRecord& rec, const std::string& sandbox) {
  if (!rec.plant) return true;
  const ExecAnswer& a = rec.plant->answer;
  auto planted = ParseCanaryPlant(a.stdout_text);
  if (!planted || planted->planted.empty()) return true;  // judged from the plant step alone
  rec.canary_check.emplace();
  return ExecStep(run, rec.spec->label, "canary-check", sandbox,
                  fmt::format("sbx-canary check {} {}", rec.canary_token, planted->port),
                  run.scenario->after_each.timeout_s, &*rec.canary_check);
}

bool Runner::Bracket(ScenarioRun& run, TaskRecord& rec, const std::string& sandbox) {
  const json& p = rec.spec->check->params;
  const double timeout = rec.spec->timeout_s;
  for (const auto& [key, phase] :
       {std::pair{"under_command", "bracket-under"}, std::pair{"over_command", "bracket-over"}}) {
    std::string cmd = p[key];
    if (cmd.empty()) continue;
    log_.Progress(fmt::format("{}: {}", rec.spec->label, phase));
    Step s;
    bool ok = ExecStep(run, rec.spec->label, phase, sandbox, cmd, timeout, &s);
    rec.bracket.push_back(std::move(s));
    if (!ok) return false;
  }
  // Leave the sandbox as the task's revert did: clean and usable.
  Step revert;
  bool ok = OpStep(run, rec.spec->label, "bracket-revert", sandbox, Op::kRevert, &revert);
  rec.bracket.push_back(std::move(revert));
  return ok;
}

bool Runner::RunTask(ScenarioRun& run, TaskRecord& rec, size_t index) {
  const TaskSpec& t = *rec.spec;
  // A backend overlay's skip says more than a missing feature (it names why the backend lacks it).
  if (!t.backend_skip.empty()) rec.skip_reason = t.backend_skip;
  if (t.check && rec.skip_reason.empty()) {
    std::vector<std::string> missing;
    // The backend the task's sandbox lands on: its own, else the one asked for (--backend).
    const std::string backend =
        t.sandbox && !t.sandbox->backend.empty() ? t.sandbox->backend : options_.backend;
    for (const auto& f : t.check->features) {
      if (!info_.HasOn(f, backend)) missing.push_back(f);
    }
    if (!missing.empty()) {
      bool elsewhere = std::all_of(missing.begin(), missing.end(),
                                   [&](const std::string& f) { return info_.Has(f); });
      rec.skip_reason =
          elsewhere ? fmt::format("not run: the target does not offer {} on backend '{}'",
                                  Join(missing, ", "), backend)
                    : fmt::format("not run: the target does not offer {}", Join(missing, ", "));
    }
  }
  if (rec.skip_reason.empty()) rec.skip_reason = CannotRun(t);
  if (!rec.skip_reason.empty()) {
    Step skip;
    skip.phase = "skip";
    skip.error = rec.skip_reason;
    log_.StepLine(t.label, skip);
    return true;
  }
  rec.ran = true;
  if (t.walk) return RunWalk(run, rec);
  if (!t.sandbox) return RunTaskIn(run, rec, index, run.sandbox_id, scenario_request_);
  // A sandbox of the task's own: fresh for it, destroyed after it whatever happened.
  json request = BuildCreateRequest(*t.sandbox, options_);
  SubstituteHarness(request, run.harness);
  rec.own_request = RedactSecrets(request);
  bool may_refuse = t.check && t.check->kind == "expect" &&
                    (t.check->params["may_refuse"] || t.check->params["must_refuse"]);
  // Whatever happens to the task, a neighbour that was made is destroyed after it.
  auto destroy_neighbour = [&] {
    if (rec.neighbour_sandbox.empty()) return true;
    rec.neighbour_destroy.emplace();
    return OpStep(run, t.label, "neighbour-destroy", rec.neighbour_sandbox, Op::kDestroy,
                  &*rec.neighbour_destroy);
  };
  if (t.neighbour) {
    // The neighbour first, holding its load before the task's sandbox exists: a limit shared by
    // the runtime's sandboxes is then already partly spent when the task's is made.
    rec.neighbour_create.emplace();
    if (CreateStep(run, t.label, "neighbour-create", request, &*rec.neighbour_create,
                   &rec.neighbour_sandbox, false)) {
      rec.neighbour.emplace();
      if (!ExecStep(run, t.label, "neighbour", rec.neighbour_sandbox,
                    SubstituteHarness(t.neighbour->command, run.harness), t.neighbour->timeout_s,
                    &*rec.neighbour)) {
        destroy_neighbour();
        return false;
      }
    }
  }
  rec.own_create.emplace();
  if (!CreateStep(run, t.label, "create", request, &*rec.own_create, &rec.own_sandbox,
                  !may_refuse)) {
    destroy_neighbour();
    if (!may_refuse) return false;
    rec.create_refused = rec.own_create->error;
    return true;
  }
  if (options_.mirror) rec.beacon_mark = options_.mirror->LogCount();
  bool ok = RunTaskIn(run, rec, index, rec.own_sandbox, request);
  if (ok && t.fresh && !Interrupted()) ok = RunFresh(run, rec, rec.own_sandbox, request);
  if (ok && t.bursts && !Interrupted()) ok = RunBursts(run, rec, request);
  if (ok && t.foreign && !Interrupted()) ok = RunForeign(run, rec, rec.own_sandbox);
  bool interrupted = Interrupted();
  if (interrupted) ClearPendingInterrupt();  // still destroy it; a second signal stops that
  bool destroyed = true;
  if (!rec.own_sandbox.empty()) {  // (a fresh round whose create failed left none)
    if (ok) HostScan(rec, "before-destroy");
    if (ok) CountBeacon(rec, "before-destroy");
    rec.own_destroy.emplace();
    destroyed = OpStep(run, t.label, "destroy", rec.own_sandbox, Op::kDestroy, &*rec.own_destroy);
  }
  destroyed = destroy_neighbour() && destroyed;
  if (interrupted) {
    if (run.abort_error.empty()) run.abort_error = "interrupted";
    return false;
  }
  if (ok && destroyed) HostScan(rec, "destroy");
  if (ok && destroyed) CountBeacon(rec, "destroy");
  return ok && destroyed;
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
  run.harness = options_.harness;
  json request = CreateRequest(s);
  SubstituteHarness(request, run.harness);
  run.create_request = RedactSecrets(request);
  gateway_seen_ = 0;
  // The scenario's own sandbox is made only if a task runs in it.
  bool shared = std::any_of(s.tasks.begin(), s.tasks.end(),
                            [](const TaskSpec& t) { return !t.sandbox.has_value(); });
  if (!options_.backend.empty() && !info_.backends.empty() &&
      std::find(info_.backends.begin(), info_.backends.end(), options_.backend) ==
          info_.backends.end()) {
    run.skip_reason = fmt::format("the target does not offer backend '{}' (it offers: {})",
                                  options_.backend, Join(info_.backends, ", "));
    for (auto& t : run.tasks) t.skip_reason = run.skip_reason;
  } else if (!s.backend_skip.empty()) {
    run.skip_reason = s.backend_skip;
    for (auto& t : run.tasks) t.skip_reason = run.skip_reason;
  } else {
    if (shared) run.create.emplace();
    if (!shared || CreateStep(run, "sandbox", "create", request, &*run.create, &run.sandbox_id)) {
      scenario_request_ = request;
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
      if (shared) {
        run.destroy.emplace();
        log_.Progress("destroy");
        OpStep(run, "sandbox", "destroy", run.sandbox_id, Op::kDestroy, &*run.destroy);
      }
    }
  }
  log_.ClearProgress();
  JudgeScenario(run, info_);
  run.seconds = SecondsSince(t0);
  return run;
}

}  // namespace sandcheck
