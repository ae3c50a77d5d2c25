#include "net/gateway_decide.h"

#include <fmt/format.h>

#include "net/sock_util.h"
#include "sbx/ascii.h"

namespace sbx::net {
namespace {

std::string Response(std::string_view status_line, std::string_view gateway_value,
                     std::string_view body) {
  return fmt::format(
      "{}\r\nServer: sandcheck-gateway\r\nX-Sandcheck-Gateway: {}\r\n"
      "Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: "
      "close\r\n\r\n{}",
      status_line, gateway_value, body.size(), body);
}

Verdict Deny(std::string destination, std::string reason) {
  Verdict v;
  v.destination = std::move(destination);
  v.reason = std::move(reason);
  return v;
}

}  // namespace

const std::string& ForbiddenResponse() {
  static const std::string kResponse =
      Response("HTTP/1.1 403 Forbidden", "denied",
               "Forbidden by the sandbox's egress policy (sandcheck gateway).\n");
  return kResponse;
}

const std::string& BadGatewayResponse() {
  static const std::string kResponse =
      Response("HTTP/1.1 502 Bad Gateway", "upstream-unreachable",
               "The allowed upstream could not be reached (sandcheck gateway).\n");
  return kResponse;
}

Verdict DecideHttp(const HttpRequestHead& head, uint32_t dst_addr, int dst_port,
                   uint32_t gateway_addr, const PolicyIndex* policy) {
  std::string literal = fmt::format("{}:{}", Ipv4String(dst_addr), dst_port);
  std::string dest = head.host.empty() ? literal : fmt::format("{}:{}", head.host, dst_port);
  // SECURITY: each of these would let a request reach something other than the name it
  // claims, or let the claimed name differ from what the upstream server acts on.
  if (head.method == "CONNECT") return Deny(dest, "CONNECT is not forwarded");
  if (!head.origin_form()) return Deny(dest, "request target is not origin-form (absolute URI)");
  if (head.has_transfer_encoding) return Deny(dest, "Transfer-Encoding is not forwarded");
  if (head.host_fields != 1) return Deny(literal, "no Host field");
  if (head.host_is_ip_literal) return Deny(dest, "IP literal host");
  if (dst_addr != gateway_addr)
    return Deny(literal, "destination address was not resolved by the gateway");
  if (head.host_port != 0 && head.host_port != dst_port) {
    return Deny(dest, "Host port differs from the connection's port");
  }
  if (!policy) return Deny(dest, "no policy attached");
  auto rule = policy->Match("http", head.host, dst_port);
  if (!rule) return Deny(dest, "no rule for host:port");
  Verdict v;
  v.allow = true;
  v.destination = dest;
  v.rule = *rule;
  v.host = head.host;
  v.port = dst_port;
  return v;
}

Verdict DecideTls(SniStatus status, const ClientHelloInfo& hello, uint32_t dst_addr, int dst_port,
                  uint32_t gateway_addr, const PolicyIndex* policy) {
  std::string literal = fmt::format("{}:{}", Ipv4String(dst_addr), dst_port);
  if (status != SniStatus::kComplete) return Deny(literal, "not a TLS ClientHello");
  if (!hello.has_sni) return Deny(literal, "ClientHello without SNI");
  std::string sni = AsciiLower(hello.sni);
  std::string dest = ValidHostName(sni) ? fmt::format("{}:{}", sni, dst_port) : literal;
  // SECURITY: with ECH the outer SNI is not the name the server acts on.
  if (hello.has_ech) return Deny(dest, "encrypted ClientHello (ECH)");
  if (!ValidHostName(sni)) return Deny(literal, "SNI is not a host name");
  if (dst_addr != gateway_addr)
    return Deny(literal, "destination address was not resolved by the gateway");
  if (!policy) return Deny(dest, "no policy attached");
  auto rule = policy->Match("tls", sni, dst_port);
  if (!rule) return Deny(dest, "no rule for host:port");
  Verdict v;
  v.allow = true;
  v.destination = dest;
  v.rule = *rule;
  v.host = sni;
  v.port = dst_port;
  return v;
}

}  // namespace sbx::net
