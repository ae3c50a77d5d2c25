// The egress policy of one sandbox as lookups (EGR-1, EGR-2, EGR-4, EGR-5, SNAP-5): which names
// resolve, which (kind, host, port) triples the gateway forwards, and where an allowed name
// really lives (the service directory). Pure: no kernel objects.
//
// Matching is exact and case-insensitive on full host names: no wildcards, no suffix matching,
// so a subdomain of an allowed name is a different, denied name.
//
// Thread-safety: immutable after construction; safe to share between threads.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

#include "net/host_name.h"
#include "sbx/model.h"
#include "sbx/status.h"

namespace sbx::net {

// Checks a policy and a service directory: rule kinds http/tls, valid host names (lower case,
// no IP literals), ports 1..65535, directory entries "name" → "addr:port" with a valid port.
Status ValidatePolicy(const EgressPolicy& policy, const std::map<std::string, std::string>& hosts);

// Where an allowed name is connected to upstream.
struct Upstream {
  std::string host;  // an address literal or a name for the host resolver
  int port = 0;
};

class PolicyIndex {
 public:
  PolicyIndex() = default;  // the empty policy: nothing resolves, nothing is forwarded
  // `policy` and `hosts` must have passed ValidatePolicy.
  PolicyIndex(const EgressPolicy& policy, const std::map<std::string, std::string>& hosts);

  // EGR-2: does `name` (any case, no trailing dot) resolve?
  bool NameAllowed(std::string_view name) const;
  // EGR-1/EGR-4: the text of the matching rule ("http pkg-mirror.example:80"), or nullopt.
  // `kind` is "http" or "tls"; `host` any case.
  std::optional<std::string> Match(std::string_view kind, std::string_view host, int port) const;
  // Where to connect for an allowed (host, port): the directory entry if the name has one
  // (it replaces address and port), else the name itself for the host resolver.
  Upstream UpstreamFor(std::string_view host, int port) const;

  bool empty() const { return rules_.empty(); }

 private:
  std::set<std::string> names_;
  std::map<std::tuple<std::string, std::string, int>, std::string> rules_;  // (kind, host, port)
  std::map<std::string, Upstream> directory_;
};

// "addr:port" / "[v6]:port" / "name:port" → Upstream. kInvalidArgument when malformed.
StatusOr<Upstream> ParseHostPort(std::string_view text);

}  // namespace sbx::net
