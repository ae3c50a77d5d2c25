// sbx-bench-lifecycle: Google Benchmark micro-benchmarks of every lifecycle stage the public
// runtime API reaches (sbx/runtime.h; LC-1, POOL-2, SNAP-2..SNAP-4, NFR-1, NFR-4):
//   one-shot run of `true` (with the runtime's own per-stage timings as counters), the same
//   through the warm pool (take + return), create, destroy + reclaim, exec of `true` in a
//   warm sandbox, revert, first exec after a revert, suspend + resume.
// Background work (reclaim, pool refill, spares) is drained with the timer paused, so each
// iteration meets a settled runtime and pays only for its own stage.
//
// --backend=NAME (native, oci, gvisor; default native) runs every benchmark on that backend:
// the same benchmark file built against two runtimes is the A/B of a backend change.
//
// Needs root (namespaces, cgroups): without it, exits 77 (ctest: skipped) with a loud message.
// Compare two runs with bench/compare (A/B, noise threshold).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "sbx/runtime.h"

namespace {

std::unique_ptr<sbx::Runtime> g_rt;      // one-shot runs without a pool, persistent sandboxes
std::unique_ptr<sbx::Runtime> g_pooled;  // warm_pool on
std::string g_backend = "native";        // --backend=NAME

sbx::SandboxSpec Spec() {
  sbx::SandboxSpec spec;
  spec.backend = g_backend;
  return spec;
}

void Fail(benchmark::State& state, const std::string& what) { state.SkipWithError(what.c_str()); }

// The runtime's own stage timings (LC-1) as average counters, in ms.
void AddStages(const sbx::StageTimings& s, sbx::StageTimings* sum, int* n) {
  auto add = [](double* acc, double v) {
    if (v >= 0) *acc += v;
  };
  add(&sum->allocate, s.allocate);
  add(&sum->initialize, s.initialize);
  add(&sum->inject_context, s.inject_context);
  add(&sum->execute, s.execute);
  add(&sum->collect, s.collect);
  add(&sum->destroy, s.destroy);
  add(&sum->cleanup, s.cleanup);
  ++*n;
}

void ReportStages(benchmark::State& state, const sbx::StageTimings& sum, int n) {
  if (n == 0) return;
  auto c = [&](const char* name, double v) {
    state.counters[name] = benchmark::Counter(v * 1e3 / n);
  };
  c("allocate_ms", sum.allocate);
  c("initialize_ms", sum.initialize);
  c("inject_context_ms", sum.inject_context);
  c("execute_ms", sum.execute);
  c("collect_ms", sum.collect);
  c("destroy_ms", sum.destroy);
  c("cleanup_ms", sum.cleanup);
}

sbx::StageTimings Zero() { return {0, 0, 0, 0, 0, 0, 0}; }

// LC-1: allocate → initialize → inject → execute → collect → destroy → cleanup, one shot.
void BM_OneShotRun(benchmark::State& state) {
  sbx::ExecRequest req;
  req.sandbox = Spec();
  req.exec.command = "true";
  sbx::StageTimings sum = Zero();
  int n = 0;
  for (auto _ : state) {
    sbx::ExecResult r = g_rt->Run(req);
    if (r.status != sbx::ExecStatus::kOk || r.exit_code != 0)
      return Fail(state, "run: " + r.reason);
    AddStages(r.stages, &sum, &n);
    state.PauseTiming();
    g_rt->Drain();
    state.ResumeTiming();
  }
  ReportStages(state, sum, n);
}
BENCHMARK(BM_OneShotRun)->Unit(benchmark::kMillisecond)->UseRealTime();

// POOL-2/POOL-3: take a warm sandbox, run, return it (the return and refill are drained off the
// clock).
void BM_PooledRun(benchmark::State& state) {
  sbx::ExecRequest req;
  req.sandbox = Spec();
  req.exec.command = "true";
  (void)g_pooled->Run(req);  // fills the pool for this key
  g_pooled->Drain();
  sbx::StageTimings sum = Zero();
  int n = 0;
  for (auto _ : state) {
    sbx::ExecResult r = g_pooled->Run(req);
    if (r.status != sbx::ExecStatus::kOk || r.exit_code != 0)
      return Fail(state, "run: " + r.reason);
    AddStages(r.stages, &sum, &n);
    state.PauseTiming();
    g_pooled->Drain();
    state.ResumeTiming();
  }
  ReportStages(state, sum, n);
}
BENCHMARK(BM_PooledRun)->Unit(benchmark::kMillisecond)->UseRealTime();

// LC-2, LC-3: a persistent sandbox (the demo's actor), created; destroyed off the clock.
void BM_Create(benchmark::State& state) {
  for (auto _ : state) {
    auto id = g_rt->Create(Spec());
    if (!id.ok()) return Fail(state, id.status().ToString());
    state.PauseTiming();
    (void)g_rt->Destroy(*id);
    g_rt->Drain();
    state.ResumeTiming();
  }
}
BENCHMARK(BM_Create)->Unit(benchmark::kMillisecond)->UseRealTime();

// LC-7, LC-8, NFR-4: destroy and the reclaim behind it (Drain) of a sandbox that left a file
// and a running process; creating it is off the clock.
void BM_DestroyReclaim(benchmark::State& state) {
  for (auto _ : state) {
    state.PauseTiming();
    auto id = g_rt->Create(Spec());
    if (!id.ok()) return Fail(state, id.status().ToString());
    (void)g_rt->Exec(*id, {.command = "echo x > /work/f; sleep 1000 > /dev/null 2>&1 &"});
    g_rt->Drain();
    state.ResumeTiming();
    auto d = g_rt->Destroy(*id);
    g_rt->Drain();
    if (!d.ok()) return Fail(state, d.status().ToString());
  }
}
BENCHMARK(BM_DestroyReclaim)->Unit(benchmark::kMillisecond)->UseRealTime();

// NFR-1: exec of `true` in a warm (created, idle) sandbox.
void BM_ExecTrue(benchmark::State& state) {
  auto id = g_rt->Create(Spec());
  if (!id.ok()) return Fail(state, id.status().ToString());
  g_rt->Drain();
  sbx::StageTimings sum = Zero();
  int n = 0;
  for (auto _ : state) {
    auto r = g_rt->Exec(*id, {.command = "true"});
    if (!r.ok() || r->exit_code != 0) {
      (void)g_rt->Destroy(*id);
      return Fail(state, "exec failed");
    }
    AddStages(r->stages, &sum, &n);
  }
  ReportStages(state, sum, n);
  (void)g_rt->Destroy(*id);
  g_rt->Drain();
}
BENCHMARK(BM_ExecTrue)->Unit(benchmark::kMillisecond)->UseRealTime();

// SNAP-2, SNAP-4: revert after a task wrote to /work (overlay reset, fresh process state); the
// task and the background teardown of the old instance are off the clock.
void BM_Revert(benchmark::State& state) {
  auto id = g_rt->Create(Spec());
  if (!id.ok()) return Fail(state, id.status().ToString());
  for (auto _ : state) {
    state.PauseTiming();
    (void)g_rt->Exec(*id,
                     {.command = "echo x > /work/f && mkdir -p /work/d && echo y > /work/d/g"});
    g_rt->Drain();
    state.ResumeTiming();
    auto r = g_rt->Revert(*id);
    if (!r.ok()) {
      (void)g_rt->Destroy(*id);
      return Fail(state, r.status().ToString());
    }
  }
  (void)g_rt->Destroy(*id);
  g_rt->Drain();
}
BENCHMARK(BM_Revert)->Unit(benchmark::kMillisecond)->UseRealTime();

// SNAP-4: the first request after a revert (the demo's "first request after each revert").
void BM_FirstExecAfterRevert(benchmark::State& state) {
  auto id = g_rt->Create(Spec());
  if (!id.ok()) return Fail(state, id.status().ToString());
  for (auto _ : state) {
    state.PauseTiming();
    (void)g_rt->Exec(*id, {.command = "echo x > /work/f"});
    (void)g_rt->Revert(*id);
    g_rt->Drain();
    state.ResumeTiming();
    auto r = g_rt->Exec(*id, {.command = "true"});
    if (!r.ok() || r->exit_code != 0) {
      (void)g_rt->Destroy(*id);
      return Fail(state, "exec after revert failed");
    }
  }
  (void)g_rt->Destroy(*id);
  g_rt->Drain();
}
BENCHMARK(BM_FirstExecAfterRevert)->Unit(benchmark::kMillisecond)->UseRealTime();

// SNAP-3: suspend + resume of an idle sandbox.
void BM_SuspendResume(benchmark::State& state) {
  auto id = g_rt->Create(Spec());
  if (!id.ok()) return Fail(state, id.status().ToString());
  double suspend = 0, resume = 0;
  int n = 0;
  for (auto _ : state) {
    auto s = g_rt->Suspend(*id);
    auto r = g_rt->Resume(*id);
    if (!s.ok() || !r.ok()) {
      (void)g_rt->Destroy(*id);
      return Fail(state, "suspend/resume failed");
    }
    suspend += *s;
    resume += *r;
    ++n;
  }
  if (n > 0) {
    state.counters["suspend_ms"] = benchmark::Counter(suspend * 1e3 / n);
    state.counters["resume_ms"] = benchmark::Counter(resume * 1e3 / n);
  }
  (void)g_rt->Destroy(*id);
  g_rt->Drain();
}
BENCHMARK(BM_SuspendResume)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  // Our one flag, taken out before Google Benchmark's check of the rest.
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--backend=", 0) == 0) {
      g_backend = a.substr(10);
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::AddCustomContext("backend", g_backend);
  if (geteuid() != 0) {
    std::fprintf(stderr, "sbx-bench-lifecycle: LOUD SKIP: needs root (namespaces, cgroups)\n");
    return 77;
  }
  auto rt = sbx::Runtime::Open({});
  sbx::RuntimeOptions po;
  po.warm_pool = true;
  auto pooled = sbx::Runtime::Open(po);
  if (!rt.ok() || !pooled.ok()) {
    std::fprintf(stderr, "sbx-bench-lifecycle: %s\n",
                 (!rt.ok() ? rt.status() : pooled.status()).ToString().c_str());
    return 3;
  }
  g_rt = std::move(*rt);
  g_pooled = std::move(*pooled);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  g_pooled.reset();
  g_rt.reset();
  return 0;
}
