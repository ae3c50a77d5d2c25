// Warm pools (POOL-1..POOL-8, LC-2, LC-10): pre-initialised sandboxes, one pool per
// (backend, image, tenant class). The policy lives here, apart from any kernel object, so it can
// be tested exhaustively with a fake item type; the runtime instantiates it with native
// instances.
//
// Rules (TRT-003 §7):
//   * a fresh item (never used) may go to any tenant of the pool's tenant class;
//   * a used item is never given to another tenant: after use it is either discarded
//     (untrusted: POOL-3, POOL-5) or reset and kept for the SAME tenant + tool only
//     (trusted: POOL-3, POOL-7, LC-10);
//   * the number of fresh items follows demand between a floor and a ceiling (POOL-6).
//
// Thread-safety: all methods are thread-safe. Creating and destroying items happens outside the
// lock (the factory and the recycler may be slow).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "sbx/status.h"

namespace sbx::pool {

struct PoolOptions {
  int floor = 1;          // fresh items kept even when idle
  int ceiling = 8;        // never more fresh items than this
  int owned_per_key = 2;  // reset items kept per (tenant, tool)
  int owned_total = 32;   // reset items kept over all (tenant, tool) keys (issue 17: bounded)
  double window_s = 10;   // demand is measured over this window
};

template <typename T>
class WarmPool {
 public:
  using Factory = std::function<StatusOr<std::unique_ptr<T>>()>;
  // Resets a used item for reuse by the same tenant + tool; false = discard it.
  using Resetter = std::function<bool(T&)>;
  using Clock = std::chrono::steady_clock;

  struct Lease {
    std::unique_ptr<T> item;
    bool warm = false;   // taken from the pool (vs created on the caller's path)
    bool reused = false; // a reset item of the same tenant + tool
  };

  WarmPool(PoolOptions options, Factory factory, Resetter resetter)
      : options_(options), factory_(std::move(factory)), resetter_(std::move(resetter)) {}

  // POOL-2: a warm item if there is one (an item this tenant + tool used before, else a fresh
  // one), else a new one made on the caller's path.
  StatusOr<Lease> Take(const std::string& tenant, const std::string& tool) {
    {
      std::lock_guard lock(mu_);
      takes_.push_back(Clock::now());
      auto it = owned_.find({tenant, tool});
      if (it != owned_.end() && !it->second.empty()) {
        Lease l{std::move(it->second.front()), true, true};
        it->second.pop_front();
        --owned_count_;
        if (it->second.empty()) owned_.erase(it);
        return l;
      }
      if (!fresh_.empty()) {
        Lease l{std::move(fresh_.front()), true, false};
        fresh_.pop_front();
        return l;
      }
    }
    ASSIGN_OR_RETURN(auto item, factory_());
    return Lease{std::move(item), false, false};
  }

  // POOL-3: after use. Untrusted: discarded (returned to the caller to destroy). Trusted: reset
  // and kept for the same tenant + tool; discarded if the reset fails or the shelf is full.
  // Returns the item if the caller must destroy it.
  std::unique_ptr<T> Return(std::unique_ptr<T> item, const std::string& tenant, const std::string& tool,
                            bool trusted) {
    if (!trusted || !resetter_(*item)) return item;
    std::lock_guard lock(mu_);
    auto& shelf = owned_[{tenant, tool}];
    if (static_cast<int>(shelf.size()) >= options_.owned_per_key || owned_count_ >= options_.owned_total) {
      if (shelf.empty()) owned_.erase({tenant, tool});
      return item;
    }
    shelf.push_back(std::move(item));
    ++owned_count_;
    return nullptr;
  }

  // POOL-6: how many fresh items demand asks for now: takes in the window, at least the floor,
  // at most the ceiling.
  int Target() {
    std::lock_guard lock(mu_);
    auto cutoff = Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(options_.window_s));
    while (!takes_.empty() && takes_.front() < cutoff) takes_.pop_front();
    int demand = static_cast<int>(std::ceil(static_cast<double>(takes_.size()) / options_.window_s));
    return std::clamp(demand + options_.floor, options_.floor, options_.ceiling);
  }

  // Brings the fresh shelf to Target(): makes what is missing; returns surplus items for the
  // caller to destroy. Call from a background thread. The target is read again after every
  // item made, so a refill follows demand while it runs.
  std::vector<std::unique_ptr<T>> Refill() {
    std::vector<std::unique_ptr<T>> surplus;
    for (;;) {
      int target = Target();
      {
        std::lock_guard lock(mu_);
        int have = static_cast<int>(fresh_.size());
        if (have > target) {
          surplus.push_back(std::move(fresh_.back()));
          fresh_.pop_back();
          continue;
        }
        if (have == target) break;
      }
      auto item = factory_();
      if (!item.ok()) break;
      std::lock_guard lock(mu_);
      fresh_.push_back(std::move(item).value());
    }
    return surplus;
  }

  // One refill at a time per pool (issue 17: a refill posted per request made N background
  // threads create at once and overshoot the ceiling). BeginRefill() true = the caller must
  // run a refill now; false = one is already scheduled or running, and it will run again
  // (EndRefill() returns true once more) so this request's demand is not lost.
  bool BeginRefill() {
    std::lock_guard lock(mu_);
    if (refilling_) {
      refill_again_ = true;
      return false;
    }
    refilling_ = true;
    return true;
  }
  // After a refill: true = another was asked for meanwhile, run it again.
  bool EndRefill() {
    std::lock_guard lock(mu_);
    if (refill_again_) {
      refill_again_ = false;
      return true;
    }
    refilling_ = false;
    return false;
  }

  // Everything the pool holds, for destruction (runtime shutdown).
  std::vector<std::unique_ptr<T>> Drain() {
    std::lock_guard lock(mu_);
    std::vector<std::unique_ptr<T>> all;
    for (auto& f : fresh_) all.push_back(std::move(f));
    fresh_.clear();
    for (auto& [key, shelf] : owned_) {
      for (auto& i : shelf) all.push_back(std::move(i));
    }
    owned_.clear();
    owned_count_ = 0;
    return all;
  }

  int fresh_count() {
    std::lock_guard lock(mu_);
    return static_cast<int>(fresh_.size());
  }
  int owned_count() {
    std::lock_guard lock(mu_);
    return owned_count_;
  }

 private:
  PoolOptions options_;
  Factory factory_;
  Resetter resetter_;
  std::mutex mu_;
  std::deque<std::unique_ptr<T>> fresh_;
  std::map<std::pair<std::string, std::string>, std::deque<std::unique_ptr<T>>> owned_;
  std::deque<Clock::time_point> takes_;
  bool refilling_ = false, refill_again_ = false;
  int owned_count_ = 0;
};

}  // namespace sbx::pool
