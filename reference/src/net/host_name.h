// Host names and IP literals as the gateway compares them (EGR-1, EGR-3). Pure; no dependency
// beyond the standard library (and header-only sbx/ascii.h, whose AsciiLower folds host names),
// so the parsers that use it build alone for fuzzing.
#pragma once

#include <string>
#include <string_view>

namespace sbx::net {

// RFC 1123 host name of at most 253 characters, labels of 1..63 [a-z0-9-] not starting or
// ending with '-', lower case. IP literals (see below) are not host names.
bool ValidHostName(std::string_view host);

// True for anything an HTTP client could mean as an address rather than a name: dotted or
// undotted IPv4 forms (all parts numeric, decimal/octal/0x-hex, trailing dot allowed),
// bracketed or bare IPv6 (anything with ':').
bool LooksLikeIpLiteral(std::string_view host);

}  // namespace sbx::net
