// Unit tests for json_io.h: strictness (unknown keys, wrong types) and output of arbitrary bytes.
#include <gtest/gtest.h>

#include "common/json_io.h"
#include "common/protocol.h"

namespace sandcheck::adapter {
namespace {

TEST(JsonIoTest, EmptyInputIsAnEmptyObject) {
  auto j = ParseObject("  \n");
  ASSERT_TRUE(j.ok());
  EXPECT_TRUE(j->empty());
}

TEST(JsonIoTest, RejectsGarbageAndNonObjects) {
  EXPECT_EQ(ParseObject("{").status().code(), sbx::Code::kInvalidArgument);
  EXPECT_EQ(ParseObject("[1]").status().code(), sbx::Code::kInvalidArgument);
  EXPECT_EQ(ParseObject("{} {}").status().code(), sbx::Code::kInvalidArgument);
}

TEST(JsonIoTest, UnknownKeysAreErrors) {
  auto j = *ParseObject(R"({"sandbox":"x","cmd":"true","timeout":3})");
  auto st = CheckKeys(j, {"sandbox", "cmd", "timeout_s"}, "exec");
  EXPECT_EQ(st.code(), sbx::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("\"timeout\""), std::string::npos);
}

TEST(JsonIoTest, TypesAreChecked) {
  auto j = *ParseObject(R"({"s":1,"n":"2","c":-1,"f":1.5,"ok":3,"null":null})");
  EXPECT_FALSE(OptString(j, "s").ok());
  EXPECT_FALSE(OptNumber(j, "n").ok());
  EXPECT_FALSE(OptCount(j, "c").ok());
  EXPECT_FALSE(OptCount(j, "f").ok());
  EXPECT_EQ(**OptCount(j, "ok"), 3);
  EXPECT_FALSE(OptCount(j, "null")->has_value());
  EXPECT_FALSE(OptCount(j, "missing")->has_value());
  EXPECT_FALSE(RequireString(j, "missing").ok());
}

TEST(JsonIoTest, DumpSurvivesInvalidUtf8) {
  Json j = {{"stdout", std::string("ok \xff\xfe end")}};
  std::string s = Dump(j);
  EXPECT_NE(s.find("ok "), std::string::npos);
  EXPECT_TRUE(ParseObject(s).ok());
}

TEST(Base64Test, DecodesWithAndWithoutPadding) {
  EXPECT_EQ(*DecodeBase64("aGVsbG8="), "hello");
  EXPECT_EQ(*DecodeBase64("aGVsbG8"), "hello");
  EXPECT_EQ(*DecodeBase64(""), "");
  EXPECT_FALSE(DecodeBase64("a$==").ok());
  EXPECT_FALSE(DecodeBase64("a").ok());
}

}  // namespace
}  // namespace sandcheck::adapter
