// host::RandomHex: the length and alphabet every random name relies on (runtime ids, sandbox
// ids, probe containers), and two draws that differ.
#include "host/random_hex.h"

#include <gtest/gtest.h>

namespace sbx::host {
namespace {

TEST(RandomHex, TwoDigitsPerByteLowercaseHex) {
  for (int bytes : {0, 1, 3, 6}) {
    const std::string s = RandomHex(bytes);
    ASSERT_EQ(s.size(), static_cast<size_t>(bytes) * 2) << s;
    EXPECT_EQ(s.find_first_not_of("0123456789abcdef"), std::string::npos) << s;
  }
}

TEST(RandomHex, DrawsDiffer) {
  EXPECT_NE(RandomHex(8), RandomHex(8));  // 1 in 2^64 to fail
}

}  // namespace
}  // namespace sbx::host
