// The gateway's DNS answers (EGR-2, EGR-5, SCN-2, SCN-4), checked by decoding the replies with
// ldns: allowed A → the synthetic address; allowed AAAA → NOERROR, no answer; anything else →
// NXDOMAIN; malformed → no reply at all.
#include "net/dns_message.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "net/dns_query_testing.h"
#include "net/ldns_include.h"

namespace sbx::net {
namespace {

using testing_dns::Query;

const uint32_t kGw = inet_addr("10.200.0.1");

bool Allowed(std::string_view n) { return n == "pkg-mirror.demo-tools.svc.cluster.local"; }

struct Decoded {
  int rcode = -1;
  bool qr = false, aa = false, tc = false;
  uint16_t id = 0;
  int answers = 0;
  std::string a;  // first A record
};

Decoded Decode(const std::vector<uint8_t>& wire) {
  Decoded d;
  ldns_pkt* p = nullptr;
  if (ldns_wire2pkt(&p, wire.data(), wire.size()) != LDNS_STATUS_OK) return d;
  d.rcode = ldns_pkt_get_rcode(p);
  d.qr = ldns_pkt_qr(p);
  d.aa = ldns_pkt_aa(p);
  d.tc = ldns_pkt_tc(p);
  d.id = ldns_pkt_id(p);
  d.answers = ldns_pkt_ancount(p);
  if (d.answers > 0) {
    ldns_rr* rr = ldns_rr_list_rr(ldns_pkt_answer(p), 0);
    if (ldns_rr_get_type(rr) == LDNS_RR_TYPE_A) {
      char* s = ldns_rdf2str(ldns_rr_rdf(rr, 0));
      d.a = s;
      free(s);
    }
  }
  ldns_pkt_free(p);
  return d;
}

TEST(DnsMessageTest, AllowedNameGetsTheGatewayAddress) {
  DnsOutcome o = AnswerDnsQuery(Query(0x1234, "pkg-mirror.demo-tools.svc.cluster.local", 1),
                                Allowed, kGw, false);
  ASSERT_EQ(o.verdict, DnsVerdict::kAnswer);
  EXPECT_EQ(o.name, "pkg-mirror.demo-tools.svc.cluster.local");
  Decoded d = Decode(o.reply);
  EXPECT_EQ(d.rcode, LDNS_RCODE_NOERROR);
  EXPECT_TRUE(d.qr);
  EXPECT_TRUE(d.aa);
  EXPECT_EQ(d.id, 0x1234);
  EXPECT_EQ(d.answers, 1);
  EXPECT_EQ(d.a, "10.200.0.1");
}

TEST(DnsMessageTest, MatchIsCaseInsensitiveAndIgnoresTheRootDot) {
  DnsOutcome o =
      AnswerDnsQuery(Query(1, "PKG-Mirror.Demo-Tools.SVC.cluster.local.", 1), Allowed, kGw, false);
  EXPECT_EQ(o.verdict, DnsVerdict::kAnswer);
}

TEST(DnsMessageTest, AllowedAaaaIsEmptyNoError) {
  DnsOutcome o =
      AnswerDnsQuery(Query(7, "pkg-mirror.demo-tools.svc.cluster.local", 28), Allowed, kGw, false);
  ASSERT_EQ(o.verdict, DnsVerdict::kNoData);
  Decoded d = Decode(o.reply);
  EXPECT_EQ(d.rcode, LDNS_RCODE_NOERROR);
  EXPECT_EQ(d.answers, 0);
}

TEST(DnsMessageTest, EverythingElseIsNxdomain) {
  const char* names[] = {"example.com", "kubernetes.default.svc.cluster.local",
                         "x.pkg-mirror.demo-tools.svc.cluster.local",  // a subdomain
                         "demo-tools.svc.cluster.local",               // a parent
                         "pkg-mirror.demo-tools.svc.cluster.local.evil.example"};
  for (const char* n : names) {
    for (uint16_t type : {1, 28, 16, 255}) {
      DnsOutcome o = AnswerDnsQuery(Query(9, n, type), Allowed, kGw, false);
      ASSERT_EQ(o.verdict, DnsVerdict::kNxDomain) << n << " " << type;
      Decoded d = Decode(o.reply);
      EXPECT_EQ(d.rcode, LDNS_RCODE_NXDOMAIN);
      EXPECT_EQ(d.answers, 0);
    }
  }
}

TEST(DnsMessageTest, OtherClassesAreNxdomain) {
  DnsOutcome o = AnswerDnsQuery(
      Query(9, "pkg-mirror.demo-tools.svc.cluster.local", 1, /*qclass=*/3), Allowed, kGw, false);
  EXPECT_EQ(o.verdict, DnsVerdict::kNxDomain);
}

TEST(DnsMessageTest, MalformedAndNonQueriesAreDropped) {
  std::string q = Query(1, "example.com", 1);
  EXPECT_EQ(AnswerDnsQuery("", Allowed, kGw, false).verdict, DnsVerdict::kDrop);
  EXPECT_EQ(AnswerDnsQuery(q.substr(0, 11), Allowed, kGw, false).verdict, DnsVerdict::kDrop);
  EXPECT_EQ(AnswerDnsQuery(q.substr(0, q.size() - 1), Allowed, kGw, false).verdict,
            DnsVerdict::kDrop);
  std::string response = q;
  response[2] = static_cast<char>(response[2] | 0x80);  // QR set
  EXPECT_EQ(AnswerDnsQuery(response, Allowed, kGw, false).verdict, DnsVerdict::kDrop);
  std::string notify = q;
  notify[2] = static_cast<char>((notify[2] & 0x87) | (4 << 3));  // opcode NOTIFY
  EXPECT_EQ(AnswerDnsQuery(notify, Allowed, kGw, false).verdict, DnsVerdict::kDrop);
  std::string two = q;
  two[5] = 2;  // qdcount 2 with one question present
  EXPECT_EQ(AnswerDnsQuery(two, Allowed, kGw, false).verdict, DnsVerdict::kDrop);
  // A compression pointer loop in the question name.
  std::string loop =
      std::string("\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x0c\x00\x01\x00\x01", 18);
  EXPECT_EQ(AnswerDnsQuery(loop, Allowed, kGw, false).verdict, DnsVerdict::kDrop);
  // An authority record, or more than one additional record: dropped before ldns parses them
  // (ldns_wire2pkt leaks every TSIG record but the last; fuzz/corpus's tsig_twice_leak).
  std::string authority = q;
  authority[9] = 1;
  EXPECT_EQ(AnswerDnsQuery(authority, Allowed, kGw, false).verdict, DnsVerdict::kDrop);
  const std::string tsig_twice(
      "\x00\x07\x01\x00\x00\x01\x00\x00\x00\x00\x40\x01\x00\x00\x01\x00\x00\x00\x00\xfa\x00\x0a\x70"
      "\x6b\x14\x00\x00\x00\x00\x00\xfa\x00\x0a\x70\x6b\x14\x00\x00\x00\x00\x00\x00\x00\x1c\x00"
      "\x01",
      46);
  EXPECT_EQ(AnswerDnsQuery(tsig_twice, Allowed, kGw, false).verdict, DnsVerdict::kDrop);
}

TEST(DnsMessageTest, OneEdnsRecordIsStillAnswered) {
  std::string q = Query(1, "pkg-mirror.demo-tools.svc.cluster.local", 1);
  q[11] = 1;  // arcount 1: an OPT record (root owner, type 41, UDP size 1232, no options)
  q += std::string("\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00", 11);
  EXPECT_EQ(AnswerDnsQuery(q, Allowed, kGw, false).verdict, DnsVerdict::kAnswer);
}

TEST(DnsMessageTest, EscapedBytesNeverMatch) {
  // "pkg-mirror\.demo-tools..." as one label with a dot inside must not equal the allowed name.
  std::string q =
      testing_dns::QueryLabels(3, {"pkg-mirror.demo-tools", "svc", "cluster", "local"}, 1);
  auto allowed = [](std::string_view n) { return n == "pkg-mirror.demo-tools.svc.cluster.local"; };
  EXPECT_EQ(AnswerDnsQuery(q, allowed, kGw, false).verdict, DnsVerdict::kNxDomain);
}

TEST(DnsMessageTest, TcpAndUdpGiveTheSameAnswer) {
  std::string q = Query(5, "pkg-mirror.demo-tools.svc.cluster.local", 1);
  EXPECT_EQ(AnswerDnsQuery(q, Allowed, kGw, true).reply,
            AnswerDnsQuery(q, Allowed, kGw, false).reply);
}

}  // namespace
}  // namespace sbx::net
