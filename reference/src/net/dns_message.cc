#include "net/dns_message.h"

#include <cstdlib>
#include <memory>

#include "net/host_name.h"
#include "net/ldns_include.h"
#include "sbx/ascii.h"

namespace sbx::net {
namespace {

struct PktDeleter {
  void operator()(ldns_pkt* p) const { ldns_pkt_free(p); }
};
using PktPtr = std::unique_ptr<ldns_pkt, PktDeleter>;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

constexpr size_t kMaxUdpReply = 512;

// The reply skeleton: same id, question and RD bit; QR and AA set; no recursion offered.
PktPtr ReplyFor(const ldns_pkt* q, const ldns_rr* question, ldns_pkt_rcode rcode) {
  PktPtr r(ldns_pkt_new());
  if (!r) return r;
  ldns_pkt_set_id(r.get(), ldns_pkt_id(q));
  ldns_pkt_set_qr(r.get(), true);
  ldns_pkt_set_aa(r.get(), true);
  ldns_pkt_set_rd(r.get(), ldns_pkt_rd(q));
  ldns_pkt_set_ra(r.get(), false);
  ldns_pkt_set_opcode(r.get(), LDNS_PACKET_QUERY);
  ldns_pkt_set_rcode(r.get(), static_cast<uint8_t>(rcode));
  ldns_rr* qcopy = ldns_rr_clone(question);
  if (!qcopy || !ldns_pkt_push_rr(r.get(), LDNS_SECTION_QUESTION, qcopy)) {
    if (qcopy) ldns_rr_free(qcopy);
    return PktPtr();
  }
  return r;
}

bool ToWire(const ldns_pkt* p, std::vector<uint8_t>* out) {
  uint8_t* wire = nullptr;
  size_t size = 0;
  if (ldns_pkt2wire(&wire, p, &size) != LDNS_STATUS_OK || !wire) return false;
  std::unique_ptr<uint8_t, FreeDeleter> owned(wire);
  out->assign(wire, wire + size);
  return true;
}

}  // namespace

const char* DnsVerdictName(DnsVerdict v) {
  switch (v) {
    case DnsVerdict::kDrop:
      return "drop";
    case DnsVerdict::kAnswer:
      return "answer";
    case DnsVerdict::kNoData:
      return "nodata";
    case DnsVerdict::kNxDomain:
      return "nxdomain";
  }
  return "drop";
}

DnsOutcome AnswerDnsQuery(std::string_view query,
                          const std::function<bool(std::string_view)>& allowed,
                          uint32_t answer_ipv4, bool over_tcp) {
  DnsOutcome out;
  // A header is 12 bytes; anything shorter cannot be answered (we would not know the id).
  if (query.size() < 12 || query.size() > 65535) return out;
  // One question, no answer or authority records, at most one additional (an EDNS OPT): what a
  // resolver asks. Anything else is dropped before ldns parses it: ldns_wire2pkt keeps only the
  // last TSIG record of the additional section and leaks the ones before it (found by
  // dns_message_fuzz), so hostile bytes from a sandbox must never reach it with several.
  auto count = [&](size_t at) {
    return static_cast<unsigned>(static_cast<uint8_t>(query[at])) << 8 |
           static_cast<uint8_t>(query[at + 1]);
  };
  if (count(4) != 1 || count(6) != 0 || count(8) != 0 || count(10) > 1) return out;
  ldns_pkt* raw = nullptr;
  if (ldns_wire2pkt(&raw, reinterpret_cast<const uint8_t*>(query.data()), query.size()) !=
          LDNS_STATUS_OK ||
      !raw) {
    if (raw) ldns_pkt_free(raw);
    return out;  // malformed: dropped
  }
  PktPtr q(raw);
  // Only standard queries with exactly one question; responses and other opcodes are dropped.
  if (ldns_pkt_qr(q.get()) || ldns_pkt_get_opcode(q.get()) != LDNS_PACKET_QUERY ||
      ldns_pkt_qdcount(q.get()) != 1 || ldns_pkt_ancount(q.get()) != 0) {
    return out;
  }
  const ldns_rr* question = ldns_rr_list_rr(ldns_pkt_question(q.get()), 0);
  if (!question || !ldns_rr_owner(question)) return out;

  std::unique_ptr<char, FreeDeleter> text(ldns_rdf2str(ldns_rr_owner(question)));
  if (!text) return out;
  std::string name = AsciiLower(text.get());
  if (!name.empty() && name.back() == '.') name.pop_back();
  out.name = name;
  out.qtype = static_cast<uint16_t>(ldns_rr_get_type(question));

  // ldns escapes odd bytes ("\032"), so such a name can never equal an allowed host name.
  bool ok = ldns_rr_get_class(question) == LDNS_RR_CLASS_IN && ValidHostName(name) && allowed(name);
  PktPtr reply;
  if (!ok) {
    out.verdict = DnsVerdict::kNxDomain;
    reply = ReplyFor(q.get(), question, LDNS_RCODE_NXDOMAIN);
  } else if (ldns_rr_get_type(question) == LDNS_RR_TYPE_A) {
    out.verdict = DnsVerdict::kAnswer;
    reply = ReplyFor(q.get(), question, LDNS_RCODE_NOERROR);
    if (reply) {
      ldns_rr* a = ldns_rr_new();
      ldns_rdf* owner = ldns_rdf_clone(ldns_rr_owner(question));
      ldns_rdf* addr = ldns_rdf_new_frm_data(LDNS_RDF_TYPE_A, 4, &answer_ipv4);
      if (!a || !owner || !addr) {
        if (a) ldns_rr_free(a);
        if (owner) ldns_rdf_deep_free(owner);
        if (addr) ldns_rdf_deep_free(addr);
        reply.reset();
      } else {
        ldns_rr_set_owner(a, owner);
        ldns_rr_set_type(a, LDNS_RR_TYPE_A);
        ldns_rr_set_class(a, LDNS_RR_CLASS_IN);
        ldns_rr_set_ttl(a, kDnsAnswerTtl);
        ldns_rr_push_rdf(a, addr);
        if (!ldns_pkt_push_rr(reply.get(), LDNS_SECTION_ANSWER, a)) {
          ldns_rr_free(a);
          reply.reset();
        }
      }
    }
  } else {
    // AAAA (and any other type) of an allowed name: the name exists, with no such record.
    // IPv6 is off in the sandbox, so an empty AAAA keeps clients on IPv4 without delay.
    out.verdict = DnsVerdict::kNoData;
    reply = ReplyFor(q.get(), question, LDNS_RCODE_NOERROR);
  }
  if (!reply || !ToWire(reply.get(), &out.reply)) {
    out = DnsOutcome{};
    return out;
  }
  if (!over_tcp && out.reply.size() > kMaxUdpReply) {
    // Truncated: the client retries over TCP, which the gateway also serves.
    PktPtr tc =
        ReplyFor(q.get(), question,
                 out.verdict == DnsVerdict::kNxDomain ? LDNS_RCODE_NXDOMAIN : LDNS_RCODE_NOERROR);
    if (!tc) return DnsOutcome{};
    ldns_pkt_set_tc(tc.get(), true);
    std::vector<uint8_t> wire;
    if (!ToWire(tc.get(), &wire) || wire.size() > kMaxUdpReply) return DnsOutcome{};
    out.reply = std::move(wire);
  }
  return out;
}

}  // namespace sbx::net
