// The spare instance of a persistent sandbox (native, oci, gvisor): built in the background from
// the latest durable snapshot, so that a revert is a swap (SNAP-2, POOL-8; docs/snapshots.md).
// One scheme for any instance type T. (The microVM backend keeps spare clones per template
// instead: SpareClones in microvm_sandbox.h, shared by every sandbox of that template.)
//
// Thread-safety: all members are thread-safe; the background task holds a shared_ptr.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "sbx/status.h"

namespace sbx::backend {

template <typename T>
class SpareSlot : public std::enable_shared_from_this<SpareSlot<T>> {
 public:
  using Make = std::function<StatusOr<std::unique_ptr<T>>()>;
  using Discard = std::function<void(std::unique_ptr<T>)>;

  // Starts building a spare with `make` on `background` unless one is pending or current.
  void Schedule(const std::function<void(std::function<void()>)>& background, Make make,
                Discard discard) {
    uint64_t epoch;
    {
      std::lock_guard lock(mu_);
      if (closed_ || pending_ || (ready_ && ready_epoch_ == epoch_)) return;
      pending_ = true;
      epoch = epoch_;
    }
    auto self = this->shared_from_this();
    background([self, make = std::move(make), discard = std::move(discard), epoch] {
      auto inst = make();
      std::unique_ptr<T> stale;
      {
        std::lock_guard lock(self->mu_);
        self->pending_ = false;
        if (inst.ok()) {
          if (self->closed_ || epoch != self->epoch_) {
            stale = std::move(inst).value();
          } else {
            stale = std::move(self->ready_);
            self->ready_ = std::move(inst).value();
            self->ready_epoch_ = epoch;
          }
        }
        self->cv_.notify_all();
      }
      if (stale) discard(std::move(stale));
    });
  }

  // The spare if one is pending or ready and current (waiting for a pending one); else null.
  std::unique_ptr<T> Take() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !pending_; });
    if (ready_ && ready_epoch_ == epoch_) return std::move(ready_);
    return nullptr;
  }
  // True if a current spare is ready now (for measurements).
  bool Ready() {
    std::lock_guard lock(mu_);
    return !pending_ && ready_ && ready_epoch_ == epoch_;
  }

  // The durable snapshot changed: spares built before are stale.
  void Invalidate() {
    std::lock_guard lock(mu_);
    ++epoch_;
  }

  // No more spares; waits for a pending one and returns whatever is left (to tear down).
  std::unique_ptr<T> Close() {
    std::unique_lock lock(mu_);
    closed_ = true;
    cv_.wait(lock, [&] { return !pending_; });
    return std::move(ready_);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool pending_ = false, closed_ = false;
  uint64_t epoch_ = 0, ready_epoch_ = 0;
  std::unique_ptr<T> ready_;
};

}  // namespace sbx::backend
