// Runner::RunBursts (TaskSpec::bursts, POOL-6): bursts of one-shot runs through the target's
// warm pool, the runs of a burst at once. What each run's sandbox shows about its birth is
// judged by kind pool_grows (checks/pool_checks.cc).
#include <fmt/format.h>

#include <chrono>
#include <latch>
#include <thread>

#include "run/runner.h"

namespace sandcheck {

using nlohmann::json;

bool Runner::RunBursts(ScenarioRun& run, TaskRecord& rec, const json& request) {
  const TaskSpec& t = *rec.spec;
  const TaskSpec::Bursts& b = *t.bursts;
  const std::string cmd = SubstituteHarness(t.command, run.harness);
  // One handle per caller of a burst, made once: a burst's runs are concurrent calls.
  std::vector<std::unique_ptr<Target>> callers;
  for (int i = 0; i < b.size; ++i) {
    auto h = target_.ForThread();
    if (!h.ok()) {
      rec.bursts_note = "no concurrent callers: " + h.status().ToString();
      log_.Progress(fmt::format("{}: {}", t.label, rec.bursts_note));
      return true;
    }
    callers.push_back(std::move(*h));
  }
  for (int k = 0; k < b.count; ++k) {
    // The pool's refill after the last burst (background work of the target) is done before the
    // next one: demand, not a race with the refill, decides what the burst finds.
    if (sbx::Status st = target_.Settle(); !st.ok()) {
      run.abort_error = fmt::format("{}: the target did not settle before burst {}: {}", t.label,
                                    k + 1, st.ToString());
      return false;
    }
    // Then a quiet time, part of the demand's shape (not a wait for anything): what the refill
    // made then has a PID 1 older than a quick call by at least pause_s, however soon before
    // the burst the refill finished.
    std::this_thread::sleep_for(std::chrono::duration<double>(b.pause_s));
    log_.Progress(
        fmt::format("{}: burst {}/{} ({} pooled runs at once)", t.label, k + 1, b.count, b.size));
    std::vector<Step> steps(static_cast<size_t>(b.size), Step::ExecOf("burst-run", cmd));
    std::vector<sbx::Status> failed(static_cast<size_t>(b.size), sbx::Status::Ok());
    {
      std::latch go(b.size);
      std::vector<std::jthread> threads;
      for (size_t i = 0; i < callers.size(); ++i) {
        threads.emplace_back([&, i] {
          go.arrive_and_wait();
          auto r = steps[i].Time([&] { return callers[i]->RunPooled(request, cmd, t.timeout_s); });
          if (r.ok()) {
            steps[i].answer = *r;
          } else {
            failed[i] = r.status();
            steps[i].error = r.status().ToString();
          }
        });
      }
    }
    for (size_t i = 0; i < steps.size(); ++i) {
      if (failed[i].code() == sbx::Code::kUnsupported) {
        rec.bursts_note = "no pooled one-shot runs: " + failed[i].ToString();
        log_.Progress(fmt::format("{}: {}", t.label, rec.bursts_note));
        return true;
      }
      log_.StepLine(fmt::format("{} burst {}/{} run {}", t.label, k + 1, b.count, i + 1), steps[i]);
    }
    rec.bursts.push_back(std::move(steps));
    if (Interrupted()) {
      if (run.abort_error.empty()) run.abort_error = "interrupted";
      return false;
    }
  }
  return true;
}

}  // namespace sandcheck
