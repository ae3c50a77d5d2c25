// The syntax of a sandboxd bearer token (PROD-1), shared by the server (api/auth.h, which keeps
// tokens as digests) and the client (remote_runtime.h, which refuses a malformed one before it
// is sent), and the zeroing of a token held in memory. Nothing here hashes or compares tokens.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "sbx/status.h"

namespace sbx::wire {

inline constexpr size_t kMinTokenLength = 16;
inline constexpr size_t kMaxTokenLength = 512;

// A token: kMinTokenLength..kMaxTokenLength characters of RFC 6750 token68
// ([A-Za-z0-9-._~+/], then '=' padding only at the end). The message never echoes the token.
Status ValidateToken(std::string_view token);

// Overwrites a string's bytes with zeros (not optimised away) and clears it.
void ZeroString(std::string* s);

}  // namespace sbx::wire
