// The background executor's bound (issue 17): what waits for the background never grows past
// the limit; a refused task is the caller's to run.
#include "runtime/executor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace sbx {
namespace {

TEST(Executor, TryPostRefusesPastTheLimitAndTheCallerRunsIt) {
  Executor ex(1);
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> ran{0};
  // One task blocks the only thread; the limit is 3 outstanding (1 running + 2 queued).
  std::function<void()> blocker = [&] {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return release; });
    ++ran;
  };
  ASSERT_TRUE(ex.TryPost(blocker, 3));
  for (int i = 0; i < 2; ++i) {
    std::function<void()> t = [&] { ++ran; };
    EXPECT_TRUE(ex.TryPost(t, 3)) << i;
  }
  std::function<void()> refused = [&] { ++ran; };
  EXPECT_FALSE(ex.TryPost(refused, 3));
  EXPECT_TRUE(static_cast<bool>(refused)) << "a refused task must be left to its caller";
  EXPECT_EQ(ex.outstanding(), 3u);
  EXPECT_EQ(ex.refused(), 1u);
  refused();  // the caller's path
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  ex.Drain();
  EXPECT_EQ(ran.load(), 4);
  EXPECT_EQ(ex.outstanding(), 0u);
  std::function<void()> after = [&] { ++ran; };
  EXPECT_TRUE(ex.TryPost(after, 3)) << "room again once the backlog is done";
  ex.Drain();
  EXPECT_EQ(ran.load(), 5);
}

}  // namespace
}  // namespace sbx
