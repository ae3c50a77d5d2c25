// The reaper (FAIL-6, NFR-5): kill -9 a runtime in the middle of 20 live sandboxes; a new
// runtime reclaims everything they left, and the census of kernel objects is as before.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "backend/common/testing.h"
#include "host/process_stamp.h"
#include "sbx/runtime.h"

namespace sbx {
namespace {

namespace fs = std::filesystem;

constexpr int kSandboxes = 20;
constexpr int kMicrovmSandboxes = 3;

// Everything a killed runtime could leave: the leak census of its process (cgroups, state and
// snapshot directories, mounts, QEMUs; backend/common/leak_census.h) and the sbx-init processes
// it recorded that are still alive.
struct Leftovers {
  backendtest::Census census;
  int inits = 0;
};

// "<pid> <start time>" of every sbx-init the runtime recorded (read while it is alive).
std::set<std::string> InitStamps(const std::string& rtid) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/run/sandcheck/" + rtid + "/sb", ec)) {
    std::ifstream f(e.path() / "init");
    std::string line;
    if (std::getline(f, line) && !line.empty()) out.insert(line);
  }
  return out;
}

Leftovers Look(pid_t owner, const std::set<std::string>& inits) {
  Leftovers l;
  l.census = backendtest::TakeCensus({.owner = owner});
  for (const auto& s : inits) l.inits += host::StampAlive(s) ? 1 : 0;  // a zombie holds nothing
  return l;
}

// This process's own cgroup in the v1 memory hierarchy, or "" (no such hierarchy).
std::string OwnV1MemoryCgroup() {
  std::ifstream f("/proc/self/cgroup");
  for (std::string line; std::getline(f, line);) {
    size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string ctls = "," + line.substr(a + 1, b - a - 1) + ",";
    if (ctls.find(",memory,") == std::string::npos) continue;
    std::string dir = "/sys/fs/cgroup/memory" + line.substr(b + 1);
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    std::error_code ec;
    return fs::is_directory(dir, ec) ? dir : "";
  }
  return "";
}

// Runs only as the child of ReaperTest: holds 20 live sandboxes until it is killed.
TEST(ReaperChild, HoldSandboxes) {
  if (!std::getenv("SBX_REAPER_CHILD")) GTEST_SKIP() << "helper of ReaperTest, runs only as its child";
  if (const char* memcg = std::getenv("SBX_REAPER_CHILD_MEMCG")) {
    // Another memory cgroup than the reaper's (as on hosts that give each process its own).
    std::ofstream procs(std::string(memcg) + "/cgroup.procs");
    procs << getpid() << "\n";
    procs.flush();
    ASSERT_TRUE(procs.good()) << "joining " << memcg;
  }
  auto rt = Runtime::Open({});
  ASSERT_TRUE(rt.ok());
  // SBX_REAPER_CHILD_BACKEND=microvm: a few microVM sandboxes instead (QEMU processes, taps,
  // host cgroups, VM state directories).
  const char* backend = std::getenv("SBX_REAPER_CHILD_BACKEND");
  const int n = backend ? kMicrovmSandboxes : kSandboxes;
  for (int i = 0; i < n; ++i) {
    SandboxSpec spec;
    if (backend) spec.backend = backend;
    auto id = (*rt)->Create(spec);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ASSERT_TRUE((*rt)->Exec(*id, ExecSpec{.command = "sleep 1000 & echo x > /work/f"}).ok());
  }
  std::printf("ready %d\n", getpid());
  std::fflush(stdout);
  for (;;) pause();
}

TEST(ReaperTest, KillNineThenEverythingIsReclaimedWithinASecond) {
  if (geteuid() != 0) GTEST_SKIP() << "LOUD SKIP: needs root";
  // The child runtime lives in a memory cgroup of its own, below ours (v1): the reaper must
  // find its cgroups where it recorded them, not below the reaper's own memory cgroup.
  std::string memcg = OwnV1MemoryCgroup();
  if (!memcg.empty()) {
    memcg += "/sbx-reaper-test-" + std::to_string(getpid());
    ASSERT_EQ(mkdir(memcg.c_str(), 0755), 0) << memcg;
  } else {
    std::printf("note: no cgroup v1 memory hierarchy; the child shares the reaper's cgroups\n");
  }
  struct RemoveAtEnd {  // also when an assertion ends the test early
    std::string dir;
    ~RemoveAtEnd() {
      if (!dir.empty()) rmdir(dir.c_str());
    }
  } remove_memcg{memcg};
  std::vector<std::string> env = {"SBX_REAPER_CHILD=1"};
  if (!memcg.empty()) env.push_back("SBX_REAPER_CHILD_MEMCG=" + memcg);
  backendtest::HelperChild child;
  ASSERT_TRUE(child.Start("ReaperChild.HoldSandboxes", env)) << "the child runtime did not come up";
  // The child's runtime id starts with its pid.
  std::string rtid;
  for (const auto& e : fs::directory_iterator("/run/sandcheck")) {
    if (e.path().filename().string().rfind(std::to_string(child.pid()) + "-", 0) == 0)
      rtid = e.path().filename();
  }
  ASSERT_FALSE(rtid.empty());
  std::set<std::string> inits = InitStamps(rtid);
  EXPECT_GE(inits.size(), static_cast<size_t>(kSandboxes));
  const pid_t owner = child.pid();
  Leftovers live = Look(owner, inits);
  EXPECT_GT(live.census.cgroups, 0u);
  EXPECT_EQ(live.census.state_dirs, 1u);
  EXPECT_GE(live.inits, kSandboxes);

  child.Kill();

  auto t0 = std::chrono::steady_clock::now();
  RuntimeOptions o;
  o.start_reaper = true;  // sweeps at start, then every second
  auto rt = Runtime::Open(o);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  double open_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Leftovers after;
  double seconds = 0;
  for (;;) {
    after = Look(owner, inits);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Wait for the reclaim itself (generously: a loaded machine is slow, a leak never ends).
    if ((after.census == backendtest::Census{} && after.inits == 0) || seconds > 60) break;
    usleep(10000);
  }
  std::printf("reclaimed %d sandboxes of a kill -9'd runtime in %.3f s (start-up sweep %.3f s)\n",
              kSandboxes, seconds, open_s);
  EXPECT_EQ(after.census, backendtest::Census{}) << "the killed runtime left " << after.census;
  EXPECT_EQ(after.inits, 0);
  // NFR-5's bound. The runtime's own 1 s promise is a latency figure (printed above, measured
  // by the nfr scenario), not something a loaded CI machine can be held to here.
  EXPECT_LT(seconds, 10.0) << "NFR-5 asks < 10 s";
  if (!memcg.empty()) {
    EXPECT_EQ(rmdir(memcg.c_str()), 0) << memcg << ": something is left in it";
    remove_memcg.dir.clear();
  }
}

// A runtime's owner record appears whole or not at all (renamed into place): a reaper that
// meets one it cannot parse — a record being written — leaves that directory alone. Before this,
// a second runtime starting beside a first (two sandboxd on one host) swept the first's fresh
// directory about once in ten starts, and the first then failed to start.
// BK-5, FAIL-6: the same for microVM sandboxes. Each QEMU dies with the runtime (it has
// PR_SET_PDEATHSIG and was forked by the runtime's long-lived spawner thread), its tap with it
// (a tap is not persistent), and the reaper removes the host cgroups and the state directory.
TEST(ReaperTest, KillNineWithMicrovmSandboxesLeavesNoQemu) {
  if (geteuid() != 0) GTEST_SKIP() << "LOUD SKIP: needs root";
  {
    auto probe = Runtime::Open({});
    ASSERT_TRUE(probe.ok());
    nlohmann::json info = (*probe)->Info();
    if (info["unsupported"].contains("microvm")) {
      std::string why = "LOUD SKIP: no microvm backend: " + info["unsupported"]["microvm"].dump();
      if (std::getenv("SBX_MICROVM_MUST_WORK")) FAIL() << why;
      GTEST_SKIP() << why;
    }
  }
  backendtest::HelperChild child;
  ASSERT_TRUE(child.Start("ReaperChild.HoldSandboxes",
                          {"SBX_REAPER_CHILD=1", "SBX_REAPER_CHILD_BACKEND=microvm"}))
      << "the child runtime did not come up";
  const pid_t owner = child.pid();
  Leftovers live = Look(owner, {});
  EXPECT_EQ(live.census.state_dirs, 1u);
  EXPECT_GE(live.census.qemus, static_cast<size_t>(kMicrovmSandboxes));
  EXPECT_GT(live.census.cgroups, 0u);

  child.Kill();
  RuntimeOptions o;
  o.start_reaper = true;
  auto rt = Runtime::Open(o);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  auto t0 = std::chrono::steady_clock::now();
  Leftovers after;
  for (;;) {
    after = Look(owner, {});
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (after.census == backendtest::Census{} || s > 60) break;
    usleep(10000);
  }
  EXPECT_EQ(after.census.qemus, 0u) << "a QEMU outlived its runtime";
  EXPECT_EQ(after.census, backendtest::Census{}) << "the killed runtime left " << after.census;
}

TEST(ReaperTest, AnOwnerRecordThatDoesNotParseIsNotSwept) {
  if (geteuid() != 0) GTEST_SKIP() << "LOUD SKIP: needs root";
  std::string dir = "/run/sandcheck/999999-reapertest";
  fs::create_directories(dir);
  { std::ofstream(dir + "/owner") << ""; }  // created, not yet written
  RuntimeOptions o;
  o.start_reaper = true;  // sweeps at start
  {
    auto rt = Runtime::Open(o);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    EXPECT_TRUE(fs::exists(dir)) << "a record being written was swept";
  }
  { std::ofstream(dir + "/owner") << "999999 1\n"; }  // whole, and its process is gone
  {
    auto rt = Runtime::Open(o);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    EXPECT_FALSE(fs::exists(dir)) << "a dead runtime's record was kept";
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST(ReaperTest, ADirectoryWhoseRuntimeDiedBeforeItsOwnerRecordIsSwept) {
  if (geteuid() != 0) GTEST_SKIP() << "LOUD SKIP: needs root";
  // A runtime killed between its mkdir and the rename of its owner record leaves this.
  // 4194304 is above any pid_max: no process has it.
  std::string dead = "/run/sandcheck/4194304-a1b2c3";
  fs::create_directories(dead);
  { std::ofstream(dead + "/owner.tmp") << "4194"; }
  // The same shape for a live pid (ours: a runtime starting right now) and a directory that
  // is not a runtime's (another name, or holding something else) stay.
  std::string live = fmt::format("/run/sandcheck/{}-d4e5f6", getpid());
  std::string other = "/run/sandcheck/4194304-notours";
  std::string full = "/run/sandcheck/4194304-0a0b0c";
  for (const auto& d : {live, other, full}) fs::create_directories(d);
  { std::ofstream(full + "/data") << "x"; }
  RuntimeOptions o;
  o.start_reaper = true;  // sweeps at start
  {
    auto rt = Runtime::Open(o);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  }
  EXPECT_FALSE(fs::exists(dead)) << "a stillborn runtime's directory was kept";
  EXPECT_TRUE(fs::exists(live)) << "a starting runtime's directory was swept";
  EXPECT_TRUE(fs::exists(other));
  EXPECT_TRUE(fs::exists(full));
  std::error_code ec;
  for (const auto& d : {dead, live, other, full}) fs::remove_all(d, ec);
}

}  // namespace
}  // namespace sbx
