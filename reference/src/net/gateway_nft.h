// The gateway namespace's packet filter (EGR-1, EGR-3, SNAP-5), loaded once per EgressService
// through libnftables (no `nft` process), matching sandbox-facing interfaces by name prefix so
// that adding a sandbox never touches the ruleset.
//
// From a sandbox interface:
//   - a source address that does not route back out of the same interface: dropped (spoofing)
//   - IPv6 (of any kind): rejected at once
//   - UDP or TCP to the resolver (gateway address, port 53): accepted, to the DNS responder
//   - any other TCP: DNAT to the proxy (which decides: forward, 403 or reset)
//   - everything else (UDP, ICMP, raw IP protocols, other sandboxes): rejected at once with
//     ICMP administratively prohibited
//   - forwarding: dropped (and ip_forward is 0): nothing is ever routed through the gateway
#pragma once

#include <string>

#include "sbx/status.h"

namespace sbx::net {

struct GatewayRulesConfig {
  std::string interface_prefix;  // "sbx": sandbox-facing veths are "sbx<hex>"
  std::string gateway_address;   // "10.200.0.1"
  int proxy_port = 0;
  int dns_port = 53;
};

inline constexpr char kGatewayTable[] = "sandcheck_gateway";

// The ruleset text (for the docs and a unit test).
std::string GatewayRuleset(const GatewayRulesConfig& config);

// Loads the ruleset into the CALLING THREAD's network namespace (which must be the gateway's).
Status LoadGatewayRuleset(const GatewayRulesConfig& config);

// Tables in the CALLING THREAD's namespace, as "family name" lines (for leak checks).
StatusOr<std::string> ListNftTables();

}  // namespace sbx::net
