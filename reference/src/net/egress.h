// Egress (EGR-1..EGR-5, RES-7, SNAP-5): per-sandbox network namespaces joined to a gateway
// namespace that has no link to the root namespace; allow-listed DNS; an HTTP/TLS proxy that
// forwards only allowed host:port pairs, connecting upstream from the runtime's own namespace.
// See docs/network-policy.md.
//
// Thread-safety: EgressService is thread-safe. An Attachment is owned by one sandbox.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sbx/model.h"
#include "sbx/status.h"

namespace sbx::net {

// One logged gateway decision (so a report can show the allowed download went through it).
struct GatewayDecision {
  double unix_time = 0;
  std::string sandbox_id;
  std::string protocol;     // "dns" | "http" | "tls" | "tcp"
  std::string destination;  // name or "ip:port"
  std::string rule;         // matching rule ("http pkg-mirror...:80") or "" when none
  std::string verdict;      // "allow" | "deny" | "nxdomain" | "answer"
};

// A sandbox's network: a ready network namespace (fd) wired to the gateway.
// The destructor returns it to the pool or deletes it (never leaks veths or namespaces).
class Attachment {
 public:
  virtual ~Attachment() = default;
  virtual int netns_fd() const = 0;              // setns(fd, CLONE_NEWNET) in the child
  virtual std::string sandbox_address() const = 0;
  virtual std::string resolver_address() const = 0;  // goes into the sandbox's /etc/resolv.conf
};

struct EgressOptions {
  std::string runtime_id;   // names kernel objects so the reaper can find them
  int pool_floor = 4;       // ready namespaces kept in the pool
};

class EgressService {
 public:
  virtual ~EgressService() = default;
  static StatusOr<std::unique_ptr<EgressService>> Start(const EgressOptions& options);

  // A network for `sandbox_id` that follows `policy`, resolving allowed names through `hosts`
  // (service directory: name → "addr:port") and else the host resolver.
  virtual StatusOr<std::unique_ptr<Attachment>> Attach(
      const std::string& sandbox_id, const EgressPolicy& policy,
      const std::map<std::string, std::string>& hosts) = 0;

  // Decisions logged for a sandbox since it was attached (oldest first).
  virtual std::vector<GatewayDecision> Decisions(const std::string& sandbox_id) const = 0;
};

}  // namespace sbx::net
