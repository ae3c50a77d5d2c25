// The egress proxy (EGR-1, EGR-3, EGR-4): every TCP connection a sandbox opens (other than DNS)
// is DNATed here by the gateway ruleset. Per connection: the original destination
// (SO_ORIGINAL_DST), the first bytes (an HTTP request head or a TLS ClientHello), a verdict
// (gateway_decide.h), then either a relay to the real upstream or a refusal: HTTP 403 for
// HTTP, a reset for anything else.
//
// SECURITY: the listening socket lives in the gateway namespace, but upstream connections are
// made by threads in the runtime's own namespace (the accept thread joins it explicitly), so
// allowed traffic crosses only through this process, and only to the allowed name's address.
//
// Thread-safety: constructor/destructor from one thread; serves on its own threads.
#pragma once

#include <memory>
#include <thread>

#include "host/fd.h"
#include "net/gateway_shared.h"

namespace sbx::net {

class EgressProxy {
 public:
  EgressProxy(host::UniqueFd listener, host::UniqueFd upstream_netns,
              std::shared_ptr<GatewayShared> shared);
  ~EgressProxy();  // stops accepting, ends open connections, joins
  EgressProxy(const EgressProxy&) = delete;
  EgressProxy& operator=(const EgressProxy&) = delete;

 private:
  void AcceptLoop();

  host::UniqueFd listener_, upstream_netns_;
  std::shared_ptr<GatewayShared> shared_;
  std::thread accept_thread_;
};

}  // namespace sbx::net
