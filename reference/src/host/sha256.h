// SHA-256 (FIPS 180-4), streaming. Used to verify content-addressed images (IMG-1).
//
// Our own small implementation rather than OpenSSL's libcrypto: it adds no dependency to the
// runtime for one function, it is checked against the FIPS 180-2 vectors (sha256_test.cc), and
// its speed only matters on the first use of an image on a node (IMG-2), where it is measured
// in docs/images.md.
//
// Thread-safety: a Sha256 object is not shared; separate objects are independent.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sbx::host {

class Sha256 {
 public:
  static constexpr size_t kDigestSize = 32;
  using Digest = std::array<uint8_t, kDigestSize>;

  Sha256() { Reset(); }
  void Reset();
  void Update(const void* data, size_t len);
  void Update(std::string_view s) { Update(s.data(), s.size()); }
  // Finishes and returns the digest; the object must be Reset() before it is used again.
  Digest Finish();

  static std::string ToHex(const Digest& d);        // lower-case, 64 characters
  static std::string HexOf(std::string_view data);  // one-shot convenience

 private:
  void Block(const uint8_t* p);

  std::array<uint32_t, 8> h_{};
  std::array<uint8_t, 64> buf_{};
  size_t buf_len_ = 0;
  uint64_t total_ = 0;  // bytes
};

}  // namespace sbx::host
