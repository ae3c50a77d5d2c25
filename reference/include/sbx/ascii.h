// ASCII case folding and token characters for protocol tokens (HTTP field names and tokens, auth schemes, host
// names): locale-free and byte-exact, so a non-ASCII byte is never folded. One copy for the
// HTTP server (api/), the HTTP client (http/) and the model's host names.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

namespace sbx {

inline char AsciiLower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

inline std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = AsciiLower(c);
  return out;
}

inline bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return AsciiLower(x) == AsciiLower(y);
         });
}

// RFC 9110 5.6.2 tchar: what a token (a method, a field name) may be made of.
inline bool IsHttpTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+':
    case '-': case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

// Whether a field named `name` (any case) is in `fields` (anything with a .name).
template <typename Fields>
bool HasFieldNamed(const Fields& fields, std::string_view name) {
  return std::any_of(fields.begin(), fields.end(),
                     [&](const auto& f) { return EqualsIgnoreCase(f.name, name); });
}

}  // namespace sbx
