// The NFR-5 census from outside (orphan_census.h): processes below a pid, stamps that tell a
// dead or reused pid apart, cgroup directories below an ancestor's cgroup, state entries.
#include "host/orphan_census.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

namespace sandcheck {
namespace {

// A child that forks a grandchild; both pause until killed.
pid_t SpawnTree() {
  pid_t child = fork();
  if (child == 0) {
    if (fork() == 0) {
      for (;;) pause();
    }
    for (;;) pause();
  }
  return child;
}

bool Contains(const std::vector<ProcStamp>& v, pid_t pid) {
  return std::any_of(v.begin(), v.end(), [&](const ProcStamp& s) { return s.pid == pid; });
}

TEST(OrphanCensus, DescendantsAndStamps) {
  pid_t child = SpawnTree();
  ASSERT_GT(child, 0);
  std::vector<ProcStamp> d;
  // The grandchild appears once the child has forked it: wait for that (up to 30 s).
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       d.size() < 2 && std::chrono::steady_clock::now() < deadline;) {
    d = DescendantsOf(getpid());
    if (d.size() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(Contains(d, child));
  ASSERT_GE(d.size(), 2u);
  for (const auto& s : d) EXPECT_TRUE(StampAlive(s)) << s.pid;
  // A stamp with the wrong start time is not "alive" (a reused pid).
  ProcStamp wrong = StampOf(child);
  wrong.start_ticks += 1;
  EXPECT_FALSE(StampAlive(wrong));
  // Kill the child: it is a zombie until reaped, and a zombie counts as gone.
  ProcStamp cs = StampOf(child);
  kill(child, SIGKILL);
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       StampAlive(cs) && std::chrono::steady_clock::now() < deadline;)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_FALSE(StampAlive(cs));
  waitpid(child, nullptr, 0);
  // The grandchild was reparented (to init or a subreaper); kill it by its stamp's pid.
  for (const auto& s : d) {
    if (s.pid != child && StampAlive(s)) kill(s.pid, SIGKILL);
  }
}

TEST(OrphanCensus, CgroupMountsAndNothingBelowOneself) {
  auto mounts = CgroupMounts();
  ASSERT_FALSE(mounts.empty()) << "no cgroup file system mounted";
  for (const auto& m : mounts) EXPECT_EQ(m.path.rfind("/", 0), 0u) << m.path;
  // A process is never strictly below its own cgroup.
  EXPECT_TRUE(CgroupDirsBelow(getpid(), getpid(), mounts).empty());
}

TEST(OrphanCensus, StateEntriesAppearAndGo) {
  std::string dir = ::testing::TempDir() + "/census-" + std::to_string(getpid());
  std::filesystem::create_directories(dir + "/old");
  std::vector<std::string> before = ListDir(dir);
  std::filesystem::create_directories(dir + "/new-runtime");
  pid_t nobody = fork();  // a holder without children or cgroups of its own
  if (nobody == 0) {
    for (;;) pause();
  }
  OrphanCensus c = OrphanCensus::Capture(nobody, dir, before);
  EXPECT_EQ(c.Count().state_dirs, 1);
  EXPECT_EQ(c.Count().processes, 0);
  EXPECT_FALSE(c.Count().Clean());
  std::filesystem::remove_all(dir + "/new-runtime");
  EXPECT_TRUE(c.Count().Clean());
  kill(nobody, SIGKILL);
  waitpid(nobody, nullptr, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sandcheck
