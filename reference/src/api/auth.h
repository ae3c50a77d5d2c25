// Bearer-token authentication of sandboxd's callers (PROD-1).
//
// Tokens are kept only as SHA-256 digests; the plain tokens handed to Create() are zeroed.
// Authenticate() hashes the presented token and compares it with EVERY tenant's digest in
// constant time (no early exit, no length-dependent branch), so neither the time nor the
// answer tells how close a guess was or which tenant it matched.
//
// Thread-safety: immutable after Create(); Authenticate() may be called concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sbx/status.h"
#include "wire/token.h"

namespace sbx::api {

struct TenantCredential {
  std::string tenant;
  std::string token;  // zeroed by Authenticator::Create
};

// A tenant name: 1..64 of [a-z0-9_-], starting with a letter or digit (it is recorded on the
// sandbox and keys warm pools, POOL-4).
Status ValidateTenantName(std::string_view name);
// wire::ValidateToken (the token's syntax): client/token.h.

class Authenticator {
 public:
  enum class Result { kOk, kMissing, kInvalid };

  // kInvalidArgument for a bad name or token, a duplicate tenant, or a token shared by two
  // tenants (it would make the tenant ambiguous).
  static StatusOr<Authenticator> Create(std::vector<TenantCredential> credentials);

  // `authorization` is the Authorization field value or nullptr. "Bearer" is matched without
  // regard to case; exactly one space-separated token must follow.
  Result Authenticate(const std::string* authorization, std::string* tenant) const;

  std::vector<std::string> tenants() const;

 private:
  using Digest = std::array<uint8_t, 32>;
  struct Entry {
    std::string tenant;
    Digest digest;
  };
  std::vector<Entry> entries_;
};

}  // namespace sbx::api
