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
  std::string protocol;     // "dns" | "dns-tcp" | "http" | "tls" | "tcp"
  std::string destination;  // "name TYPE" (dns), "name:port", or "ip:port"
  std::string rule;         // matching rule ("http pkg-mirror...:80") or "" when none
  std::string verdict;      // "allow" | "deny" | "answer" | "nodata" | "nxdomain" | "drop"
  std::string reason;       // why, for a denial ("ip literal", "no rule", "CONNECT", ...)
};

// Addressing (docs/network-policy.md). The resolver address is what the sandbox image's
// /etc/resolv.conf names (fixtures/rootfs/build-rootfs.sh).
inline constexpr char kGatewayAddress[] = "10.200.0.1";  // resolver, proxy, and every allowed name
inline constexpr char kSandboxNetwork[] = "10.201.0.0/16";  // one /32 per sandbox

// A sandbox's network: a ready network namespace (fd) wired to the gateway.
// The destructor discards it: the sandbox's policy is forgotten at once (its address then gets
// no answer and no forwarding) and the namespace fd is closed; the kernel deletes the namespace
// and its veth pair once the sandbox's last process is gone. A namespace is never reused for
// another sandbox. An Attachment may outlive its EgressService (it then has no gateway).
class Attachment {
 public:
  virtual ~Attachment() = default;
  virtual int netns_fd() const = 0;  // setns(fd, CLONE_NEWNET) in the child
  virtual std::string sandbox_address() const = 0;
  virtual std::string resolver_address() const = 0;  // goes into the sandbox's /etc/resolv.conf
  virtual std::string sandbox_id() const = 0;
};

// Counters for tests and reports (leak checks compare them before and after).
struct EgressStats {
  int pool_ready = 0;          // namespaces ready in the pool
  int attached = 0;            // attachments alive
  int gateway_links = 0;       // sandbox-facing veths in the gateway (pool + attached + dying)
  int64_t created = 0;         // sandbox namespaces created since Start
  int active_connections = 0;  // proxy and DNS-over-TCP connections open now
};

struct EgressOptions {
  // For logs only: the namespaces are held by fds, so nothing is named where a reaper would
  // have to find it after a crash (docs/network-policy.md).
  std::string runtime_id;
  int pool_floor = 4;  // ready namespaces kept in the pool; 0 = create on Attach
};

class EgressService {
 public:
  virtual ~EgressService() = default;
  // Creates the gateway namespace, loads its ruleset, starts the DNS responder, the proxy and
  // the pool. kPermissionDenied without CAP_NET_ADMIN/CAP_SYS_ADMIN. The destructor stops every
  // thread and closes every fd it owns (so the kernel frees the gateway namespace).
  static StatusOr<std::unique_ptr<EgressService>> Start(const EgressOptions& options);

  // A network for `sandbox_id` that follows `policy`, resolving allowed names through `hosts`
  // (service directory: name → "addr:port", which replaces address and port of every allowed
  // connection to that name) and else the host resolver. kInvalidArgument for a bad policy or
  // directory, kAlreadyExists if `sandbox_id` is attached already. An empty policy gives a
  // network where nothing resolves and nothing is forwarded (SNAP-5).
  virtual StatusOr<std::unique_ptr<Attachment>> Attach(
      const std::string& sandbox_id, const EgressPolicy& policy,
      const std::map<std::string, std::string>& hosts) = 0;

  // Decisions logged for a sandbox since it was attached (oldest first).
  // Kept after the Attachment is released (for the last 1024 released sandboxes).
  virtual std::vector<GatewayDecision> Decisions(const std::string& sandbox_id) const = 0;

  virtual StatusOr<EgressStats> Stats() const = 0;
};

}  // namespace sbx::net
