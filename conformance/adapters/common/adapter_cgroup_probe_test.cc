// Unit tests for cgroup_probe.h against this process's own cgroups (read-only).
#include <gtest/gtest.h>
#include <unistd.h>

#include "common/cgroup_probe.h"

namespace sandcheck::adapter {
namespace {

TEST(CgroupProbeTest, FindsOwnCgroupDirectories) {
  auto dirs = CgroupDirsOf(getpid());
  ASSERT_TRUE(dirs.ok()) << dirs.status().ToString();
  ASSERT_FALSE(dirs->empty());
  for (const auto& d : *dirs) {
    EXPECT_EQ(access((d.dir + "/cgroup.procs").c_str(), R_OK), 0) << d.dir;
    EXPECT_EQ(d.dir.rfind(d.mount_point, 0), 0u) << d.dir << " not under " << d.mount_point;
  }
}

TEST(CgroupProbeTest, MemoryCgroupHasAnOomCounter) {
  auto cg = MemoryCgroupOf(getpid());
  if (!cg.ok()) GTEST_SKIP() << "no memory controller here: " << cg.status().ToString();
  auto n = OomKillCount(*cg);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
}

TEST(CgroupProbeTest, RemoveCgroupDirsTouchesOnlyTheNamedLeaf) {
  char tmpl[] = "/tmp/sandcheck-cg-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string base = tmpl;
  ASSERT_EQ(mkdir((base + "/mine").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((base + "/other").c_str(), 0755), 0);
  EXPECT_TRUE(RemoveCgroupDirs({base + "/mine", base + "/other"}, "mine").ok());
  EXPECT_NE(access((base + "/mine").c_str(), F_OK), 0);
  EXPECT_EQ(access((base + "/other").c_str(), F_OK), 0);
  rmdir((base + "/other").c_str());
  rmdir(base.c_str());
}

}  // namespace
}  // namespace sandcheck::adapter
