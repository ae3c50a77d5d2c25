// libFuzzer target: the gateway's DNS query handling (EGR-2) — ldns parsing of untrusted
// queries and the reply built from them. Invariants: a reply exists exactly when the verdict is
// not "drop", fits 512 bytes over UDP, and is itself a well-formed DNS response with the same id.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "net/dns_message.h"
#include "net/ldns_include.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sbx::net;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto allowed = [](std::string_view n) {
    return n == "pkg-mirror.demo-tools.svc.cluster.local" || n.size() == 7;
  };
  for (bool tcp : {false, true}) {
    DnsOutcome o = AnswerDnsQuery(in, allowed, 0x0100c80a, tcp);
    if ((o.verdict == DnsVerdict::kDrop) != o.reply.empty()) std::abort();
    if (o.reply.empty()) continue;
    if (!tcp && o.reply.size() > 512) std::abort();
    ldns_pkt* p = nullptr;
    if (ldns_wire2pkt(&p, o.reply.data(), o.reply.size()) != LDNS_STATUS_OK) std::abort();
    if (!ldns_pkt_qr(p) || ldns_pkt_id(p) != ((data[0] << 8) | data[1])) std::abort();
    if (o.verdict == DnsVerdict::kNxDomain && ldns_pkt_get_rcode(p) != LDNS_RCODE_NXDOMAIN)
      std::abort();
    ldns_pkt_free(p);
  }
  return 0;
}
