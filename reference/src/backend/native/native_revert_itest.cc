// Persistent sandboxes: revert, suspend/resume, crash recovery (SNAP-1..SNAP-3, SCN-6, SCN-7).
// Real kernel objects; canaries are planted everywhere a task could leave state.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

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

// Polls `done` every 10 ms until it holds or `timeout_s` passes; true if it held.
bool WaitFor(const std::function<bool()>& done, double timeout_s = 30) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    usleep(10000);
  }
  return true;
}

std::string SlurpFile(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// The host path of `path` inside sandbox `id`, seen through the root of one of the processes
// of its first instance (cgroup "sb-<id>-0"), or "" while no such process sees it.
std::string SandboxPath(const std::string& id, const std::string& path) {
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(
           "/sys/fs/cgroup", std::filesystem::directory_options::skip_permission_denied, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->path().filename() != "sb-" + id + "-0") continue;
    std::ifstream procs(it->path() / "cgroup.procs");
    for (pid_t pid; procs >> pid;) {
      std::string host = "/proc/" + std::to_string(pid) + "/root" + path;
      if (std::filesystem::exists(host, ec)) return host;
    }
  }
  return "";
}

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
  EXPECT_EQ(Exec("cat /work/a /work/b").stdout_tail, "one\ntwo\n")
      << "the running instance lost files";
  ASSERT_TRUE(rt_->Revert(id_).ok());
  EXPECT_EQ(Exec("cat /work/a /work/b").stdout_tail, "one\ntwo\n") << "the second layer lost files";
}

TEST_F(PersistentSandbox, FreezeStopsCpuUse) {
  // SNAP-3 native: suspend = cgroup freezer; a frozen busy loop makes no progress. The ticks are
  // counted from the host, through a sandbox process's /proc/PID/root, while it is frozen:
  // no command runs in between, so no tick can slip in around the freeze, however slow the
  // machine.
  Exec("(while :; do echo x >> /tmp/sbx-freeze-ticks; sleep 0.05; done) >/dev/null 2>&1 &");
  auto ticks = [&] {
    std::string t = SlurpFile(SandboxPath(id_, "/tmp/sbx-freeze-ticks"));
    return static_cast<int>(std::count(t.begin(), t.end(), '\n'));
  };
  ASSERT_TRUE(WaitFor([&] { return ticks() >= 2; })) << "the loop never ticked (host's view)";
  ASSERT_TRUE(rt_->Suspend(id_).ok());  // returns once the freezer says FROZEN
  int n1 = ticks();
  usleep(500000);  // a bounded grace: running, the loop would tick ~10 times in it
  int n2 = ticks();
  EXPECT_EQ(n2, n1) << "the loop ticked while frozen";
  ASSERT_TRUE(rt_->Resume(id_).ok());
  // Thawed, it runs on (this is also what makes the frozen count mean something).
  EXPECT_TRUE(WaitFor([&] { return ticks() > n2; })) << "the loop did not run again after resume";
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
    recreate.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  auto pct = [](std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))] * 1000;
  };
  std::printf(
      "revert p50 %.3f ms p95 %.3f ms; first exec p50 %.3f p95 %.3f; create+destroy p50 %.3f p95 "
      "%.3f\n",
      pct(revert, .5), pct(revert, .95), pct(first, .5), pct(first, .95), pct(recreate, .5),
      pct(recreate, .95));
  EXPECT_EQ(revert.size(), 20u);
}

}  // namespace
}  // namespace sbx
