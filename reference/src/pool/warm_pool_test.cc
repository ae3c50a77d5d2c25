// The pool's policy, with a fake item that remembers who used it.
#include "pool/warm_pool.h"

#include <random>
#include <set>
#include <unistd.h>

#include <gtest/gtest.h>

namespace sbx::pool {
namespace {

struct FakeSandbox {
  int serial = 0;
  std::set<std::string> tenants;  // every tenant it served
  std::set<std::pair<std::string, std::string>> users;
  bool dirty = false;
};

struct Harness {
  int made = 0;
  bool reset_ok = true;
  WarmPool<FakeSandbox> pool;
  explicit Harness(PoolOptions o = {})
      : pool(o, [this]() -> StatusOr<std::unique_ptr<FakeSandbox>> {
               auto s = std::make_unique<FakeSandbox>();
               s->serial = ++made;
               return s;
             },
             [this](FakeSandbox& s) {
               s.dirty = false;
               return reset_ok;
             }) {}
};

TEST(WarmPool, TakesAWarmItemWhenThereIsOne) {
  Harness h;
  (void)h.pool.Refill();
  EXPECT_EQ(h.pool.fresh_count(), 1);
  auto l = h.pool.Take("alice", "grep");
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->warm);
  EXPECT_FALSE(l->reused);
  auto cold = h.pool.Take("alice", "grep");
  EXPECT_FALSE(cold->warm);  // the shelf was empty: made on the caller's path
}

TEST(WarmPool, UntrustedIsDiscardedTrustedIsResetAndKeptForTheSameTenantAndTool) {
  Harness h;
  auto a = h.pool.Take("alice", "grep");
  EXPECT_NE(h.pool.Return(std::move(a->item), "alice", "grep", /*trusted=*/false), nullptr);  // POOL-5
  auto b = h.pool.Take("alice", "grep");
  int serial = b->item->serial;
  EXPECT_EQ(h.pool.Return(std::move(b->item), "alice", "grep", /*trusted=*/true), nullptr);  // POOL-3
  auto bob = h.pool.Take("bob", "grep");
  EXPECT_NE(bob->item->serial, serial) << "POOL-4: a used sandbox went to another tenant";
  auto other_tool = h.pool.Take("alice", "sed");
  EXPECT_NE(other_tool->item->serial, serial) << "LC-10: reuse only within the same tool";
  auto again = h.pool.Take("alice", "grep");
  EXPECT_EQ(again->item->serial, serial);
  EXPECT_TRUE(again->reused);
}

TEST(WarmPool, AFailedResetDiscards) {
  Harness h;
  h.reset_ok = false;
  auto a = h.pool.Take("alice", "grep");
  EXPECT_NE(h.pool.Return(std::move(a->item), "alice", "grep", true), nullptr);
}

TEST(WarmPool, SizeFollowsDemandBetweenFloorAndCeiling) {
  // 50 takes in a 10 s window are 5/s, still over the ceiling: "busy" does not depend on how
  // fast the lines below run.
  Harness h(PoolOptions{.floor = 2, .ceiling = 5, .window_s = 10});
  (void)h.pool.Refill();
  EXPECT_EQ(h.pool.fresh_count(), 2);  // idle: the floor
  for (int i = 0; i < 50; ++i) (void)h.pool.Take("t", "x");
  EXPECT_EQ(h.pool.Target(), 5);  // busy: capped at the ceiling
  (void)h.pool.Refill();
  EXPECT_EQ(h.pool.fresh_count(), 5);
  for (int i = 0; i < 2; ++i) (void)h.pool.Take("t", "x");
  EXPECT_GE(h.pool.Target(), 2);
}

TEST(WarmPool, SurplusIsReturnedForDestruction) {
  // The takes must still be in the window at the first Refill (a stall of up to ~1 s between
  // two lines is tolerated), and out of it at the second: a sleep longer than the window, on
  // the same monotonic clock, guarantees that whatever the machine's speed.
  Harness h(PoolOptions{.floor = 1, .ceiling = 5, .window_s = 1});
  for (int i = 0; i < 20; ++i) (void)h.pool.Take("t", "x");
  (void)h.pool.Refill();
  EXPECT_EQ(h.pool.fresh_count(), 5);
  usleep(1100000);  // demand window passes
  auto surplus = h.pool.Refill();
  EXPECT_EQ(surplus.size(), 4u);
  EXPECT_EQ(h.pool.fresh_count(), 1);
}

// POOL-4 with thousands of random interleaved operations: no item ever serves two tenants or
// two (tenant, tool) pairs, whatever the order of takes, returns, resets and refills.
TEST(WarmPool, RandomisedNeverCrossesTenants) {
  Harness h(PoolOptions{.floor = 2, .ceiling = 6, .owned_per_key = 3, .window_s = 0.01});
  std::mt19937 rng(20261130);
  const std::vector<std::string> tenants = {"alice", "bob", "carol", "dave"};
  const std::vector<std::string> tools = {"grep", "curl", "python"};
  std::vector<std::pair<std::unique_ptr<FakeSandbox>, std::pair<std::string, std::string>>> out;
  int ops = 0;
  for (int step = 0; step < 20000; ++step) {
    int op = static_cast<int>(rng() % 10);
    if (op < 5) {
      std::string t = tenants[rng() % tenants.size()], tool = tools[rng() % tools.size()];
      auto l = h.pool.Take(t, tool);
      ASSERT_TRUE(l.ok());
      FakeSandbox& s = *l->item;
      ASSERT_FALSE(s.dirty) << "an item was handed out without a reset";
      s.tenants.insert(t);
      s.users.insert({t, tool});
      ASSERT_EQ(s.tenants.size(), 1u) << "item " << s.serial << " crossed tenants";
      ASSERT_EQ(s.users.size(), 1u) << "item " << s.serial << " crossed tools";
      s.dirty = true;
      out.emplace_back(std::move(l->item), std::make_pair(t, tool));
    } else if (op < 9 && !out.empty()) {
      size_t i = rng() % out.size();
      auto [item, who] = std::move(out[i]);
      out.erase(out.begin() + static_cast<long>(i));
      h.reset_ok = rng() % 10 != 0;
      bool trusted = rng() % 3 != 0;
      auto back = h.pool.Return(std::move(item), who.first, who.second, trusted);
      (void)back;  // discarded items are destroyed by the caller
    } else {
      (void)h.pool.Refill();
    }
    ++ops;
  }
  EXPECT_EQ(ops, 20000);
  EXPECT_GT(h.made, 100);
}

}  // namespace
}  // namespace sbx::pool

namespace sbx::pool {
namespace {

// Issue 17: one refill per pool at a time, and a request made while one runs is not lost.
TEST(WarmPool, OneRefillAtATimeAndNoRequestLost) {
  Harness h;
  EXPECT_TRUE(h.pool.BeginRefill());
  EXPECT_FALSE(h.pool.BeginRefill()) << "a second refill started while one runs";
  EXPECT_FALSE(h.pool.BeginRefill());
  // The running refill is told to go again (once, for both requests), then it ends.
  EXPECT_TRUE(h.pool.EndRefill());
  EXPECT_FALSE(h.pool.EndRefill());
  EXPECT_TRUE(h.pool.BeginRefill()) << "after the end a new refill may start";
  EXPECT_FALSE(h.pool.EndRefill());
}

// A refill follows the demand while it runs (the target is read after every item) and never
// makes more than the ceiling whatever the demand.
TEST(WarmPool, RefillNeverPassesTheCeiling) {
  Harness h(PoolOptions{.floor = 1, .ceiling = 3, .owned_per_key = 2, .window_s = 10});
  for (int i = 0; i < 500; ++i) (void)h.pool.Take("alice", "t");
  EXPECT_TRUE(h.pool.Refill().empty());
  EXPECT_EQ(h.pool.fresh_count(), 3);
  EXPECT_TRUE(h.pool.Refill().empty());
  EXPECT_EQ(h.pool.fresh_count(), 3);
}

// Issue 17: the reset sandboxes kept for reuse are bounded over all (tenant, tool) keys, not
// only per key: a thousand tools must not keep a thousand sandboxes.
TEST(WarmPool, ReusedItemsAreBoundedOverAllKeys) {
  Harness h(PoolOptions{.floor = 1, .ceiling = 2, .owned_per_key = 2, .owned_total = 5, .window_s = 10});
  int kept = 0, discarded = 0;
  for (int t = 0; t < 100; ++t) {
    auto l = h.pool.Take("alice", "tool" + std::to_string(t));
    auto back = h.pool.Return(std::move(l->item), "alice", "tool" + std::to_string(t), /*trusted=*/true);
    (back ? discarded : kept)++;
  }
  EXPECT_EQ(kept, 5);
  EXPECT_EQ(discarded, 95);
  EXPECT_EQ(h.pool.owned_count(), 5);
  // Taking one back frees its place.
  auto again = h.pool.Take("alice", "tool0");
  EXPECT_TRUE(again->reused);
  EXPECT_EQ(h.pool.owned_count(), 4);
  EXPECT_EQ(h.pool.Drain().size(), 4u + static_cast<size_t>(h.pool.fresh_count()));
}

}  // namespace
}  // namespace sbx::pool
