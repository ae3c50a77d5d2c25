// Runner::RunFresh (TaskSpec::fresh, PROD-5): revert against delete-and-create, in turn.
#include <fmt/format.h>

#include <random>

#include "checks/evidence.h"
#include "common/subprocess.h"
#include "run/runner.h"

namespace sandcheck {

using nlohmann::json;

bool Runner::RunFresh(ScenarioRun& run, TaskRecord& rec, std::string& sandbox,
                      const json& request) {
  const TaskSpec& t = *rec.spec;
  const double timeout = run.scenario->after_each.timeout_s;
  std::random_device rd;
  auto token = [&] { return fmt::format("{:08x}{:04x}", rd(), rd() & 0xffff); };
  // The first request after either way looks for what was planted before it.
  auto check_cmd = [](const std::string& tok, const std::optional<Step>& plant) {
    auto p = plant ? ParseCanaryPlant(plant->answer.stdout_text) : std::nullopt;
    return fmt::format("sbx-canary check {} {}", tok, p ? p->port : 0);
  };
  for (int i = 0; i < t.fresh->rounds; ++i) {
    TaskRecord::FreshRound r;
    const std::string label = fmt::format("{} round {}/{}", t.label, i + 1, t.fresh->rounds);
    log_.Progress(fmt::format("{}: revert, then delete and create", label));
    // The revert way.
    r.revert_token = token();
    r.plant_revert.emplace();
    bool ok = ExecStep(run, label, "plant", sandbox, "sbx-canary plant " + r.revert_token, timeout,
                       &*r.plant_revert);
    r.revert.emplace();
    ok = ok && OpStep(run, label, "revert", sandbox, Op::kRevert, &*r.revert);
    if (ok) {
      r.check_revert.emplace();
      ok = ExecStep(run, label, "canary-check", sandbox, check_cmd(r.revert_token, r.plant_revert),
                    timeout, &*r.check_revert);
    }
    // The delete-and-create way: the same request, a new sandbox.
    if (ok) {
      r.fresh_token = token();
      r.plant_fresh.emplace();
      ok = ExecStep(run, label, "plant", sandbox, "sbx-canary plant " + r.fresh_token, timeout,
                    &*r.plant_fresh);
    }
    if (ok) {
      r.destroy.emplace();
      ok = OpStep(run, label, "fresh-destroy", sandbox, Op::kDestroy, &*r.destroy);
      if (ok) sandbox.clear();
    }
    if (ok) {
      r.create.emplace();
      ok = CreateStep(run, label, "fresh-create", request, &*r.create, &sandbox);
    }
    if (ok) {
      r.check_fresh.emplace();
      ok = ExecStep(run, label, "fresh-check", sandbox, check_cmd(r.fresh_token, r.plant_fresh),
                    timeout, &*r.check_fresh);
    }
    rec.fresh.push_back(std::move(r));
    if (!ok) return false;
    if (Interrupted()) return true;  // the caller destroys what is there and stops
  }
  return true;
}

}  // namespace sandcheck
