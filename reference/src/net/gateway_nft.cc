#include "net/gateway_nft.h"

#include <fmt/format.h>
#include <nftables/libnftables.h>

#include <memory>

namespace sbx::net {
namespace {

struct CtxDeleter {
  void operator()(nft_ctx* c) const { nft_ctx_free(c); }
};

StatusOr<std::string> RunNft(const std::string& commands) {
  std::unique_ptr<nft_ctx, CtxDeleter> ctx(nft_ctx_new(NFT_CTX_DEFAULT));
  if (!ctx) return Internal("nft_ctx_new failed");
  nft_ctx_buffer_output(ctx.get());
  nft_ctx_buffer_error(ctx.get());
  if (nft_run_cmd_from_buffer(ctx.get(), commands.c_str()) != 0) {
    const char* err = nft_ctx_get_error_buffer(ctx.get());
    return Internal(fmt::format("nftables: {}", err ? err : "unknown error"));
  }
  const char* out = nft_ctx_get_output_buffer(ctx.get());
  return std::string(out ? out : "");
}

}  // namespace

std::string GatewayRuleset(const GatewayRulesConfig& c) {
  const std::string sbx = c.interface_prefix + "*";
  // Priorities: the filter runs at -200, before DNAT (-100), so it sees original destinations.
  return fmt::format(R"(table inet {table} {{
  chain sandbox_filter {{
    type filter hook prerouting priority -200; policy accept;
    iifname != "{sbx}" accept
    # SECURITY: a sandbox may only speak with its own address (no stealing another's policy).
    fib saddr . iif oif missing drop
    meta nfproto ipv6 reject with icmpx admin-prohibited
    ip daddr {gw} udp dport {dns} accept
    ip daddr {gw} tcp dport {dns} accept
    meta l4proto tcp accept
    reject with icmpx admin-prohibited
  }}
  chain sandbox_nat {{
    type nat hook prerouting priority dstnat; policy accept;
    iifname != "{sbx}" accept
    ip daddr {gw} tcp dport {dns} accept
    meta nfproto ipv4 meta l4proto tcp dnat ip to {gw}:{proxy}
  }}
  chain sandbox_input {{
    type filter hook input priority filter; policy accept;
    iifname != "{sbx}" accept
    ip daddr {gw} udp dport {dns} accept
    ip daddr {gw} tcp dport {{ {dns}, {proxy} }} accept
    reject with icmpx admin-prohibited
  }}
  chain no_forwarding {{
    type filter hook forward priority filter; policy drop;
  }}
}}
)",
                     fmt::arg("table", kGatewayTable), fmt::arg("sbx", sbx),
                     fmt::arg("gw", c.gateway_address), fmt::arg("dns", c.dns_port),
                     fmt::arg("proxy", c.proxy_port));
}

Status LoadGatewayRuleset(const GatewayRulesConfig& config) {
  auto r = RunNft(GatewayRuleset(config));
  if (!r.ok()) return r.status().WithContext("loading the gateway ruleset");
  return Status::Ok();
}

StatusOr<std::string> ListNftTables() { return RunNft("list tables"); }

}  // namespace sbx::net
