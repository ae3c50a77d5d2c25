// The proxy's verdicts (EGR-1, EGR-3, EGR-4), as pure functions of what the sandbox sent, the
// destination it connected to (before the gateway's DNAT) and its policy.
//
// A request is forwarded only when the sandbox connected to the address the gateway's DNS gave
// it (so it asked for the name through the policy), to a port of a rule for that name, and
// the name is in the request itself (Host, or SNI) exactly. Everything else is refused the same
// way whatever the address: the command cannot learn whether an address exists.
#pragma once

#include <cstdint>
#include <string>

#include "net/http_head.h"
#include "net/policy_index.h"
#include "net/tls_sni.h"

namespace sbx::net {

struct Verdict {
  bool allow = false;
  std::string destination;  // "host:port" when a name was given, else "ip:port"
  std::string rule;         // matching rule text when allowed
  std::string reason;       // why refused ("" when allowed)
  std::string host;         // the allowed name (for the upstream lookup)
  int port = 0;
};

// `policy` may be null (no sandbox attached at that address): everything is refused.
Verdict DecideHttp(const HttpRequestHead& head, uint32_t dst_addr, int dst_port,
                   uint32_t gateway_addr, const PolicyIndex* policy);
Verdict DecideTls(SniStatus status, const ClientHelloInfo& hello, uint32_t dst_addr, int dst_port,
                  uint32_t gateway_addr, const PolicyIndex* policy);

// The exact bytes of the gateway's refusal of an HTTP request (SCN-3): identical for every
// reason and every destination.
const std::string& ForbiddenResponse();
// For an allowed name whose upstream cannot be reached.
const std::string& BadGatewayResponse();

}  // namespace sbx::net
