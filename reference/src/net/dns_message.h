// The gateway's DNS answers (EGR-2, EGR-5, SCN-2, SCN-4), parsed and built with ldns: an allowed
// name's A query gets one A record of the gateway's synthetic address; an allowed name's other
// types (AAAA included) get NOERROR with no answer; every other name gets NXDOMAIN; anything
// that is not a well-formed single-question query is dropped without an answer.
//
// Fuzzed by fuzz/dns_message_fuzz.cc. Thread-safety: functions only; no shared state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace sbx::net {

enum class DnsVerdict { kDrop, kAnswer, kNoData, kNxDomain };

const char* DnsVerdictName(DnsVerdict v);  // "drop" | "answer" | "nodata" | "nxdomain"

struct DnsOutcome {
  DnsVerdict verdict = DnsVerdict::kDrop;
  std::string name;  // queried name, lower case, without the trailing dot
  uint16_t qtype = 0;
  std::vector<uint8_t> reply;  // wire format; empty when dropped
};

inline constexpr uint32_t kDnsAnswerTtl = 30;

// `query`: one DNS message (without the TCP length prefix). `allowed(name)` decides a name
// (lower case, no trailing dot). `answer_ipv4` is the A record's address in network byte order.
// Over UDP a reply larger than 512 bytes is truncated (TC set, no answer).
DnsOutcome AnswerDnsQuery(std::string_view query,
                          const std::function<bool(std::string_view)>& allowed,
                          uint32_t answer_ipv4, bool over_tcp);

}  // namespace sbx::net
