// Unit tests for fs_util.h: a hostile /work (symlinks to host files, nested trees) must never make
// the adapter delete or write outside it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "common/fs_util.h"

namespace sandcheck::adapter {
namespace {

class FsUtilTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sandcheck-fsutil-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    work_ = root_ + "/work";
    outside_ = root_ + "/outside";
    ASSERT_EQ(mkdir(work_.c_str(), 0755), 0);
    ASSERT_EQ(mkdir(outside_.c_str(), 0755), 0);
    ASSERT_TRUE(WriteFileAtomic(outside_ + "/secret", "keep me").ok());
  }
  void TearDown() override { EXPECT_TRUE(RemoveTree(root_).ok()); }

  std::string root_, work_, outside_;
};

TEST_F(FsUtilTest, EmptyDirectoryDoesNotFollowSymlinks) {
  ASSERT_EQ(symlink(outside_.c_str(), (work_ + "/link-to-dir").c_str()), 0);
  ASSERT_EQ(symlink((outside_ + "/secret").c_str(), (work_ + "/link-to-file").c_str()), 0);
  ASSERT_EQ(mkdir((work_ + "/a").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((work_ + "/a/b").c_str(), 0755), 0);
  ASSERT_TRUE(WriteFileAtomic(work_ + "/a/b/f", "x").ok());
  ASSERT_TRUE(EmptyDirectory(work_).ok());
  EXPECT_EQ(*CountEntries(work_), 0);
  EXPECT_EQ(*ReadFile(outside_ + "/secret"), "keep me");
}

TEST_F(FsUtilTest, RemoveTreeOfMissingPathIsOk) { EXPECT_TRUE(RemoveTree(root_ + "/nope").ok()); }

TEST_F(FsUtilTest, WriteFileBeneathCreatesDirsAndOwnership) {
  ASSERT_TRUE(WriteFileBeneath(work_, "d/e/f.txt", "hello", 0640, getuid(), getgid()).ok());
  EXPECT_EQ(*ReadFile(work_ + "/d/e/f.txt"), "hello");
  struct stat st;
  ASSERT_EQ(stat((work_ + "/d/e/f.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

TEST_F(FsUtilTest, WriteFileBeneathRefusesSymlinksAndDotDot) {
  ASSERT_EQ(symlink(outside_.c_str(), (work_ + "/dir").c_str()), 0);
  ASSERT_EQ(symlink((outside_ + "/secret").c_str(), (work_ + "/leaf").c_str()), 0);
  EXPECT_FALSE(WriteFileBeneath(work_, "dir/secret", "pwned", 0644, getuid(), getgid()).ok());
  EXPECT_FALSE(WriteFileBeneath(work_, "leaf", "pwned", 0644, getuid(), getgid()).ok());
  EXPECT_FALSE(
      WriteFileBeneath(work_, "../outside/secret", "pwned", 0644, getuid(), getgid()).ok());
  EXPECT_FALSE(WriteFileBeneath(work_, "a//b", "x", 0644, getuid(), getgid()).ok());
  EXPECT_EQ(*ReadFile(outside_ + "/secret"), "keep me");
}

}  // namespace
}  // namespace sandcheck::adapter
