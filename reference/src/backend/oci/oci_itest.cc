// Integration tests of the oci backend (BK-3) with the real OCI runtimes: crun (the default,
// every test) and runc (SBX_OCI_RUNTIME=runc, the tests that differ between runtimes: cgroups,
// isolation, revert, leaks). Each test tries to break a rule and checks that it holds; limits
// are checked from the host's cgroup files too. Timing checks are ratios in the same test.
//
// Skips only when a runtime is not installed or its probe fails, with a LOUD reason; on the
// project's CI machine both run (SBX_OCI_MUST_WORK=1 turns a skip into a failure).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "backend/common/cpu_cap_testing.h"
#include "backend/common/testing.h"
#include "sbx/runtime.h"

namespace sbx {
namespace {

using backendtest::Census;
using backendtest::Slurp;
using backendtest::TakeCensus;

struct Rt {
  std::unique_ptr<Runtime> rt;
  std::string skip;  // why the backend cannot run here ("" = it can)
};

// Opens a runtime whose oci backend uses `runtime` (crun or runc).
Rt OpenWith(const std::string& runtime) {
  Rt r;
  if (geteuid() != 0) {
    r.skip = "LOUD SKIP: the oci backend needs root (namespaces, cgroups, mounts)";
    return r;
  }
  setenv("SBX_OCI_RUNTIME", runtime.c_str(), 1);
  auto rt = Runtime::Open(RuntimeOptions{});
  unsetenv("SBX_OCI_RUNTIME");
  if (!rt.ok()) {
    r.skip = "LOUD SKIP: cannot open the runtime: " + rt.status().ToString();
    return r;
  }
  r.rt = std::move(rt).value();
  nlohmann::json info = r.rt->Info();
  if (info["unsupported"].contains("oci")) {
    r.skip = "LOUD SKIP: the oci backend (" + runtime +
             ") cannot run here: " + info["unsupported"]["oci"].get<std::string>();
  }
  return r;
}

// One runtime per OCI runtime, closed (every sandbox reclaimed) after the last test.
class Runtimes : public ::testing::Environment {
 public:
  static Rt* Get(const std::string& runtime) {
    auto& e = envs_[runtime];
    if (!e) e = std::make_unique<Rt>(OpenWith(runtime));
    return e.get();
  }
  void TearDown() override { envs_.clear(); }

 private:
  static inline std::map<std::string, std::unique_ptr<Rt>> envs_;
};
const auto* const kRuntimes = ::testing::AddGlobalTestEnvironment(new Runtimes);

class OciTest : public backendtest::BackendTest {
 protected:
  OciTest() : BackendTest("oci") {}
  static Rt* Env(const std::string& runtime) { return Runtimes::Get(runtime); }
  void Use(const std::string& runtime) {
    env_ = Env(runtime);
    if (!env_->skip.empty()) {
      if (std::getenv("SBX_OCI_MUST_WORK")) FAIL() << env_->skip;
      GTEST_SKIP() << env_->skip;
    }
    rt_ = env_->rt.get();
  }

  // Every rule of docs/isolation.md that a tool could try to break, from inside.
  void CheckIsolation() {
    std::string canary = "/root/sbx-oci-canary-" + std::to_string(getpid());
    {
      std::ofstream f(canary);
      f << "host secret\n";
    }
    ExecResult r = Run(
        "id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; "
        "touch /usr/x 2>/dev/null && echo usr-writable; touch /etc/x 2>/dev/null && echo "
        "etc-writable; "
        "touch /x 2>/dev/null && echo root-writable; touch /work/ok && echo work-writable; "
        "cat " +
        canary +
        " 2>/dev/null && echo host-readable; "
        "cat /proc/1/root" +
        canary +
        " 2>/dev/null && echo host-readable-via-proc; "
        "unshare -U true 2>/dev/null && echo userns-allowed; "
        "ls /proc | grep -c '^[0-9]'; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; "
        "wget -qO- http://203.0.113.7/ 2>&1; ulimit -n");
    unlink(canary.c_str());
    ASSERT_EQ(r.status, ExecStatus::kOk) << r.reason << r.stderr_tail;
    EXPECT_EQ(r.backend, "oci");
    const std::string& o = r.stdout_tail;
    EXPECT_EQ(o.rfind("1000\n", 0), 0u) << o;
    EXPECT_NE(o.find("CapEff:\t0000000000000000"), std::string::npos) << o;
    EXPECT_NE(o.find("CapBnd:\t0000000000000000"), std::string::npos) << o;
    EXPECT_NE(o.find("NoNewPrivs:\t1"), std::string::npos) << o;
    EXPECT_NE(o.find("Seccomp:\t2"), std::string::npos) << "the seccomp deny-list: " << o;
    EXPECT_EQ(o.find("usr-writable"), std::string::npos) << "FS-2";
    EXPECT_EQ(o.find("etc-writable"), std::string::npos) << "FS-2";
    EXPECT_EQ(o.find("root-writable"), std::string::npos) << "FS-2";
    EXPECT_NE(o.find("work-writable"), std::string::npos) << "FS-1";
    EXPECT_EQ(o.find("host-readable"), std::string::npos) << "a host file was readable";
    EXPECT_EQ(o.find("userns-allowed"), std::string::npos) << "seccomp: unshare(CLONE_NEWUSER)";
    EXPECT_NE(o.find("\nlo\n"), std::string::npos) << "SNAP-5: only lo: " << o;
    EXPECT_EQ(o.find("eth"), std::string::npos) << o;
    EXPECT_NE(o.find("Network is unreachable"), std::string::npos) << "SNAP-5: " << o;
    EXPECT_NE(o.find("\n1024\n"), std::string::npos) << "RES-6 default RLIMIT_NOFILE: " << o;

    // The in-sandbox agent (issue 16): the command was forked by the container's PID 1,
    // sbx-init, not started by `crun exec` / `runc exec` (whose process has no parent inside
    // the container: PPid 0; $$ is the shell the command runs in). A tool can neither signal the
    // agent, read its environment or memory, nor see its capabilities survive into the command
    // (checked above).
    ExecResult a =
        Run("grep '^PPid:' /proc/$$/status; cat /proc/1/comm; "
            "kill -9 1 2>/dev/null && echo agent-killed; kill -STOP 1 2>/dev/null && echo "
            "agent-stopped; "
            "cat /proc/1/environ >/dev/null 2>&1 && echo agent-environ; "
            "head -c1 /proc/1/mem >/dev/null 2>&1 && echo agent-mem; "
            "ls /proc/1/fd >/dev/null 2>&1 && echo agent-fds; true");
    ASSERT_EQ(a.status, ExecStatus::kOk) << a.reason << a.stderr_tail;
    EXPECT_EQ(a.stdout_tail.rfind("PPid:\t1\n", 0), 0u) << "forked by the agent: " << a.stdout_tail;
    EXPECT_NE(a.stdout_tail.find("sbx-init\n"), std::string::npos) << a.stdout_tail;
    for (const char* leak :
         {"agent-killed", "agent-stopped", "agent-environ", "agent-mem", "agent-fds"})
      EXPECT_EQ(a.stdout_tail.find(leak), std::string::npos) << leak << ": " << a.stdout_tail;
    EXPECT_EQ(Run("true").status, ExecStatus::kOk) << "the agent still serves";
  }

  // Files, a background process and a changed ~/.profile: all gone after a revert.
  void CheckRevertLeavesNothing() {
    std::string id = Create();
    ASSERT_FALSE(id.empty());
    ExecResult planted = Exec(id,
                              "echo x > /work/a; mkdir -p /work/d/e; echo y > /work/d/e/f; "
                              "echo z > /tmp/t; echo 'export CANARY=1' >> ~/.profile; "
                              "(sleep 1000 &) ; ls -A /work | wc -l");
    EXPECT_EQ(planted.stdout_tail, "2\n");
    for (int i = 0; i < 2; ++i) {  // revert twice in a row works too
      auto s = rt_->Revert(id);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      ExecResult after =
          Exec(id,
               "ls -A /work | wc -l; ls -A /tmp | wc -l; cat ~/.profile 2>/dev/null; "
               "ps -o pid,args | grep -c '[s]leep 1000'");
      EXPECT_EQ(after.status, ExecStatus::kOk) << after.reason;
      EXPECT_EQ(after.stdout_tail, "0\n0\n0\n") << "SCN-7, SNAP-2: " << after.stdout_tail;
    }
    ASSERT_TRUE(rt_->Destroy(id).ok());
    rt_->Drain();
  }

  // Sandboxes of every kind, then nothing left: containers, cgroups, mounts, processes.
  void CheckNoLeaks(const std::string& runtime_binary, const std::string& root_name) {
    // What a runtime keeps for its lifetime (its state directory, the OCI runtime's --root)
    // exists after its first sandbox: make it exist before the census.
    EXPECT_EQ(Run("true").status, ExecStatus::kOk);
    rt_->Drain();
    std::string marker = "sbx-" + std::to_string(getpid()) + "-";
    Census before = TakeCensus({.marker = marker});
    size_t default_root = backendtest::Capture(runtime_binary + " list 2>/dev/null").size();
    {
      ExecResult a = Run("echo one");
      EXPECT_EQ(a.status, ExecStatus::kOk) << a.reason;
      ExecResult b = Run("sbx-memhog 64", {.memory_bytes = 32 << 20});
      EXPECT_EQ(b.status, ExecStatus::kResourceExceeded) << b.reason;
      ExecResult c = Run("sleep 100 & sleep 100", {}, 0.5);
      EXPECT_EQ(c.status, ExecStatus::kTimeout) << c.reason;
      std::string id = Create();
      Exec(id, "echo x > /work/x; sleep 100 &");
      EXPECT_TRUE(rt_->Revert(id).ok());
      EXPECT_TRUE(rt_->Destroy(id).ok());
    }
    rt_->Drain();
    Census after = TakeCensus({.marker = marker});
    EXPECT_EQ(before, after) << "before " << before << " after " << after;
    EXPECT_EQ(after.processes, 0u) << "a process of this runtime's containers is left";
    EXPECT_EQ(backendtest::ContainersListed(runtime_binary, root_name), 0u)
        << runtime_binary << " list shows a container left behind";
    EXPECT_EQ(backendtest::Capture(runtime_binary + " list 2>/dev/null").size(), default_root)
        << "something landed in " << runtime_binary << "'s default root";
  }

  Rt* env_ = nullptr;
};

// ---- crun (the default) ----------------------------------------------------------------------

class OciCrun : public OciTest {
 protected:
  void SetUp() override { Use("crun"); }
};

TEST_F(OciCrun, RunsACommandAndReportsEveryStage) {
  ExecResult r = Run("echo hello; echo oops >&2; exit 3");
  EXPECT_EQ(r.status, ExecStatus::kOk) << r.reason;
  EXPECT_EQ(r.state, SandboxState::kRunning);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.stdout_tail, "hello\n");
  EXPECT_EQ(r.stderr_tail, "oops\n");
  EXPECT_EQ(r.backend, "oci") << "every result names the backend that ran it";
  for (double s : {r.stages.allocate, r.stages.initialize, r.stages.inject_context,
                   r.stages.execute, r.stages.collect, r.stages.destroy, r.stages.cleanup}) {
    EXPECT_GE(s, 0.0) << "LC-1: every stage is timed";
  }
}

TEST_F(OciCrun, IsolationHoldsAgainstBreakoutAttempts) { CheckIsolation(); }

TEST_F(OciCrun, RunsWhateverTheRuntimesUmask) {
  // Regression: under sandboxd started with umask 077 the overlay's upper directory (the
  // container's root directory) was 0700, and every command failed with EACCES.
  mode_t old = umask(077);
  ExecResult r = Run("ls -ld / | cut -c1-10; id -u");
  umask(old);
  EXPECT_EQ(r.status, ExecStatus::kOk) << r.reason;
  EXPECT_EQ(r.stdout_tail, "drwxr-xr-x\n1000\n") << r.stderr_tail;
}

TEST_F(OciCrun, CpuQuotaIsAHardCap) {
  // RES-1: the same fixed work at 500m takes about twice the wall time it takes at 1000m.
  auto cap = testing_cpu::MeasureCpuCap([&](int64_t mc) {
    ExecResult r = Run("sbx-cpu -n 400", {.cpu_millicores = mc}, 120);
    EXPECT_EQ(r.status, ExecStatus::kOk) << r.reason << r.stderr_tail;
    return r;
  });
  testing_cpu::ExpectCpuCapBites(cap);
}

TEST_F(OciCrun, MemoryBreachEndsTheSandboxAndRevertRecovers) {
  // RES-2, RES-8, FAIL-3, SCN-6: 640 MiB under 256 MiB. The shell around the hog would survive
  // a v1 OOM kill and exit 0; the container must end whole anyway.
  std::string id = Create({.memory_bytes = 256 << 20});
  ASSERT_FALSE(id.empty());
  ExecResult r = Exec(id, "sbx-memhog 640; echo shell-survived");
  EXPECT_EQ(r.status, ExecStatus::kResourceExceeded) << r.reason;
  EXPECT_EQ(r.state, SandboxState::kCrashed);
  EXPECT_EQ(r.error_code, "memory_limit");
  EXPECT_EQ(r.stdout_tail.find("shell-survived"), std::string::npos);
  EXPECT_GE(r.usage.memory_peak_bytes, int64_t{256 << 20} * 95 / 100) << "from the cgroup";
  ExecResult refused = Exec(id, "true");
  EXPECT_EQ(refused.status, ExecStatus::kSandboxUnavailable) << "a crashed sandbox runs nothing";
  ASSERT_TRUE(rt_->Revert(id).ok());
  ExecResult again = Exec(id, "ls -A /work | wc -l");
  EXPECT_EQ(again.status, ExecStatus::kOk) << again.reason;
  EXPECT_EQ(again.stdout_tail, "0\n");
  ASSERT_TRUE(rt_->Destroy(id).ok());
}

TEST_F(OciCrun, ForkBombIsContainedAndReaped) {
  // RES-4, PROD-2: watched from the host's pids cgroup while the bomb runs.
  std::string id = Create({.pids = 64});
  ASSERT_FALSE(id.empty());
  std::string dir = backendtest::FindCgroup("pids", "sb-" + id + "-0");
  ASSERT_FALSE(dir.empty());
  EXPECT_EQ(Slurp(dir + "/pids.max"), "64\n");
  // The most tasks the cgroup held at once, counted exactly (not pids.current: see CountTasks).
  backendtest::PeakWatcher peak([&] { return backendtest::CountTasks(dir); },
                                std::chrono::milliseconds(5));
  ExecResult r = Exec(id, "sbx-forkbomb", 2);
  long top = peak.Stop();
  EXPECT_EQ(r.status, ExecStatus::kTimeout) << r.reason;
  EXPECT_GE(top, 32) << "the bomb did not run";
  EXPECT_LE(top, 64) << "pids.max did not hold";
  // Only the container's init and its sleep are left; the sandbox still works. The timeout path
  // SIGKILLs the bomb without waiting for it to be reaped: wait for pids.current to drop (a
  // survivor keeps it up, and fails this after 30 s).
  long left = std::atol(Slurp(dir + "/pids.current").c_str());
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       left > 3 && std::chrono::steady_clock::now() < deadline;) {
    usleep(10000);
    left = std::atol(Slurp(dir + "/pids.current").c_str());
  }
  EXPECT_LE(left, 3) << "not fully reaped";
  ExecResult after = Exec(id, "echo alive");
  EXPECT_EQ(after.stdout_tail, "alive\n") << after.reason;
  ASSERT_TRUE(rt_->Destroy(id).ok());
}

TEST_F(OciCrun, TimeoutKillsEveryProcessTheCommandStarted) {
  // RES-5, FAIL-4: background, setsid'd and double-forked children too; the sandbox survives.
  std::string id = Create();
  ASSERT_FALSE(id.empty());
  auto t0 = std::chrono::steady_clock::now();
  ExecResult r =
      Exec(id, "sleep 101 & setsid sleep 102 & (sleep 103 &) ; trap '' TERM; sleep 104", 1);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.status, ExecStatus::kTimeout) << r.reason;
  EXPECT_EQ(r.state, SandboxState::kRunning);
  EXPECT_LT(took, 30.0) << "SIGKILL after the 1 s grace (not the end of the 104 s sleep)";
  ExecResult ps = Exec(id, "ps -o args | grep -c '[s]leep 10[1-4]'");
  EXPECT_EQ(ps.stdout_tail, "0\n") << "a process outlived the timeout";
  ASSERT_TRUE(rt_->Destroy(id).ok());
}

TEST_F(OciCrun, DiskQuotaEndsTheSandbox) {
  // RES-3, PROD-3: every write lands in one tmpfs of the quota's size.
  ExecResult r = Run("sbx-diskfill /work/fill 64 2>&1; echo done", {.disk_bytes = 16 << 20});
  EXPECT_EQ(r.status, ExecStatus::kResourceExceeded) << r.reason << r.stdout_tail;
  EXPECT_EQ(r.error_code, "disk_limit");
}

TEST_F(OciCrun, RevertLeavesNoFileAndNoProcess) { CheckRevertLeavesNothing(); }

TEST_F(OciCrun, SuspendMakesTheFilesDurableForRevert) {
  // SNAP-2, SNAP-3: after a suspend, revert returns to the suspended files, not the golden ones.
  std::string id = Create();
  ASSERT_FALSE(id.empty());
  Exec(id, "echo kept > /work/kept");
  ASSERT_TRUE(rt_->Suspend(id).ok());
  auto refused = rt_->Exec(id, ExecSpec{.command = "true"});
  EXPECT_FALSE(refused.ok()) << "a suspended sandbox runs nothing";
  ASSERT_TRUE(rt_->Resume(id).ok());
  Exec(id, "echo lost > /work/lost");
  ASSERT_TRUE(rt_->Revert(id).ok());
  ExecResult r = Exec(id, "cat /work/kept; ls /work");
  EXPECT_EQ(r.stdout_tail, "kept\nkept\n");
  ASSERT_TRUE(rt_->Destroy(id).ok());
}

TEST_F(OciCrun, SecretsReachTheCommandButNoFile) {
  // LC-4: the process (environment and secrets) goes to crun in a memfd, never to a file.
  std::string secret = "s3cr3t-" + std::to_string(std::random_device{}());
  ExecRequest req;
  req.sandbox.backend = "oci";
  req.sandbox.secrets = {{"TOKEN", secret}};
  req.exec.command = "test \"$TOKEN\" = " + secret + " && echo seen; sleep 0.3";
  std::atomic<bool> found{false};
  std::thread scan([&] {
    for (int i = 0; i < 20; ++i) {
      for (const std::string& d : backendtest::StateDirsOf(getpid())) {
        std::string hits = backendtest::Capture("grep -rl " + secret + " " + d + " 2>/dev/null");
        if (!hits.empty()) found = true;
      }
      usleep(20000);
    }
  });
  ExecResult r = rt_->Run(req);
  scan.join();
  EXPECT_EQ(r.stdout_tail, "seen\n") << r.reason << r.stderr_tail;
  EXPECT_FALSE(found) << "the secret was written below the state directory";
}

TEST_F(OciCrun, EgressJoinsTheGatewayNamespace) {
  // RES-7, EGR-3: with a policy, the container is in the egress namespace: an address literal
  // meets the gateway's proxy (HTTP 403), a name outside the policy does not resolve.
  ExecRequest req;
  req.sandbox.backend = "oci";
  req.sandbox.egress.rules = {{.kind = "http", .hosts = {"allowed.example"}, .ports = {80}}};
  req.exec.command =
      "wget -qO- http://203.0.113.7/ 2>&1; echo; nslookup not-allowed.example 2>&1 | tail -2";
  ExecResult r = rt_->Run(req);
  ASSERT_EQ(r.status, ExecStatus::kOk) << r.reason << r.stderr_tail;
  EXPECT_NE(r.stdout_tail.find("403"), std::string::npos) << r.stdout_tail;
  EXPECT_EQ(r.stdout_tail.find("Address: 203"), std::string::npos) << r.stdout_tail;
}

TEST_F(OciCrun, LeavesNothingBehind) { CheckNoLeaks("crun", "crun"); }

// ---- runc (SBX_OCI_RUNTIME=runc) --------------------------------------------------------------

class OciRunc : public OciTest {
 protected:
  void SetUp() override { Use("runc"); }
};

TEST_F(OciRunc, IsolationHoldsAgainstBreakoutAttempts) { CheckIsolation(); }

TEST_F(OciRunc, LimitsHoldInsideRuncsOwnCgroup) {
  // runc nests its cgroup below the sandbox's: the sandbox's memory and pids limits hold.
  ExecResult oom = Run("sbx-memhog 640; echo shell-survived", {.memory_bytes = 256 << 20});
  EXPECT_EQ(oom.status, ExecStatus::kResourceExceeded) << oom.reason;
  EXPECT_EQ(oom.state, SandboxState::kCrashed);
  ExecResult bomb = Run("sbx-forkbomb", {.pids = 64}, 2);
  EXPECT_EQ(bomb.status, ExecStatus::kTimeout) << bomb.reason;
  EXPECT_LE(bomb.usage.pids_peak, 64);
  EXPECT_GE(bomb.usage.pids_peak, 32) << "the bomb did not run";
}

TEST_F(OciRunc, OnlyTheSandboxCgroupCarriesTheLimits) {
  // Regression (issue 11): runc wrote the request's quota on its own cgroup as well, the kernel
  // throttled either level, and the usage read from the sandbox's cgroup said "throttled 0 s"
  // for a run held to half a CPU (v1 keeps throttled_time per level). Now runc's cgroup has no
  // limit, so all throttling is the sandbox cgroup's (this test fails on the old bundle).
  namespace fs = std::filesystem;
  if (!fs::exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")) {
    GTEST_SKIP() << "the cgroup files read here are v1's; this host has no v1 cpu hierarchy";
  }
  std::string id = Create({.cpu_millicores = 500, .memory_bytes = 256 << 20, .pids = 64});
  ASSERT_FALSE(id.empty());
  struct Destroyer {
    Runtime* rt;
    std::string id;
    ~Destroyer() { EXPECT_TRUE(rt->Destroy(id).ok()); }
  } destroy{rt_, id};
  // The first instance's cgroup: "sb-" + InstanceId(id, 0). Not a prefix search: the spare
  // for the next revert (generation 1) may be starting beside it, runc's cgroup not made yet.
  const std::string name = "sb-" + id + "-0";
  auto find = [&](const std::string& controller) {
    return backendtest::FindCgroup(controller, name);
  };
  auto all_below = [](const std::string& dir) {
    std::vector<std::string> out;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_directory(ec)) out.push_back(it->path());
    }
    return out;
  };
  auto value = [](const std::string& f) {
    std::string v = Slurp(f);
    while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
    return v;
  };
  std::string cpu = find("cpu"), mem = find("memory"), pids = find("pids");
  ASSERT_FALSE(cpu.empty() || mem.empty() || pids.empty()) << "no cgroup " << name;
  EXPECT_EQ(value(cpu + "/cpu.cfs_quota_us"), "50000");
  EXPECT_EQ(value(mem + "/memory.limit_in_bytes"), std::to_string(256 << 20));
  EXPECT_EQ(value(pids + "/pids.max"), "64");
  std::vector<std::string> below = all_below(cpu);
  EXPECT_FALSE(below.empty()) << "runc made no cgroup of its own below " << cpu;
  for (const std::string& d : below) EXPECT_EQ(value(d + "/cpu.cfs_quota_us"), "-1") << d;
  for (const std::string& d : all_below(mem)) {
    EXPECT_GT(std::stoll(value(d + "/memory.limit_in_bytes")), int64_t{1} << 40) << d;
  }
  for (const std::string& d : all_below(pids)) EXPECT_EQ(value(d + "/pids.max"), "max") << d;
  // No "throttled > 0" run here: a neighbour that holds the work below half a CPU keeps the
  // quota from ever biting (a jailed soak saw 0 s), so only the files above are exact; the
  // six-task check judges the throttled time with that case in mind (limit_checks.cc).
}

TEST_F(OciRunc, RevertLeavesNoFileAndNoProcess) { CheckRevertLeavesNothing(); }

TEST_F(OciRunc, LeavesNothingBehind) { CheckNoLeaks("runc", "runc"); }

}  // namespace
}  // namespace sbx
