// State shared by the gateway's threads (DNS responder, proxy): the sandbox table, the decision
// log, and the bookkeeping of connection threads so that shutdown can end and await them and
// one sandbox cannot take every connection slot.
//
// Threads hold a shared_ptr to GatewayShared, so it outlives the last of them.
// Thread-safety: thread-safe.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>

#include "host/fd.h"
#include "net/sandbox_table.h"

namespace sbx::net {

// Connection slots: at most `max_total` at once, `max_per_peer` per sandbox address.
class ConnectionSlots {
 public:
  ConnectionSlots(int max_total, int max_per_peer)
      : max_total_(max_total), max_per_peer_(max_per_peer) {}
  bool TryAcquire(uint32_t peer) {
    std::lock_guard lock(mu_);
    if (total_ >= max_total_ || per_peer_[peer] >= max_per_peer_) return false;
    ++total_;
    ++per_peer_[peer];
    return true;
  }
  void Release(uint32_t peer) {
    std::lock_guard lock(mu_);
    --total_;
    if (--per_peer_[peer] <= 0) per_peer_.erase(peer);
    if (total_ == 0) idle_.notify_all();
  }
  int active() const {
    std::lock_guard lock(mu_);
    return total_;
  }
  // Waits until no slot is held (or `timeout` passes); true when idle.
  bool WaitIdle(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return idle_.wait_for(lock, timeout, [&] { return total_ == 0; });
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable idle_;
  int max_total_, max_per_peer_;
  int total_ = 0;
  std::map<uint32_t, int> per_peer_;
};

struct GatewayShared {
  GatewayShared() : stop_fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

  // Wakes every poll() that includes stop_fd, for good (the counter is never read).
  void Stop() {
    uint64_t one = 1;
    if (write(stop_fd.get(), &one, sizeof(one)) < 0) {
      // Cannot fail for a valid eventfd short of overflow; nothing better to do.
    }
  }

  uint32_t gateway_addr = 0;  // network byte order
  SandboxTable table;
  DecisionLog log;
  host::UniqueFd stop_fd;
  ConnectionSlots proxy_slots{512, 64};
  ConnectionSlots dns_tcp_slots{64, 8};
};

}  // namespace sbx::net
