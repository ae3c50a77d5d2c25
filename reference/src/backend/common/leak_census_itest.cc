// The leak census (leak_census.h) itself: every count moves when the thing it counts is made,
// and returns when it is gone. A census that cannot see a leak would pass every "leaves nothing
// behind" test of every backend; this is the planted leak that shows it can fail them.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "backend/common/leak_census.h"

namespace sbx::backendtest {
namespace {

namespace fs = std::filesystem;

// This process's own cgroup in the v1 pids hierarchy, or "".
std::string OwnPidsCgroup() {
  std::ifstream f("/proc/self/cgroup");
  for (std::string line; std::getline(f, line);) {
    size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    if (("," + line.substr(a + 1, b - a - 1) + ",").find(",pids,") == std::string::npos) continue;
    std::string dir = "/sys/fs/cgroup/pids" + line.substr(b + 1);
    std::error_code ec;
    return fs::is_directory(dir, ec) ? dir : "";
  }
  return "";
}

TEST(LeakCensus, EveryCountSeesAPlantedLeakAndItsRemoval) {
  if (geteuid() != 0) GTEST_SKIP() << "LOUD SKIP: needs root (/run/sandcheck, cgroups)";
  const std::string pid = std::to_string(getpid());
  const std::string marker = "sbx-" + pid + "-census";
  const CensusOf of{.marker = marker};
  const Census before = TakeCensus(of);

  // A state directory with two below it, a cgroup named for our runtimes, and a child whose
  // command line carries the marker.
  const std::string state = "/run/sandcheck/" + pid + "-census";
  ASSERT_TRUE(fs::create_directories(state + "/sb/x"));
  std::string cgroup = OwnPidsCgroup();
  if (!cgroup.empty()) {
    cgroup += "/sandcheck-" + pid + "-census";
    ASSERT_EQ(mkdir(cgroup.c_str(), 0755), 0) << cgroup;
  }
  pid_t child = fork();
  if (child == 0) {
    setpgid(0, 0);  // so that its sleep goes with it
    execl("/bin/sh", "sh", "-c", "sleep 100; exit 0", marker.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(child, 0);
  Census planted;
  // exec is asynchronous to us: the child's command line is the marker's once it ran.
  for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       std::chrono::steady_clock::now() < end; usleep(1000)) {
    planted = TakeCensus(of);
    if (planted.processes > before.processes) break;
  }
  EXPECT_EQ(planted.state_dirs, before.state_dirs + 1);
  EXPECT_EQ(planted.state_entries, before.state_entries + 2);
  EXPECT_EQ(planted.children, before.children + 1);
  EXPECT_EQ(planted.processes, before.processes + 1);
  if (!cgroup.empty()) {
    EXPECT_EQ(planted.cgroups, before.cgroups + 1);
  }
  EXPECT_FALSE(planted == before) << planted;

  kill(-child, SIGKILL);
  kill(child, SIGKILL);
  int status;
  waitpid(child, &status, 0);
  if (!cgroup.empty()) {
    EXPECT_EQ(rmdir(cgroup.c_str()), 0);
  }
  fs::remove_all(state);
  const Census after = TakeCensus(of);
  EXPECT_EQ(after, before) << "before " << before << " after " << after;

  // Another owner's census does not see ours.
  EXPECT_EQ(TakeCensus({.owner = 1}).state_dirs, 0u);
}

}  // namespace
}  // namespace sbx::backendtest
