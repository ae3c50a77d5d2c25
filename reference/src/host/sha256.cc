#include "host/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>

namespace sbx::host {
namespace {

// EVP calls fail only when memory runs out or the digest is missing from libcrypto: neither
// leaves a digest worth returning, so the process stops rather than hand out a wrong one.
void Must(int ok) {
  if (ok != 1) std::abort();
}

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_) std::abort();
  Reset();
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::Reset() { Must(EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr)); }

void Sha256::Update(const void* data, size_t len) {
  if (len) Must(EVP_DigestUpdate(ctx_, data, len));
}

Sha256::Digest Sha256::Finish() {
  Digest d{};
  unsigned int n = 0;
  Must(EVP_DigestFinal_ex(ctx_, d.data(), &n));
  if (n != kDigestSize) std::abort();
  return d;
}

std::string Sha256::ToHex(const Digest& d) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * kDigestSize);
  for (uint8_t b : d) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

std::string Sha256::HexOf(std::string_view data) {
  Sha256 h;
  h.Update(data);
  return ToHex(h.Finish());
}

}  // namespace sbx::host
