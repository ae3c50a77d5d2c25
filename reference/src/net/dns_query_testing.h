// Test helper (header only, tests and fuzz seeds): DNS query messages built by hand, and the
// reply fields the tests look at, so tests do not depend on the code under test to make them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sbx::net::testing_dns {

inline std::string QueryLabels(uint16_t id, const std::vector<std::string>& labels, uint16_t qtype,
                               uint16_t qclass = 1) {
  std::string q;
  q += static_cast<char>(id >> 8);
  q += static_cast<char>(id & 0xff);
  q += std::string("\x01\x00", 2);                          // RD
  q += std::string("\x00\x01\x00\x00\x00\x00\x00\x00", 8);  // QD=1
  for (const std::string& l : labels) {
    q += static_cast<char>(l.size());
    q += l;
  }
  q += '\0';
  q += static_cast<char>(qtype >> 8);
  q += static_cast<char>(qtype & 0xff);
  q += static_cast<char>(qclass >> 8);
  q += static_cast<char>(qclass & 0xff);
  return q;
}

inline std::string Query(uint16_t id, std::string_view name, uint16_t qtype, uint16_t qclass = 1) {
  std::vector<std::string> labels;
  size_t start = 0;
  while (start < name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    labels.emplace_back(name.substr(start, dot - start));
    start = dot + 1;
  }
  return QueryLabels(id, labels, qtype, qclass);
}

// Header fields of a reply: rcode (low 4 bits of byte 3), ancount, TC bit; -1 if too short.
inline int Rcode(std::string_view reply) {
  return reply.size() < 12 ? -1 : static_cast<uint8_t>(reply[3]) & 0x0f;
}
inline int AnswerCount(std::string_view reply) {
  return reply.size() < 12 ? -1
                           : (static_cast<uint8_t>(reply[6]) << 8) | static_cast<uint8_t>(reply[7]);
}
// The address of the first answer if it is an A record at the very end (our replies' layout).
inline std::string LastA(std::string_view reply) {
  if (AnswerCount(reply) < 1 || reply.size() < 16) return "";
  std::string_view a = reply.substr(reply.size() - 4);
  return std::to_string(static_cast<uint8_t>(a[0])) + "." +
         std::to_string(static_cast<uint8_t>(a[1])) + "." +
         std::to_string(static_cast<uint8_t>(a[2])) + "." +
         std::to_string(static_cast<uint8_t>(a[3]));
}

}  // namespace sbx::net::testing_dns
