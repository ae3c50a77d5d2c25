// The probe cache (common/probe_cache.h): a damaged or foreign file is no answer, never an
// exception.
#include "backend/common/probe_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace sbx::backend {
namespace {

class ProbeCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sbx-probe-test-XXXXXX";
    int fd = mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    close(fd);
    file_ = tmpl;
  }
  void TearDown() override { std::remove(file_.c_str()); }
  void Write(const std::string& text) { std::ofstream(file_, std::ios::trunc) << text; }
  std::string file_;
};

TEST_F(ProbeCacheTest, WrittenAnswerIsReadBackForItsKeyOnly) {
  WriteProbeCache(file_, "k1", {{"ok", true}, {"version", "crun version 1.8.1"}});
  auto hit = ReadProbeCache(file_, "k1");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->value("version", ""), "crun version 1.8.1");
  EXPECT_FALSE(ReadProbeCache(file_, "k2").has_value());
}

TEST_F(ProbeCacheTest, DamagedOrMistypedFilesAreNoAnswer) {
  for (const char* text : {"", "{", "[]", "null", R"({"key":"k1"})", R"({"key":"k1","answer":[]})",
                           R"({"key":"k1","answer":{}})", R"({"key":"k1","answer":{"ok":"yes"}})",
                           R"({"key":"k1","answer":{"ok":true,"version":7}})",
                           R"({"key":"k1","answer":{"ok":false,"unix_time":"now"}})",
                           R"({"key":"k1","answer":{"ok":true,"platform":["ptrace"]}})",
                           R"({"key":"k1","answer":{"ok":true,"platforms":["ptrace"]}})",
                           R"({"key":1,"answer":{"ok":true}})"}) {
    Write(text);
    EXPECT_FALSE(ReadProbeCache(file_, "k1").has_value()) << text;
  }
}

TEST_F(ProbeCacheTest, AFailureIsRememberedForTenMinutesOnly) {
  Write(R"({"key":"k1","answer":{"ok":false,"reason":"no kvm","unix_time":1}})");
  EXPECT_FALSE(ReadProbeCache(file_, "k1").has_value());
  WriteProbeCache(file_, "k1", {{"ok", false}, {"reason", "no kvm"}});
  auto fresh = ReadProbeCache(file_, "k1");
  ASSERT_TRUE(fresh.has_value());
  EXPECT_FALSE(fresh->value("ok", true));
}

}  // namespace
}  // namespace sbx::backend
