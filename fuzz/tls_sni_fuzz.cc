// libFuzzer target: the egress gateway's TLS ClientHello / SNI parser (EGR-4).
// Invariants: a complete hello never claims more bytes than it was given, and a prefix of the
// input never yields a different verdict than "need more" or the same kind of answer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "net/tls_sni.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sbx::net;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  ClientHelloInfo info;
  SniStatus s = ParseClientHello(in, &info);
  if (s == SniStatus::kComplete && info.bytes > size) std::abort();
  if (s != SniStatus::kComplete && (info.has_sni || !info.sni.empty())) std::abort();
  if (s == SniStatus::kComplete && size > 0) {
    // Everything after the hello is ignored: the verdict on hello+suffix is the same.
    ClientHelloInfo cut;
    if (ParseClientHello(in.substr(0, info.bytes), &cut) != SniStatus::kComplete) std::abort();
    if (cut.sni != info.sni || cut.has_ech != info.has_ech) std::abort();
  }
  return 0;
}
