#include "net/policy_index.h"
#include "sbx/ascii.h"

#include <fmt/format.h>

#include <charconv>

namespace sbx::net {

StatusOr<Upstream> ParseHostPort(std::string_view text) {
  Upstream u;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return InvalidArgument(fmt::format("'{}': expected [ADDR]:PORT", text));
    }
    u.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
      return InvalidArgument(fmt::format("'{}': expected ADDR:PORT", text));
    }
    u.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  }
  int port = 0;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port < 1 || port > 65535) {
    return InvalidArgument(fmt::format("'{}': bad port", text));
  }
  u.port = port;
  return u;
}

Status ValidatePolicy(const EgressPolicy& policy, const std::map<std::string, std::string>& hosts) {
  for (const EgressRule& r : policy.rules) {
    if (r.kind != "http" && r.kind != "tls") {
      return InvalidArgument(fmt::format("egress rule kind '{}' is not http or tls", r.kind));
    }
    if (r.hosts.empty() || r.ports.empty()) {
      return InvalidArgument("egress rule: needs at least one host and one port");
    }
    for (const std::string& h : r.hosts) {
      // SECURITY: rules name hosts, never addresses (EGR-1, EGR-3); a rule host that were an IP
      // literal would let "connect to that address" through the name-based path.
      if (h != AsciiLower(h) || !ValidHostName(h)) {
        return InvalidArgument(
            fmt::format("egress rule host '{}' is not a lower-case full host name", h));
      }
    }
    for (int p : r.ports) {
      if (p < 1 || p > 65535)
        return InvalidArgument(fmt::format("egress rule port {} out of range", p));
    }
  }
  for (const auto& [name, where] : hosts) {
    if (!ValidHostName(AsciiLower(name))) {
      return InvalidArgument(fmt::format("service directory name '{}' is not a host name", name));
    }
    ASSIGN_OR_RETURN(Upstream u, ParseHostPort(where));
    if (u.host.empty())
      return InvalidArgument(fmt::format("service directory '{}': empty address", name));
  }
  return Status::Ok();
}

PolicyIndex::PolicyIndex(const EgressPolicy& policy,
                         const std::map<std::string, std::string>& hosts) {
  for (const EgressRule& r : policy.rules) {
    for (const std::string& h : r.hosts) {
      std::string host = AsciiLower(h);
      names_.insert(host);
      for (int p : r.ports) {
        rules_.emplace(std::make_tuple(r.kind, host, p), fmt::format("{} {}:{}", r.kind, host, p));
      }
    }
  }
  for (const auto& [name, where] : hosts) {
    auto u = ParseHostPort(where);
    if (u.ok()) directory_[AsciiLower(name)] = *u;
  }
}

bool PolicyIndex::NameAllowed(std::string_view name) const {
  return names_.count(AsciiLower(name)) > 0;
}

std::optional<std::string> PolicyIndex::Match(std::string_view kind, std::string_view host,
                                              int port) const {
  auto it = rules_.find(std::make_tuple(std::string(kind), AsciiLower(host), port));
  if (it == rules_.end()) return std::nullopt;
  return it->second;
}

Upstream PolicyIndex::UpstreamFor(std::string_view host, int port) const {
  std::string h = AsciiLower(host);
  auto it = directory_.find(h);
  if (it != directory_.end()) return it->second;
  return Upstream{h, port};
}

}  // namespace sbx::net
