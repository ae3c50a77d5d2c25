#include "api/auth.h"

#include <fmt/format.h>
#include <string.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "host/sha256.h"
#include "sbx/ascii.h"

namespace sbx::api {
namespace {

std::array<uint8_t, 32> Hash(std::string_view token) {
  host::Sha256 h;
  h.Update(token);
  return h.Finish();
}

// Constant-time equality of two digests: every byte is looked at, whatever differs.
uint8_t DiffBits(const std::array<uint8_t, 32>& a, const std::array<uint8_t, 32>& b) {
  volatile uint8_t acc = 0;
  for (size_t i = 0; i < a.size(); ++i) acc = static_cast<uint8_t>(acc | (a[i] ^ b[i]));
  return acc;
}

}  // namespace

Status ValidateTenantName(std::string_view name) {
  if (name.empty() || name.size() > 64)
    return InvalidArgument("tenant name must be 1..64 characters");
  if (!std::isalnum(static_cast<unsigned char>(name[0]))) {
    return InvalidArgument(fmt::format("tenant '{}': must start with a letter or digit", name));
  }
  for (char c : name) {
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '_' || c == '-')) {
      return InvalidArgument(
          fmt::format("tenant '{}': only a-z, 0-9, '_' and '-' are allowed", name));
    }
  }
  return Status::Ok();
}

StatusOr<Authenticator> Authenticator::Create(std::vector<TenantCredential> credentials) {
  Authenticator a;
  std::set<std::string> names;
  Status bad;
  for (auto& c : credentials) {
    Status s = ValidateTenantName(c.tenant);
    if (s.ok()) s = wire::ValidateToken(c.token).WithContext(fmt::format("tenant '{}'", c.tenant));
    if (s.ok() && !names.insert(c.tenant).second)
      s = InvalidArgument(fmt::format("tenant '{}' twice", c.tenant));
    if (s.ok()) {
      Digest d = Hash(c.token);
      for (const Entry& e : a.entries_) {
        if (DiffBits(e.digest, d) == 0) {
          s = InvalidArgument(
              fmt::format("tenants '{}' and '{}' have the same token", e.tenant, c.tenant));
        }
      }
      a.entries_.push_back({c.tenant, d});
    }
    wire::ZeroString(&c.token);
    if (bad.ok() && !s.ok()) bad = s;
  }
  if (!bad.ok()) return bad;
  if (a.entries_.empty()) return InvalidArgument("no tenants: sandboxd would refuse every caller");
  return a;
}

Authenticator::Result Authenticator::Authenticate(const std::string* authorization,
                                                  std::string* tenant) const {
  if (authorization == nullptr) return Result::kMissing;
  std::string_view v = *authorization;
  constexpr std::string_view kScheme = "bearer";
  if (v.size() <= kScheme.size() || v[kScheme.size()] != ' ' ||
      !EqualsIgnoreCase(v.substr(0, kScheme.size()), kScheme)) {
    return Result::kMissing;
  }
  std::string_view token = v.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  if (token.empty() || token.size() > wire::kMaxTokenLength ||
      token.find(' ') != std::string_view::npos) {
    return Result::kInvalid;
  }
  // SECURITY: hash first, then compare digests with all tenants without early exit: the time
  // taken depends only on the number of tenants, not on the presented token.
  Digest d = Hash(token);
  size_t match = entries_.size();
  for (size_t i = 0; i < entries_.size(); ++i) {
    uint8_t diff = DiffBits(entries_[i].digest, d);
    // Branch-free select: mask is all ones when diff == 0.
    size_t mask = static_cast<size_t>(0) - static_cast<size_t>(diff == 0);
    match = (match & ~mask) | (i & mask);
  }
  if (match == entries_.size()) return Result::kInvalid;
  *tenant = entries_[match].tenant;
  return Result::kOk;
}

std::vector<std::string> Authenticator::tenants() const {
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e.tenant);
  return out;
}

}  // namespace sbx::api
