// SHA-256 (FIPS 180-4), streaming. Used to verify content-addressed images (IMG-1) and to
// compare tokens (api/auth.cc).
//
// A thin RAII wrapper over OpenSSL's libcrypto (EVP), which is maintained, constant-tested and
// needed anyway for TLS to remote workers (docs/dependencies.md): nothing hand-written that a
// library does. sha256_test.cc checks it against the FIPS 180-2 vectors.
//
// Thread-safety: a Sha256 object is not shared; separate objects are independent.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX, kept out of the header

namespace sbx::host {

class Sha256 {
 public:
  static constexpr size_t kDigestSize = 32;
  using Digest = std::array<uint8_t, kDigestSize>;

  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Reset();
  void Update(const void* data, size_t len);
  void Update(std::string_view s) { Update(s.data(), s.size()); }
  // Finishes and returns the digest; the object must be Reset() before it is used again.
  Digest Finish();

  static std::string ToHex(const Digest& d);        // lower-case, 64 characters
  static std::string HexOf(std::string_view data);  // one-shot convenience

 private:
  evp_md_ctx_st* ctx_;
};

}  // namespace sbx::host
