// The gateway's DNS responder (EGR-2, EGR-5): UDP and TCP on the resolver address inside the
// gateway namespace. Each query is answered from the policy of the sandbox that sent it,
// identified by source address (tied to its veth by the gateway's anti-spoofing rule).
// Answers come from dns_message.h; malformed queries are dropped.
//
// Thread-safety: Start/destructor from one thread; serves on its own threads.
#pragma once

#include <memory>
#include <thread>

#include "host/fd.h"
#include "net/gateway_shared.h"
#include "sbx/status.h"

namespace sbx::net {

class DnsServer {
 public:
  // `udp` and `tcp_listener` are bound to the resolver address, in the gateway namespace.
  DnsServer(host::UniqueFd udp, host::UniqueFd tcp_listener, std::shared_ptr<GatewayShared> shared);
  ~DnsServer();  // requires shared->Stop() first; joins the UDP and accept threads
  DnsServer(const DnsServer&) = delete;
  DnsServer& operator=(const DnsServer&) = delete;

 private:
  void ServeUdp();
  void AcceptTcp();

  host::UniqueFd udp_, tcp_;
  std::shared_ptr<GatewayShared> shared_;
  std::thread udp_thread_, tcp_thread_;
};

}  // namespace sbx::net
