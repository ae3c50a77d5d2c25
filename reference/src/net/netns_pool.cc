#include "net/netns_pool.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <linux/if.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>

#include "net/netns.h"

namespace sbx::net {
namespace {

constexpr uint32_t kSandboxBase = 0x0ac90000;  // 10.201.0.0
constexpr uint32_t kSandboxCount = 65534;      // .0.1 .. .255.254
constexpr int kLoopbackIndex = 1;              // LOOPBACK_IFINDEX: lo is always 1 in a netns

}  // namespace

StatusOr<uint32_t> AddressAllocator::Allocate() {
  std::lock_guard lock(mu_);
  for (uint32_t tries = 0; tries < kSandboxCount; ++tries) {
    cursor_ = cursor_ % kSandboxCount + 1;  // 1 .. kSandboxCount
    if (in_use_.insert(cursor_).second) return htonl(kSandboxBase + cursor_);
  }
  return Status(Code::kResourceExceeded, "no free sandbox address in 10.201.0.0/16");
}

void AddressAllocator::Release(uint32_t addr) {
  std::lock_guard lock(mu_);
  in_use_.erase(ntohl(addr) - kSandboxBase);
}

NetnsPool::NetnsPool(NetnsPoolConfig config, std::unique_ptr<Rtnl> gateway_rtnl,
                     std::shared_ptr<AddressAllocator> addresses)
    : config_(std::move(config)),
      gateway_rtnl_(std::move(gateway_rtnl)),
      addresses_(std::move(addresses)) {
  creator_ = std::thread([this] { CreatorLoop(); });
}

NetnsPool::~NetnsPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  want_.notify_all();
  have_.notify_all();
  if (creator_.joinable()) creator_.join();
  for (SandboxNet& n : ready_) addresses_->Release(n.addr);
  ready_.clear();  // closes the namespace fds: the kernel deletes them with their veths
}

StatusOr<SandboxNet> NetnsPool::Take() {
  std::unique_lock lock(mu_);
  int64_t failures_at_start = failures_;
  ++waiters_;
  want_.notify_one();
  bool ok = have_.wait_for(lock, std::chrono::seconds(10), [&] {
    return !ready_.empty() || stop_ || failures_ != failures_at_start;
  });
  --waiters_;
  if (!ready_.empty()) {
    SandboxNet n = std::move(ready_.front());
    ready_.pop_front();
    want_.notify_one();  // refill in the background
    return n;
  }
  if (stop_) return FailedPrecondition("egress service is stopping");
  if (!ok) return Status(Code::kTimeout, "no sandbox network ready within 10 s");
  return last_error_.WithContext("creating a sandbox network");
}

int NetnsPool::ready() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(ready_.size());
}

int64_t NetnsPool::created() const {
  std::lock_guard lock(mu_);
  return created_;
}

StatusOr<int> NetnsPool::GatewayLinkCount() const {
  std::lock_guard lock(gateway_mu_);
  ASSIGN_OR_RETURN(std::vector<LinkInfo> links, gateway_rtnl_->ListLinks());
  int n = 0;
  for (const LinkInfo& l : links) {
    if (l.kind == "veth" && l.name.rfind(config_.interface_prefix, 0) == 0) ++n;
  }
  return n;
}

void NetnsPool::CreatorLoop() {
  // This thread hops into every namespace it creates (unshare) and is never used for anything
  // else, so no other code ever runs in the wrong namespace.
  std::unique_lock lock(mu_);
  while (true) {
    want_.wait(lock,
               [&] { return stop_ || static_cast<int>(ready_.size()) < config_.floor + waiters_; });
    if (stop_) return;
    lock.unlock();
    StatusOr<SandboxNet> n = CreateOne();
    // SECURITY/leak: a thread's membership holds a namespace alive. Leave the one just made,
    // so that once its fd is closed nothing of ours keeps it (or its veth) in existence.
    if (setns(config_.home_netns_fd, CLONE_NEWNET) != 0 && n.ok()) {
      n = ErrnoStatus("setns back to the runtime's namespace");
    }
    lock.lock();
    if (n.ok()) {
      ready_.push_back(std::move(*n));
      ++created_;
      have_.notify_all();
    } else {
      ++failures_;
      last_error_ = n.status();
      have_.notify_all();
      // Do not spin on a persistent failure; a taker asking again retries at once.
      want_.wait_for(lock, std::chrono::milliseconds(500), [&] { return stop_; });
    }
  }
}

StatusOr<SandboxNet> NetnsPool::CreateOne() {
  ASSIGN_OR_RETURN(uint32_t addr, addresses_->Allocate());
  SandboxNet net;
  net.addr = addr;
  bool done = false;
  struct ReleaseOnFailure {
    AddressAllocator* a;
    uint32_t addr;
    bool* done;
    ~ReleaseOnFailure() {
      if (!*done) a->Release(addr);
    }
  } guard{addresses_.get(), addr, &done};

  uint64_t link_no;
  {
    std::lock_guard lock(mu_);
    link_no = ++next_link_;
  }
  net.gateway_ifname = fmt::format("{}{:x}", config_.interface_prefix, link_no);
  if (net.gateway_ifname.size() > 15) return Internal("interface name too long");

  // --- inside the new sandbox namespace (this thread moves into it) ---
  ASSIGN_OR_RETURN(net.netns, UnshareNetnsOnThisThread());
  // SECURITY: no IPv6 at all in the sandbox (no link-local address, no route), so every IPv6
  // attempt fails at once instead of leaking or hanging. Set before eth0 exists, via
  // "default", and on "all" for lo.
  RETURN_IF_ERROR(WriteNetSysctl("net/ipv6/conf/default/disable_ipv6", "1"));
  RETURN_IF_ERROR(WriteNetSysctl("net/ipv6/conf/all/disable_ipv6", "1"));
  ASSIGN_OR_RETURN(std::unique_ptr<Rtnl> nl, Rtnl::Open());
  RETURN_IF_ERROR(nl->SetLinkUp(kLoopbackIndex));
  RETURN_IF_ERROR(nl->CreateVeth("eth0", net.gateway_ifname, config_.gateway_netns_fd));
  ASSIGN_OR_RETURN(int eth0, nl->LinkIndex("eth0"));
  in_addr sandbox{addr}, gateway{config_.gateway_addr}, any{0};
  RETURN_IF_ERROR(nl->AddAddress4(eth0, sandbox, 32));
  RETURN_IF_ERROR(nl->SetLinkUp(eth0));
  // The gateway is the only neighbour: a /32 on the link and the default route through it.
  RETURN_IF_ERROR(nl->AddRoute4(gateway, 32, eth0, std::nullopt, false));
  RETURN_IF_ERROR(nl->AddRoute4(any, 0, eth0, gateway, false));

  // --- the gateway side (a netlink socket made in the gateway namespace) ---
  int gw_index = 0;
  {
    std::lock_guard lock(gateway_mu_);
    ASSIGN_OR_RETURN(int gw_if, gateway_rtnl_->LinkIndex(net.gateway_ifname));
    RETURN_IF_ERROR(gateway_rtnl_->SetLinkUp(gw_if));
    // SECURITY: this /32 is what ties the sandbox's address to its veth for the anti-spoofing
    // rule (fib saddr . iif). Replace: a namespace that still dies slowly may hold an old one.
    RETURN_IF_ERROR(gateway_rtnl_->AddRoute4(sandbox, 32, gw_if, std::nullopt, true));
    gw_index = gw_if;
  }
  // Ready means operational on both ends. The kernel's link watch activates a device's queue
  // a few ms after carrier-on (from a workqueue); a packet sent before that loses its ARP
  // request and waits for the 1 s ARP retransmit (measured: 6 of 20 first DNS queries took
  // 1.02 s without this wait).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (true) {
    ASSIGN_OR_RETURN(int inside, nl->OperState(eth0));
    int outside;
    {
      std::lock_guard lock(gateway_mu_);
      ASSIGN_OR_RETURN(outside, gateway_rtnl_->OperState(gw_index));
    }
    if (inside == IF_OPER_UP && outside == IF_OPER_UP) break;
    if (std::chrono::steady_clock::now() > deadline) {
      return Internal(fmt::format("veth {} not operational after 3 s", net.gateway_ifname));
    }
    usleep(200);
  }
  done = true;
  return net;
}

}  // namespace sbx::net
