// A small pool of background threads for work that must not sit on a caller's path
// (tearing down reverted instances, pre-spawning spares). Drain() waits for every queued and
// running task; the destructor drains and joins.
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

  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<void()>> queue_;
  size_t outstanding_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace sbx
