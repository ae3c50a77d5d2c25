#include "sbx/units.h"

#include <gtest/gtest.h>

namespace sbx {
namespace {

TEST(ParseMillicores, AcceptsMillicoresAndCores) {
  EXPECT_EQ(*ParseMillicores("500m"), 500);
  EXPECT_EQ(*ParseMillicores("1.5"), 1500);
  EXPECT_EQ(*ParseMillicores("2"), 2000);
  EXPECT_EQ(*ParseMillicores("0.25"), 250);
  EXPECT_EQ(*ParseMillicores("1m"), 1);
}

TEST(ParseMillicores, RejectsNonsenseWithClearErrors) {
  for (const char* bad : {"", "m", "-1", "0", "0m", "500x", "1e3", " 1", "1.5m", "0.0001", "2000000", "abc"}) {
    auto r = ParseMillicores(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("cpu"), std::string::npos) << r.status().message();
  }
}

TEST(ParseBytes, KubernetesAndDecimalSuffixes) {
  EXPECT_EQ(*ParseBytes("256Mi"), 256LL << 20);
  EXPECT_EQ(*ParseBytes("1G"), 1000000000LL);
  EXPECT_EQ(*ParseBytes("1Gi"), 1LL << 30);
  EXPECT_EQ(*ParseBytes("64MiB"), 64LL << 20);
  EXPECT_EQ(*ParseBytes("1.5Gi"), 3LL << 29);
  EXPECT_EQ(*ParseBytes("1048576"), 1048576);
  EXPECT_EQ(*ParseBytes("10k"), 10000);
}

TEST(ParseBytes, RejectsNonsense) {
  for (const char* bad : {"12XB", "", "Mi", "-5Mi", "0", "1.2.3Mi", "5 Mi", "99999999999Ti", "0x10"}) {
    auto r = ParseBytes(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  }
  EXPECT_NE(ParseBytes("12XB").status().message().find("unknown unit 'XB'"), std::string::npos);
}

TEST(ParseSeconds, UnitsAndRange) {
  EXPECT_DOUBLE_EQ(*ParseSeconds("1.5"), 1.5);
  EXPECT_DOUBLE_EQ(*ParseSeconds("250ms"), 0.25);
  EXPECT_DOUBLE_EQ(*ParseSeconds("2s"), 2);
  EXPECT_DOUBLE_EQ(*ParseSeconds("1m"), 60);
  EXPECT_FALSE(ParseSeconds("0").ok());
  EXPECT_FALSE(ParseSeconds("2h").ok());
  EXPECT_FALSE(ParseSeconds("100000").ok());
}

TEST(ParseCount, PositiveBounded) {
  EXPECT_EQ(*ParseCount("64", 100), 64);
  EXPECT_FALSE(ParseCount("0", 100).ok());
  EXPECT_FALSE(ParseCount("101", 100).ok());
  EXPECT_FALSE(ParseCount("6a", 100).ok());
  EXPECT_FALSE(ParseCount("99999999999999999999999", 100).ok());
}

TEST(FormatBytes, RoundTrips) {
  EXPECT_EQ(FormatBytes(256LL << 20), "256Mi");
  EXPECT_EQ(FormatBytes(1000), "1000");
  EXPECT_EQ(*ParseBytes(FormatBytes(3LL << 30)), 3LL << 30);
}

TEST(Status, ErrnoMappingIsTheOnePlace) {
  EXPECT_EQ(ErrnoStatus("x", EPERM).code(), Code::kPermissionDenied);
  EXPECT_EQ(ErrnoStatus("x", ENOENT).code(), Code::kNotFound);
  EXPECT_EQ(ErrnoStatus("x", EIO).code(), Code::kInternal);
  // Issue 17: the host out of descriptors or memory is one cause with one code, whichever call
  // ran out (open, pipe, clone), and it says "try again later".
  EXPECT_EQ(ErrnoStatus("pipe", EMFILE).code(), Code::kSandboxUnavailable);
  EXPECT_EQ(ErrnoStatus("open", ENFILE).code(), Code::kSandboxUnavailable);
  EXPECT_EQ(ErrnoStatus("clone", ENOMEM).code(), Code::kSandboxUnavailable);
  EXPECT_NE(ErrnoStatus("open /x", ENOENT).message().find("open /x"), std::string::npos);
  EXPECT_EQ(CodeName(Code::kResourceExceeded), "resource_exceeded");
}

}  // namespace
}  // namespace sbx
