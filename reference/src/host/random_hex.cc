#include "host/random_hex.h"

#include <fmt/format.h>

#include <random>

namespace sbx::host {

std::string RandomHex(int bytes) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string s;
  s.reserve(static_cast<size_t>(bytes) * 2);
  for (int i = 0; i < bytes; ++i) s += fmt::format("{:02x}", static_cast<unsigned>(rng() & 0xff));
  return s;
}

}  // namespace sbx::host
