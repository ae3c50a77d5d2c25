// SHA-256 against the FIPS 180-2 example vectors (and NIST's extra ones); the image store's
// digest check (IMG-1) is only as good as this.
#include "host/sha256.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace sbx::host {
namespace {

TEST(Sha256Test, Fips180_2OneBlock) {
  EXPECT_EQ(Sha256::HexOf("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256Test, Fips180_2TwoBlocks) {
  EXPECT_EQ(Sha256::HexOf("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256Test, Fips180_2MillionA) {
  // Fed in uneven pieces so that the buffering across block boundaries is exercised too.
  Sha256 h;
  std::string chunk(997, 'a');
  size_t left = 1000000;
  while (left > 0) {
    size_t n = std::min(left, chunk.size());
    h.Update(chunk.data(), n);
    left -= n;
  }
  EXPECT_EQ(Sha256::ToHex(h.Finish()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, EmptyAndNistLongMessage) {
  EXPECT_EQ(Sha256::HexOf(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256::HexOf("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
                          "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256Test, PaddingEdgesMatchOneShot) {
  // Lengths around the 55/56/64-byte padding boundaries, fed one byte at a time and at once.
  for (size_t len : {55u, 56u, 57u, 63u, 64u, 65u, 119u, 120u, 128u}) {
    std::string msg(len, 'x');
    for (size_t i = 0; i < len; i++) msg[i] = static_cast<char>('a' + i % 26);
    Sha256 bytewise;
    for (char c : msg) bytewise.Update(&c, 1);
    EXPECT_EQ(Sha256::ToHex(bytewise.Finish()), Sha256::HexOf(msg)) << "len " << len;
  }
  // A known 64-byte value (one full block plus a padding block).
  EXPECT_EQ(Sha256::HexOf(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(Sha256Test, Throughput) {
  // Not asserted: printed for docs/images.md (first use of an image pays this per byte).
  std::string data(16 << 20, '\x5a');
  auto t0 = std::chrono::steady_clock::now();
  std::string hex = Sha256::HexOf(data);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("sha256: 16 MiB in %.1f ms = %.0f MiB/s\n", s * 1e3, 16 / s);
  EXPECT_EQ(hex.size(), 64u);
}

}  // namespace
}  // namespace sbx::host
