// Latency figures of native, oci and gvisor side by side on this machine (docs/backends.md):
// cold start, warm start (a sandbox from the warm pool), revert (with the spare ready), the
// first request after a revert, and teardown, p50/p95. A measurement, not a check: disabled by
// default; run it with
//   build/tests/oci_latency_itest --gtest_also_run_disabled_tests [SBX_LATENCY_SAMPLES=N]
// It prints a markdown table (and asserts only that every operation succeeded).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "backend/common/testing.h"
#include "sbx/runtime.h"

namespace sbx {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Series {
  std::vector<double> v;
  void Add(double x) { v.push_back(x); }
  std::string P() const {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f / %.1f", backendtest::Percentile(v, 0.5) * 1e3,
                  backendtest::Percentile(v, 0.95) * 1e3);
    return buf;
  }
};

TEST(Latency, DISABLED_ColdWarmRevertTeardownPerBackend) {
  if (geteuid() != 0) GTEST_SKIP() << "LOUD SKIP: needs root";
  int samples =
      std::getenv("SBX_LATENCY_SAMPLES") ? std::atoi(std::getenv("SBX_LATENCY_SAMPLES")) : 20;
  auto rt = Runtime::Open(RuntimeOptions{});
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  RuntimeOptions pooled_opts;
  pooled_opts.warm_pool = true;
  pooled_opts.pool_floor = 1;
  auto pooled = Runtime::Open(pooled_opts);
  ASSERT_TRUE(pooled.ok()) << pooled.status().ToString();

  std::printf(
      "\n| backend | cold start (create+init) | cold run `true` end to end | warm start (pool) | "
      "create (persistent) | revert (spare ready) | first request after revert | "
      "teardown (one-shot destroy+cleanup) | destroy (caller's part) |\n"
      "|---|---|---|---|---|---|---|---|---|\n");
  for (std::string backend : {"native", "oci", "gvisor"}) {
    int n = backend == "gvisor" ? std::max(5, samples / 2) : samples;
    Series cold, cold_e2e, warm, create, revert, first, teardown, destroy;
    for (int i = 0; i < n; ++i) {
      ExecRequest req;
      req.sandbox.backend = backend;
      req.exec.command = "true";
      auto t0 = Clock::now();
      ExecResult r = (*rt)->Run(req);
      cold_e2e.Add(Since(t0));
      ASSERT_EQ(r.status, ExecStatus::kOk) << backend << ": " << r.reason;
      cold.Add(r.stages.allocate + r.stages.initialize);
      teardown.Add(r.stages.destroy + r.stages.cleanup);
    }
    (*pooled)->Run(ExecRequest{.sandbox = {.backend = backend}, .exec = {.command = "true"}});
    for (int i = 0; i < n; ++i) {
      (*pooled)->Drain();  // the pool is refilled
      ExecRequest req;
      req.sandbox.backend = backend;
      req.exec.command = "true";
      ExecResult r = (*pooled)->Run(req);
      ASSERT_EQ(r.status, ExecStatus::kOk) << backend << ": " << r.reason;
      if (r.stages.initialize == 0) warm.Add(r.stages.allocate + r.stages.inject_context);
    }
    auto id = (*rt)->Create(SandboxSpec{.backend = backend});
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE((*rt)->Exec(*id, ExecSpec{.command = "echo x > /work/x"}).ok());
      (*rt)->Drain();  // the spare is ready
      auto s = (*rt)->Revert(*id);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      revert.Add(*s);
      auto t0 = Clock::now();
      auto e = (*rt)->Exec(*id, ExecSpec{.command = "true"});
      first.Add(Since(t0));
      ASSERT_TRUE(e.ok() && e->status == ExecStatus::kOk);
    }
    auto d = (*rt)->Destroy(*id);
    ASSERT_TRUE(d.ok());
    for (int i = 0; i < std::min(n, 10); ++i) {
      auto t0 = Clock::now();
      auto sid = (*rt)->Create(SandboxSpec{.backend = backend});
      create.Add(Since(t0));
      ASSERT_TRUE(sid.ok());
      (*rt)->Drain();
      auto s = (*rt)->Destroy(*sid);
      ASSERT_TRUE(s.ok());
      destroy.Add(*s);
      (*rt)->Drain();
    }
    std::printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", backend.c_str(),
                cold.P().c_str(), cold_e2e.P().c_str(), warm.P().c_str(), create.P().c_str(),
                revert.P().c_str(), first.P().c_str(), teardown.P().c_str(), destroy.P().c_str());
    std::fflush(stdout);
  }
  std::printf("(ms, p50 / p95; %d samples, gvisor %d; load average %s)\n", samples,
              std::max(5, samples / 2), backendtest::Slurp("/proc/loadavg").substr(0, 14).c_str());
}

TEST(Latency, DISABLED_GvisorCheckpointRestoreAndTheSparePool) {
  // SNAP-3, SNAP-4, POOL-8: suspend = checkpoint, resume = restore, against memory held; and
  // revert with a pre-restored spare vs a revert that has to wait for the restore.
  if (geteuid() != 0) GTEST_SKIP() << "LOUD SKIP: needs root";
  int n = std::getenv("SBX_LATENCY_SAMPLES") ? std::atoi(std::getenv("SBX_LATENCY_SAMPLES")) : 10;
  auto rt = Runtime::Open(RuntimeOptions{});
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  std::printf("\n| memory held | checkpoint (suspend) | restore (resume) |\n|---|---|---|\n");
  for (int mib : {0, 64, 256}) {
    auto id = (*rt)->Create(
        SandboxSpec{.backend = "gvisor", .limits = {.memory_bytes = int64_t{1} << 30}});
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    if (mib > 0) {
      auto h = (*rt)->Exec(*id, ExecSpec{.command = "sbx-memhog --hold " + std::to_string(mib) +
                                                    " </dev/null >/dev/null 2>&1"});
      ASSERT_TRUE(h.ok() && h->status == ExecStatus::kOk);
    }
    Series ckpt, restore;
    for (int i = 0; i < std::max(3, n / 2); ++i) {
      auto s = (*rt)->Suspend(*id);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      auto r = (*rt)->Resume(*id);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ckpt.Add(*s);
      restore.Add(*r);
    }
    std::printf("| %d MiB | %s | %s |\n", mib, ckpt.P().c_str(), restore.P().c_str());
    ASSERT_TRUE((*rt)->Destroy(*id).ok());
    (*rt)->Drain();
  }
  auto id = (*rt)->Create(SandboxSpec{.backend = "gvisor"});
  ASSERT_TRUE(id.ok());
  Series ready, waiting;
  for (int i = 0; i < n; ++i) {
    (*rt)->Drain();
    auto a = (*rt)->Revert(*id);  // the spare is ready
    auto b = (*rt)->Revert(*id);  // the next spare has only just started its restore
    ASSERT_TRUE(a.ok() && b.ok());
    ready.Add(*a);
    waiting.Add(*b);
  }
  std::printf(
      "\n| gvisor revert | p50 / p95 (ms) |\n|---|---|\n| with a pre-restored spare | %s |\n"
      "| waiting for the restore | %s |\n(%d samples; load average %s)\n",
      ready.P().c_str(), waiting.P().c_str(), n,
      backendtest::Slurp("/proc/loadavg").substr(0, 14).c_str());
  ASSERT_TRUE((*rt)->Destroy(*id).ok());
}

}  // namespace
}  // namespace sbx
