#include "net/host_name.h"

#include <cctype>

namespace sbx::net {

bool ValidHostName(std::string_view h) {
  if (h.empty() || h.size() > 253) return false;
  if (LooksLikeIpLiteral(h)) return false;
  size_t label = 0;
  for (size_t i = 0; i < h.size(); ++i) {
    char c = h[i];
    if (c == '.') {
      if (label == 0 || h[i - 1] == '-') return false;
      label = 0;
      continue;
    }
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    if (!ok) return false;
    if (c == '-' && label == 0) return false;
    if (++label > 63) return false;
  }
  return label > 0 && h.back() != '-';
}

bool LooksLikeIpLiteral(std::string_view h) {
  if (h.empty()) return false;
  if (h.front() == '[' || h.find(':') != std::string_view::npos) return true;  // IPv6
  // IPv4 in any form inet_aton accepts: parts of decimal, octal (leading 0) or hex (0x).
  // A name's last label is never all-numeric, so "all parts numeric" is the test.
  size_t start = 0;
  while (start <= h.size()) {
    size_t dot = h.find('.', start);
    std::string_view part = h.substr(start, dot == std::string_view::npos ? h.npos : dot - start);
    if (part.empty()) {
      // A trailing dot ("1.2.3.4.") still reads as an address to many clients.
      if (dot == std::string_view::npos && start > 0) break;
      return false;
    }
    bool numeric = true;
    if (part.size() > 2 && part[0] == '0' && (part[1] == 'x' || part[1] == 'X')) {
      for (char c : part.substr(2)) numeric &= std::isxdigit(static_cast<unsigned char>(c)) != 0;
    } else {
      for (char c : part) numeric &= (c >= '0' && c <= '9');
    }
    if (!numeric) return false;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return true;
}

}  // namespace sbx::net
