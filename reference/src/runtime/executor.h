// A small pool of background threads for work that must not sit on a caller's path
// (tearing down reverted instances, pre-spawning spares). Drain() waits for every queued and
// running task; the destructor drains and joins.
//
// Bounded (issue 17): TryPost() refuses a task when `limit` tasks are already queued or
// running, and the caller then runs it itself. Under a load the background cannot keep up
// with, reclaim moves onto the callers' paths instead of piling up: what waits for reclaim
// (killed sandboxes, with their descriptors, cgroups and mounts) never exceeds the limit.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sbx {

class Executor {
 public:
  explicit Executor(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~Executor() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void Post(std::function<void()> task) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(task));
      ++outstanding_;
    }
    cv_.notify_one();
  }

  // Posts unless `limit` tasks are queued or running; false = not posted (run it yourself).
  bool TryPost(std::function<void()>& task, size_t limit) {
    {
      std::lock_guard lock(mu_);
      if (outstanding_ >= limit) {
        ++refused_;
        return false;
      }
      queue_.push_back(std::move(task));
      ++outstanding_;
    }
    cv_.notify_one();
    return true;
  }

  size_t outstanding() const {
    std::lock_guard lock(mu_);
    return outstanding_;
  }
  // Tasks TryPost refused since the start (run on their callers' paths instead).
  uint64_t refused() const {
    std::lock_guard lock(mu_);
    return refused_;
  }

  void Drain() {
    std::unique_lock lock(mu_);
    idle_cv_.wait(lock, [&] { return outstanding_ == 0; });
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ and nothing left
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
      {
        std::lock_guard lock(mu_);
        if (--outstanding_ == 0) idle_cv_.notify_all();
      }
    }
  }

  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<void()>> queue_;
  size_t outstanding_ = 0;
  uint64_t refused_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace sbx
