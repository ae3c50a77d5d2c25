// Ready sandbox networks (RES-7, LC-1 allocate): each a fresh network namespace held by an fd,
// with IPv6 off, lo up, and a veth pair to the gateway ("eth0" inside, "sbx<hex>" in the
// gateway) addressed and routed. A background thread keeps `floor` of them ready so that
// Attach does not pay for creation; with floor 0 every Take creates one on demand.
//
// Used networks are discarded, never recycled: closing the last fd (and the sandbox's last
// process exiting) lets the kernel delete the namespace and the veth pair with it, which is
// asynchronous and cheaper than deleting the veth (16 ms here).
//
// Thread-safety: thread-safe.
#pragma once

#include <netinet/in.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "host/fd.h"
#include "net/rtnl.h"
#include "sbx/status.h"

namespace sbx::net {

// Sandbox addresses in 10.201.0.0/16, handed out round-robin so that an address comes back
// only after ~65k others (a dying namespace is long gone by then).
class AddressAllocator {
 public:
  StatusOr<uint32_t> Allocate();  // network byte order
  void Release(uint32_t addr);

 private:
  std::mutex mu_;
  uint32_t cursor_ = 0;
  std::set<uint32_t> in_use_;  // host byte order offsets
};

struct SandboxNet {
  host::UniqueFd netns;
  uint32_t addr = 0;           // network byte order
  std::string gateway_ifname;  // "sbx<hex>"
};

struct NetnsPoolConfig {
  int gateway_netns_fd = -1;  // borrowed; must outlive the pool
  int home_netns_fd = -1;     // borrowed: where the creator thread waits between creations
  uint32_t gateway_addr = 0;  // network byte order
  std::string interface_prefix;
  int floor = 4;
};

class NetnsPool {
 public:
  // `gateway_rtnl` must have been opened inside the gateway namespace.
  NetnsPool(NetnsPoolConfig config, std::unique_ptr<Rtnl> gateway_rtnl,
            std::shared_ptr<AddressAllocator> addresses);
  ~NetnsPool();  // stops the creator thread; closes the ready namespaces
  NetnsPool(const NetnsPool&) = delete;
  NetnsPool& operator=(const NetnsPool&) = delete;

  // A ready network: from the pool, else made now by the creator thread. Fails if creation
  // fails (e.g. no privilege) or takes longer than 10 s.
  StatusOr<SandboxNet> Take();

  int ready() const;
  int64_t created() const;
  // Sandbox-facing veths currently in the gateway (pool + attached + not yet deleted).
  StatusOr<int> GatewayLinkCount() const;

 private:
  void CreatorLoop();
  // Runs on the creator thread: moves it into a new namespace and wires it.
  StatusOr<SandboxNet> CreateOne();

  NetnsPoolConfig config_;
  std::unique_ptr<Rtnl> gateway_rtnl_;
  mutable std::mutex gateway_mu_;  // guards gateway_rtnl_
  std::shared_ptr<AddressAllocator> addresses_;

  mutable std::mutex mu_;
  std::condition_variable want_;  // creator waits: pool below floor + waiters, or stop
  std::condition_variable have_;  // takers wait: something ready, a failure, or stop
  std::deque<SandboxNet> ready_;
  int waiters_ = 0;
  int64_t created_ = 0;
  int64_t failures_ = 0;
  Status last_error_;
  bool stop_ = false;
  uint64_t next_link_ = 0;
  std::thread creator_;
};

}  // namespace sbx::net
