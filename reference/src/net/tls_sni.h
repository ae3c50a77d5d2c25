// The server name of a TLS ClientHello (EGR-4: passthrough by SNI, no trust bundle). Reads the
// first handshake message from the TLS records a client sends first, which may span records.
// Nothing is decrypted and nothing is answered: the gateway only decides pass or reset.
//
// Pure and bounded: fuzzed by fuzz/tls_sni_fuzz.cc.
// Thread-safety: functions only; no shared state.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace sbx::net {

inline constexpr size_t kMaxClientHelloBytes = 32 * 1024;

enum class SniStatus {
  kNeedMore,   // a prefix of a plausible ClientHello: read more bytes
  kNotTls,     // not a TLS handshake record
  kMalformed,  // a TLS handshake record that is not a well-formed ClientHello (or too large)
  kComplete,   // a whole ClientHello was parsed
};

struct ClientHelloInfo {
  bool has_sni = false;
  std::string sni;       // host_name as sent (not lower-cased, not validated)
  bool has_ech = false;  // encrypted_client_hello (0xfe0d): the real name is hidden
  size_t bytes = 0;      // bytes of `data` taken by the records holding the ClientHello
};

SniStatus ParseClientHello(std::string_view data, ClientHelloInfo* out);

}  // namespace sbx::net
