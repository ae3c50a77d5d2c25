// Persistent sandboxes: revert, suspend/resume, crash recovery (SNAP-1..SNAP-3, SCN-6, SCN-7).
// Real kernel objects; canaries are planted everywhere a task could leave state.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include <fstream>

#include <gtest/gtest.h>

#include "sbx/runtime.h"

namespace sbx {
namespace {

class PersistentSandbox : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) return;
    RuntimeOptions o;
    o.snapshot_dir = "/tmp/sandcheck-test-snapshots";
    auto rt = Runtime::Open(o);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value().release();
  }
  static void TearDownTestSuite() {
    delete rt_;
    rt_ = nullptr;
    std::error_code ec;
    std::filesystem::remove_all("/tmp/sandcheck-test-snapshots", ec);  // the suite's own root
  }
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "LOUD SKIP: integration tests need root";
    auto id = rt_->Create(SandboxSpec{.limits = {.memory_bytes = 256 << 20}});
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    id_ = *id;
  }
  void TearDown() override {
    if (!id_.empty()) {
      EXPECT_TRUE(rt_->Destroy(id_).ok());
    }
  }

  ExecResult Exec(const std::string& cmd, double timeout = 20) {
    auto r = rt_->Exec(id_, ExecSpec{.command = cmd, .timeout_s = timeout});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : ExecResult{};
  }
  double Revert() {
    auto s = rt_->Revert(id_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : -1;
  }

  static Runtime* rt_;
  std::string id_;
};
Runtime* PersistentSandbox::rt_ = nullptr;

constexpr const char* kPlantCanaries =
    "echo c > /work/canary; mkdir -p /work/d/e; echo c > /tmp/canary; echo c > $HOME/canary;"
    "echo 'export CANARY=1' > $HOME/.profile;"
    "(sleep 1000 &); nc -l -p 8080 >/dev/null 2>&1 & echo planted";
constexpr const char* kLookForCanaries =
    "ls -A /work /tmp $HOME | grep -v ':$' | grep -v '^$';"
    "ps -o comm | grep -E 'sleep|nc' ;"
    "grep -c ':1F90 ' /proc/net/tcp; echo env=${CANARY:-none}";

TEST_F(PersistentSandbox, StateSurvivesBetweenExecsUntilRevert) {
  EXPECT_EQ(Exec(kPlantCanaries).stdout_tail, "planted\n");
  ExecResult seen = Exec("cat /work/canary; ps -o comm | grep -c sleep");
  EXPECT_EQ(seen.stdout_tail, "c\n1\n") << "the sandbox must live across execs";
  Revert();
  // SCN-7, SNAP-2: nothing of the task is left: files, processes, sockets, environment.
  ExecResult after = Exec(kLookForCanaries);
  EXPECT_EQ(after.stdout_tail, "0\nenv=none\n");
  EXPECT_EQ(Exec("find /work -mindepth 1 | wc -l").stdout_tail, "0\n");
  // Revert twice in a row works.
  Revert();
  Revert();
  EXPECT_EQ(Exec("echo ok").stdout_tail, "ok\n");
}

TEST_F(PersistentSandbox, CrashedSandboxReportsCrashedAndCanBeReverted) {
  // SCN-6: OOM → CRASHED; the next revert returns a clean, usable sandbox.
  ExecResult r = Exec("sbx-memhog 640");
  EXPECT_EQ(r.status, ExecStatus::kResourceExceeded);
  EXPECT_EQ(r.state, SandboxState::kCrashed);
  ExecResult refused = Exec("echo hi");
  EXPECT_EQ(refused.status, ExecStatus::kSandboxUnavailable);
  EXPECT_EQ(refused.state, SandboxState::kCrashed);
  Revert();
  ExecResult ok = Exec("echo hi; find /work -mindepth 1 | wc -l");
  EXPECT_EQ(ok.status, ExecStatus::kOk);
  EXPECT_EQ(ok.state, SandboxState::kRunning);
  EXPECT_EQ(ok.stdout_tail, "hi\n0\n");
}

TEST_F(PersistentSandbox, SuspendMakesTheFilesystemLayerDurable) {
  // SNAP-2: revert returns to the latest durable snapshot: the golden one until a suspend.
  Exec("echo before > /work/kept");
  ASSERT_TRUE(rt_->Suspend(id_).ok());
  // Frozen: a command cannot run until resume.
  auto frozen = rt_->Exec(id_, ExecSpec{.command = "true"});
  EXPECT_FALSE(frozen.ok());
  ASSERT_TRUE(rt_->Resume(id_).ok());
  Exec("echo after > /work/lost; rm /work/kept");
  Revert();
  EXPECT_EQ(Exec("cat /work/kept; ls /work").stdout_tail, "before\nkept\n");
}

TEST_F(PersistentSandbox, ASecondSuspendKeepsTheFilesOfTheFirst) {
  // SNAP-2, SNAP-3: after suspend, resume and revert the running instance's lower layer is the
  // first durable layer; a second suspend must not delete it under the running instance.
  Exec("echo one > /work/a");
  ASSERT_TRUE(rt_->Suspend(id_).ok());
  ASSERT_TRUE(rt_->Resume(id_).ok());
  ASSERT_TRUE(rt_->Revert(id_).ok());
  EXPECT_EQ(Exec("cat /work/a").stdout_tail, "one\n");
  Exec("echo two > /work/b");
  ASSERT_TRUE(rt_->Suspend(id_).ok());
  ASSERT_TRUE(rt_->Resume(id_).ok());
  // Drop the kernel's dentry and inode caches, which could otherwise still serve files of a
  // lower layer deleted under the overlay.
  std::ofstream("/proc/sys/vm/drop_caches") << "2\n";
  EXPECT_EQ(Exec("cat /work/a /work/b").stdout_tail, "one\ntwo\n") << "the running instance lost files";
  ASSERT_TRUE(rt_->Revert(id_).ok());
  EXPECT_EQ(Exec("cat /work/a /work/b").stdout_tail, "one\ntwo\n") << "the second layer lost files";
}

TEST_F(PersistentSandbox, FreezeStopsCpuUse) {
  // SNAP-3 native: suspend = cgroup freezer; a frozen busy loop makes no progress.
  Exec("(while :; do echo x >> /tmp/ticks; sleep 0.05; done) >/dev/null 2>&1 &");
  usleep(300000);
  ASSERT_TRUE(rt_->Suspend(id_).ok());
  ASSERT_TRUE(rt_->Resume(id_).ok());  // resume at once: then measure the thawed progress
  usleep(200000);
  ExecResult n1 = Exec("wc -l < /tmp/ticks");
  ASSERT_TRUE(rt_->Suspend(id_).ok());
  usleep(500000);
  ASSERT_TRUE(rt_->Resume(id_).ok());
  ExecResult n2 = Exec("wc -l < /tmp/ticks");
  // While frozen for 0.5 s at most ~2 ticks slip in around the freeze edges (20/s running).
  EXPECT_LE(std::stoi(n2.stdout_tail) - std::stoi(n1.stdout_tail), 4);
}

// Not a gate: prints revert and first-request costs (docs/snapshots.md has the figures from
// bench/). PROD-5: delete + create is timed next to revert.
TEST_F(PersistentSandbox, PrintsRevertCosts) {
  std::vector<double> revert, first, recreate;
  for (int i = 0; i < 20; ++i) {
    Exec("echo x > /work/f");
    rt_->Drain();  // measure each revert with the spare ready, as in steady state
    revert.push_back(Revert());
    auto t0 = std::chrono::steady_clock::now();
    Exec("true");
    first.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    t0 = std::chrono::steady_clock::now();
    auto id = rt_->Create(SandboxSpec{});
    ASSERT_TRUE(id.ok());
    ASSERT_TRUE(rt_->Destroy(*id).ok());
    recreate.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  auto pct = [](std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))] * 1000;
  };
  std::printf("revert p50 %.3f ms p95 %.3f ms; first exec p50 %.3f p95 %.3f; create+destroy p50 %.3f p95 %.3f\n",
              pct(revert, .5), pct(revert, .95), pct(first, .5), pct(first, .95), pct(recreate, .5),
              pct(recreate, .95));
  EXPECT_EQ(revert.size(), 20u);
}

}  // namespace
}  // namespace sbx
