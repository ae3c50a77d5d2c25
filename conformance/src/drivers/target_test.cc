// TargetInfo: what a target offers, and where (per backend). A check needing a feature that
// only another backend offers must skip on the backend asked for, not fail there (the
// reference runtime's gvisor backend has no limits.disk, its native and oci backends do).
#include "drivers/target.h"

#include <gtest/gtest.h>

namespace sandcheck {
namespace {

using json = nlohmann::json;

TEST(TargetInfo, AFeatureOfAnotherBackendIsNotOfferedOnThisOne) {
  auto info = ParseInfo(json{{"name", "t"},
                             {"backends", {"native", "gvisor"}},
                             {"features", {"limits.disk", "revert", "egress.log"}},
                             {"backend_features",
                              {{"native", {"limits.disk", "revert"}}, {"gvisor", {"revert"}}}}});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_TRUE(info->HasOn("limits.disk", "native"));
  EXPECT_FALSE(info->HasOn("limits.disk", "gvisor"));
  EXPECT_TRUE(info->HasOn("revert", "gvisor"));
  EXPECT_TRUE(info->HasOn("limits.disk", "")) << "no backend asked: the target picks";
  EXPECT_TRUE(info->HasOn("egress.log", "gvisor")) << "named by no backend: the target's";
  EXPECT_TRUE(info->HasOn("limits.disk", "oci")) << "a backend without a list: the union";
  EXPECT_FALSE(info->HasOn("files", "native")) << "offered nowhere";
}

TEST(TargetInfo, WithoutPerBackendListsTheUnionHolds) {
  auto info = ParseInfo(json{{"name", "t"}, {"features", {"revert"}}});
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->HasOn("revert", "gvisor"));
}

TEST(TargetInfo, AMalformedPerBackendListIsAnError) {
  for (const json& bf : {json("x"), json{{"native", "revert"}}, json{{"native", {1}}}}) {
    auto info = ParseInfo(json{{"name", "t"}, {"backend_features", bf}});
    EXPECT_FALSE(info.ok()) << bf.dump();
  }
}

}  // namespace
}  // namespace sandcheck
