// Test helper (header only, tests and fuzz seeds): builds TLS ClientHello records with chosen
// SNI/ECH/record splitting. Not a TLS implementation: just the bytes the gateway inspects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sbx::net::testing_tls {

struct HelloOptions {
  std::string sni;             // "" = no server_name extension
  bool ech = false;            // add an encrypted_client_hello extension
  size_t record_split = 0;     // split the handshake into records of this size (0 = one record)
  bool duplicate_sni = false;  // two server_name extensions
};

inline std::string U16(size_t v) {
  return std::string{static_cast<char>((v >> 8) & 0xff), static_cast<char>(v & 0xff)};
}

inline std::string ClientHello(const HelloOptions& o) {
  std::string exts;
  exts += U16(0x002b) + U16(3) + std::string("\x02\x03\x04", 3);  // supported_versions: 1.3
  if (o.ech) exts += U16(0xfe0d) + U16(4) + "abcd";
  auto sni_ext = [&] {
    std::string entry = std::string(1, '\0') + U16(o.sni.size()) + o.sni;  // host_name
    std::string list = U16(entry.size()) + entry;
    return U16(0x0000) + U16(list.size()) + list;
  };
  if (!o.sni.empty()) {
    if (o.duplicate_sni) exts += sni_ext();
    exts += sni_ext();  // last, so tests can find its bytes from the end
  }
  std::string body;
  body += std::string("\x03\x03", 2);           // legacy_version
  body += std::string(32, 'r');                 // random
  body += std::string(1, '\0');                 // session id: empty
  body += U16(2) + std::string("\x13\x01", 2);  // one cipher suite
  body += std::string("\x01\x00", 2);           // compression: null
  body += U16(exts.size()) + exts;
  std::string hs = std::string(1, '\x01') +
                   std::string(1, static_cast<char>((body.size() >> 16) & 0xff)) +
                   U16(body.size() & 0xffff) + body;
  size_t chunk = o.record_split ? o.record_split : hs.size();
  std::string out;
  for (size_t i = 0; i < hs.size(); i += chunk) {
    std::string part = hs.substr(i, chunk);
    out += std::string("\x16\x03\x01", 3) + U16(part.size()) + part;
  }
  return out;
}

}  // namespace sbx::net::testing_tls
