// The state directory's format (host/state_dir.h): what the runtime writes, the reaper reads
// back the same, and a directory is called stillborn only when its runtime is really gone.
#include "host/state_dir.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "host/process_stamp.h"

namespace sbx::host {
namespace {

namespace fs = std::filesystem;

class StateDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("state-dir-test-" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

// A pid that was ours and is gone (reaped): no process has it until the kernel wraps around.
pid_t GonePid() {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

TEST(RuntimeId, HasOurPidAndSixHexDigitsAndParsesBack) {
  const std::string id = NewRuntimeId();
  pid_t pid = 0;
  ASSERT_TRUE(ParseRuntimeId(id, &pid)) << id;
  EXPECT_EQ(pid, getpid());
  EXPECT_EQ(id.size(), std::to_string(getpid()).size() + 7);
  EXPECT_NE(NewRuntimeId(), NewRuntimeId());  // 1 in 16M to fail
  for (const char* bad : {"", "-abcdef", "123-abcde", "123-abcdefa", "12x-abcdef", "123-abcdeg",
                          "images", "123abcdef", "0-abcdef"}) {
    EXPECT_FALSE(ParseRuntimeId(bad, nullptr)) << bad;
  }
}

TEST_F(StateDirTest, WhatTheRuntimeWritesTheReaperReadsBack) {
  const std::string dir = (root_ / NewRuntimeId()).string();
  fs::create_directories(dir);
  ASSERT_TRUE(WriteOwnerRecord(dir).ok());
  EXPECT_EQ(ReadOwnerRecord(dir), ProcessStamp(getpid()));
  EXPECT_TRUE(StampAlive(ReadOwnerRecord(dir)));
  EXPECT_FALSE(fs::exists(dir + "/owner.tmp"));

  ASSERT_TRUE(WriteOwnCgroups(dir, {"/sys/fs/cgroup/cpu/a", "/sys/fs/cgroup/memory/b"}).ok());
  EXPECT_EQ(ReadOwnCgroups(dir),
            (std::vector<std::string>{"/sys/fs/cgroup/cpu/a", "/sys/fs/cgroup/memory/b"}));

  const std::string sb = SandboxDir(dir, "sb1-0");
  EXPECT_EQ(sb, dir + "/sb/sb1-0");
  fs::create_directories(sb);
  fs::create_directories(SandboxDir(dir, "sb2-0"));  // an instance without a record yet
  ASSERT_TRUE(WriteInitRecord(sb, getpid()).ok());
  auto inits = ReadInitRecords(dir);
  std::sort(inits.begin(), inits.end());
  EXPECT_EQ(inits, (std::vector<std::string>{"", ProcessStamp(getpid())}));
  RemoveInitRecord(sb);
  EXPECT_FALSE(fs::exists(sb + "/init"));

  // Nothing recorded: empty answers, never an error.
  EXPECT_EQ(ReadOwnerRecord((root_ / "none").string()), "");
  EXPECT_TRUE(ReadOwnCgroups((root_ / "none").string()).empty());
  EXPECT_TRUE(ReadInitRecords((root_ / "none").string()).empty());
}

TEST_F(StateDirTest, StillbornOnlyWhenNamedAsARuntimeWhosePidIsGoneAndEmpty) {
  const pid_t gone = GonePid();
  const fs::path dead = root_ / (std::to_string(gone) + "-00beef");
  fs::create_directories(dead);
  EXPECT_TRUE(IsStillbornRuntimeDir(dead.string()));
  std::ofstream(dead / "owner.tmp") << "half";
  EXPECT_TRUE(IsStillbornRuntimeDir(dead.string()));  // the record that never landed

  const fs::path alive = root_ / (std::to_string(getpid()) + "-00beef");  // between its steps
  fs::create_directories(alive);
  EXPECT_FALSE(IsStillbornRuntimeDir(alive.string()));

  const fs::path holds = root_ / (std::to_string(gone) + "-00cafe");  // holds more than that
  fs::create_directories(holds / "sb");
  EXPECT_FALSE(IsStillbornRuntimeDir(holds.string()));

  const fs::path cache = root_ / "images";  // not a runtime's directory at all
  fs::create_directories(cache);
  EXPECT_FALSE(IsStillbornRuntimeDir(cache.string()));
}

}  // namespace
}  // namespace sbx::host
