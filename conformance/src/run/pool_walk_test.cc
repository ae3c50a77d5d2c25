// The pool walk's draw (run/pool_walk.h): deterministic per seed, different across seeds, and
// always holding the four hand-overs a pool can get wrong next to each other.
#include "run/pool_walk.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace sandcheck {
namespace {

TEST(PoolWalkDraw, SameSeedSameWalkAndEveryTransitionCovered) {
  for (int steps : {8, 9, 16, 40}) {
    for (uint64_t seed = 0; seed < 200; ++seed) {
      auto a = DrawWalk(steps, seed);
      ASSERT_EQ(a.size(), static_cast<size_t>(steps));
      EXPECT_TRUE(WalkCoversTransitions(a)) << steps << " " << seed;
      EXPECT_EQ(a, DrawWalk(steps, seed));
    }
  }
  EXPECT_NE(DrawWalk(16, WalkSeed("a")), DrawWalk(16, WalkSeed("b")));
}

TEST(PoolWalkDraw, CoverageNeedsEachTransition) {
  // Trusted a/t1 twice, then b/t1, then b/t2: no untrusted pair.
  std::vector<WalkDraw> w = {{0, 0, 0}, {0, 0, 0}, {1, 0, 0}, {1, 1, 0}};
  EXPECT_FALSE(WalkCoversTransitions(w));
  w.push_back({0, 0, 1});
  w.push_back({0, 0, 1});
  EXPECT_TRUE(WalkCoversTransitions(w));
  EXPECT_EQ(WalkSeed("46ced10859d8"), WalkSeed("46ced10859d8"));
}

TEST(PoolWalkDraw, HostIdentityIsTheProbesShape) {
  auto id = nlohmann::json::parse(HostInstanceIdentity());
  for (const char* k : {"boot_id", "mnt", "pid", "net", "init_start", "booted_unix"})
    EXPECT_TRUE(id.contains(k)) << k;
  EXPECT_TRUE(id["mnt"].is_number());
  EXPECT_TRUE(id["booted_unix"].is_number());
}

}  // namespace
}  // namespace sandcheck
