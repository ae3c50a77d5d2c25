// EgressService: the gateway namespace and its parts, wired as a list of steps.
//
//   Start:   1. a gateway namespace held by an fd (a dedicated thread unshares, then ends)
//            2. in it: forwarding off, IPv6 off, strict reverse-path filter, no ICMP rate limit
//            3. in it: lo up with the gateway address, the nftables ruleset
//            4. in it: the DNS sockets and the proxy's listening socket
//            5. threads (in the runtime's namespace): DNS responder, proxy, pool creator
//   Attach:  validate the policy, take a ready network, publish the sandbox's policy under its
//            address, hand out the namespace fd
//   Release: forget the policy (deny-all from now), end its connections, close the fd
#include <arpa/inet.h>
#include <fmt/format.h>
#include <sys/socket.h>

#include <mutex>
#include <thread>

#include "net/dns_server.h"
#include "net/egress.h"
#include "net/gateway_nft.h"
#include "net/gateway_shared.h"
#include "net/netns.h"
#include "net/netns_pool.h"
#include "net/policy_index.h"
#include "net/proxy.h"
#include "net/rtnl.h"
#include "net/sock_util.h"

namespace sbx::net {
namespace {

constexpr char kInterfacePrefix[] = "sbx";
constexpr uint16_t kProxyPort = 15001;
constexpr uint16_t kDnsPort = 53;

struct GatewaySockets {
  host::UniqueFd netns;
  std::unique_ptr<Rtnl> rtnl;
  host::UniqueFd dns_udp, dns_tcp, proxy;
};

// Runs on a thread of its own, which it moves into the new gateway namespace.
Status SetUpGateway(uint32_t gateway_addr, GatewaySockets* out) {
  ASSIGN_OR_RETURN(out->netns, UnshareNetnsOnThisThread());
  // SECURITY: the gateway never routes: forwarding off here (and the ruleset drops forward);
  // there is no link to the root namespace at all, so there would be nowhere to route to.
  RETURN_IF_ERROR(WriteNetSysctl("net/ipv4/ip_forward", "0"));
  RETURN_IF_ERROR(WriteNetSysctl("net/ipv4/conf/all/forwarding", "0"));
  RETURN_IF_ERROR(WriteNetSysctl("net/ipv4/conf/default/forwarding", "0"));
  RETURN_IF_ERROR(WriteNetSysctl("net/ipv6/conf/all/disable_ipv6", "1"));
  RETURN_IF_ERROR(WriteNetSysctl("net/ipv6/conf/default/disable_ipv6", "1"));
  // SECURITY: strict reverse-path filtering (as well as the ruleset's fib check): a packet is
  // accepted only from the veth its source address routes to, so a sandbox cannot claim
  // another sandbox's address (and so its DNS allow list).
  RETURN_IF_ERROR(WriteNetSysctl("net/ipv4/conf/all/rp_filter", "1"));
  RETURN_IF_ERROR(WriteNetSysctl("net/ipv4/conf/default/rp_filter", "1"));
  // Rejections must be immediate every time, not rate-limited per sandbox after a burst.
  RETURN_IF_ERROR(WriteNetSysctl("net/ipv4/icmp_ratelimit", "0"));

  ASSIGN_OR_RETURN(out->rtnl, Rtnl::Open());
  RETURN_IF_ERROR(out->rtnl->SetLinkUp(1));
  RETURN_IF_ERROR(out->rtnl->AddAddress4(1, in_addr{gateway_addr}, 32));
  GatewayRulesConfig rules{kInterfacePrefix, kGatewayAddress, kProxyPort, kDnsPort};
  RETURN_IF_ERROR(LoadGatewayRuleset(rules));
  ASSIGN_OR_RETURN(out->dns_udp, BindUdp(gateway_addr, kDnsPort));
  ASSIGN_OR_RETURN(out->dns_tcp, ListenTcp(gateway_addr, kDnsPort, 64));
  ASSIGN_OR_RETURN(out->proxy, ListenTcp(gateway_addr, kProxyPort, 1024));
  return Status::Ok();
}

class AttachmentImpl : public Attachment {
 public:
  AttachmentImpl(std::shared_ptr<GatewayShared> shared, std::shared_ptr<AddressAllocator> addresses,
                 std::shared_ptr<const SandboxContext> ctx, SandboxNet net)
      : shared_(std::move(shared)),
        addresses_(std::move(addresses)),
        ctx_(std::move(ctx)),
        net_(std::move(net)) {}

  ~AttachmentImpl() override {
    // SECURITY: forget the policy first: from here on the address is answered as deny-all,
    // even if a process of the sandbox outlives this object.
    shared_->table.Erase(net_.addr);
    ctx_->Cancel();
    shared_->log.Release(ctx_->sandbox_id);
    addresses_->Release(net_.addr);
    net_.netns.Reset();  // the kernel deletes namespace + veth pair after the last process
  }

  int netns_fd() const override { return net_.netns.get(); }
  std::string sandbox_address() const override { return Ipv4String(net_.addr); }
  std::string resolver_address() const override { return kGatewayAddress; }
  std::string sandbox_id() const override { return ctx_->sandbox_id; }

 private:
  std::shared_ptr<GatewayShared> shared_;
  std::shared_ptr<AddressAllocator> addresses_;
  std::shared_ptr<const SandboxContext> ctx_;
  SandboxNet net_;
};

class EgressServiceImpl : public EgressService {
 public:
  EgressServiceImpl(std::shared_ptr<GatewayShared> shared, GatewaySockets gw,
                    host::UniqueFd runtime_netns, host::UniqueFd proxy_netns, int pool_floor)
      : shared_(std::move(shared)),
        gateway_netns_(std::move(gw.netns)),
        runtime_netns_(std::move(runtime_netns)),
        addresses_(std::make_shared<AddressAllocator>()) {
    dns_ = std::make_unique<DnsServer>(std::move(gw.dns_udp), std::move(gw.dns_tcp), shared_);
    proxy_ = std::make_unique<EgressProxy>(std::move(gw.proxy), std::move(proxy_netns), shared_);
    NetnsPoolConfig pc;
    pc.gateway_netns_fd = gateway_netns_.get();
    pc.home_netns_fd = runtime_netns_.get();
    pc.gateway_addr = shared_->gateway_addr;
    pc.interface_prefix = kInterfacePrefix;
    pc.floor = pool_floor;
    pool_ = std::make_unique<NetnsPool>(pc, std::move(gw.rtnl), addresses_);
  }

  ~EgressServiceImpl() override {
    shared_->Stop();
    shared_->table.CancelAll();
    proxy_.reset();
    dns_.reset();
    pool_.reset();
    gateway_netns_.Reset();
    runtime_netns_.Reset();  // with the sockets gone, the kernel frees the gateway namespace
  }

  StatusOr<std::unique_ptr<Attachment>> Attach(
      const std::string& sandbox_id, const EgressPolicy& policy,
      const std::map<std::string, std::string>& hosts) override {
    if (sandbox_id.empty()) return InvalidArgument("egress: empty sandbox id");
    RETURN_IF_ERROR(ValidatePolicy(policy, hosts).WithContext("egress policy"));
    std::lock_guard lock(attach_mu_);
    if (shared_->table.HasSandbox(sandbox_id)) {
      return Status(Code::kAlreadyExists,
                    fmt::format("sandbox {} already has a network", sandbox_id));
    }
    ASSIGN_OR_RETURN(SandboxNet net, pool_->Take());
    auto ctx = std::make_shared<const SandboxContext>(sandbox_id, PolicyIndex(policy, hosts));
    if (!ctx->cancel_fd.valid()) {
      addresses_->Release(net.addr);
      return ErrnoStatus("eventfd");
    }
    shared_->log.Begin(sandbox_id);
    if (!shared_->table.Insert(net.addr, ctx)) {
      addresses_->Release(net.addr);
      return Internal("sandbox address already attached");
    }
    return std::unique_ptr<Attachment>(
        new AttachmentImpl(shared_, addresses_, std::move(ctx), std::move(net)));
  }

  std::vector<GatewayDecision> Decisions(const std::string& sandbox_id) const override {
    return shared_->log.Get(sandbox_id);
  }

  StatusOr<EgressStats> Stats() const override {
    EgressStats s;
    s.pool_ready = pool_->ready();
    s.attached = static_cast<int>(shared_->table.size());
    ASSIGN_OR_RETURN(s.gateway_links, pool_->GatewayLinkCount());
    s.created = pool_->created();
    s.active_connections = shared_->proxy_slots.active() + shared_->dns_tcp_slots.active();
    return s;
  }

 private:
  std::shared_ptr<GatewayShared> shared_;
  host::UniqueFd gateway_netns_;
  host::UniqueFd runtime_netns_;  // the creator thread's home between creations
  std::shared_ptr<AddressAllocator> addresses_;
  std::unique_ptr<DnsServer> dns_;
  std::unique_ptr<EgressProxy> proxy_;
  std::unique_ptr<NetnsPool> pool_;
  std::mutex attach_mu_;
};

}  // namespace

StatusOr<std::unique_ptr<EgressService>> EgressService::Start(const EgressOptions& options) {
  if (options.pool_floor < 0 || options.pool_floor > 256) {
    return InvalidArgument("egress: pool_floor must be in 0..256");
  }
  auto shared = std::make_shared<GatewayShared>();
  if (!shared->stop_fd.valid()) return ErrnoStatus("eventfd");
  if (inet_pton(AF_INET, kGatewayAddress, &shared->gateway_addr) != 1) {
    return Internal("bad gateway address");
  }
  ASSIGN_OR_RETURN(host::UniqueFd runtime_netns, OpenProcessNetns());
  ASSIGN_OR_RETURN(host::UniqueFd proxy_netns, OpenProcessNetns());

  GatewaySockets gw;
  Status st;
  // A throwaway thread: it ends inside the gateway namespace, so no thread of ours stays there.
  std::thread setup([&] { st = SetUpGateway(shared->gateway_addr, &gw); });
  setup.join();
  if (!st.ok()) return st.WithContext("starting the egress gateway");

  return std::unique_ptr<EgressService>(
      new EgressServiceImpl(std::move(shared), std::move(gw), std::move(runtime_netns),
                            std::move(proxy_netns), options.pool_floor));
}

}  // namespace sbx::net
