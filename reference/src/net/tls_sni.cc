#include "net/tls_sni.h"

#include <cstdint>

namespace sbx::net {
namespace {

constexpr uint8_t kHandshakeRecord = 0x16;
constexpr uint8_t kClientHello = 0x01;
constexpr uint16_t kExtServerName = 0x0000;
constexpr uint16_t kExtEncryptedClientHello = 0xfe0d;
constexpr size_t kMaxRecordPayload = 16384 + 2048;  // TLSCiphertext limit; plaintext is 2^14

// A bounds-checked reader over one byte string: every read fails cleanly past the end.
class Reader {
 public:
  explicit Reader(std::string_view d) : d_(d) {}
  bool U8(uint8_t* v) {
    if (d_.size() < 1) return false;
    *v = static_cast<uint8_t>(d_[0]);
    d_.remove_prefix(1);
    return true;
  }
  bool U16(uint16_t* v) {
    if (d_.size() < 2) return false;
    *v = static_cast<uint16_t>((static_cast<uint8_t>(d_[0]) << 8) | static_cast<uint8_t>(d_[1]));
    d_.remove_prefix(2);
    return true;
  }
  bool Bytes(size_t n, std::string_view* v) {
    if (d_.size() < n) return false;
    *v = d_.substr(0, n);
    d_.remove_prefix(n);
    return true;
  }
  bool Skip(size_t n) {
    std::string_view ignored;
    return Bytes(n, &ignored);
  }
  // A vector with an 8- or 16-bit length prefix.
  bool Vec8(std::string_view* v) {
    uint8_t n;
    return U8(&n) && Bytes(n, v);
  }
  bool Vec16(std::string_view* v) {
    uint16_t n;
    return U16(&n) && Bytes(n, v);
  }
  bool empty() const { return d_.empty(); }

 private:
  std::string_view d_;
};

SniStatus ParseServerNameList(std::string_view ext, ClientHelloInfo* out) {
  Reader r(ext);
  std::string_view list;
  if (!r.Vec16(&list) || !r.empty() || list.empty()) return SniStatus::kMalformed;
  Reader l(list);
  while (!l.empty()) {
    uint8_t type;
    std::string_view name;
    if (!l.U8(&type) || !l.Vec16(&name)) return SniStatus::kMalformed;
    if (type != 0) continue;                                         // only host_name(0) is defined
    if (out->has_sni || name.empty()) return SniStatus::kMalformed;  // RFC 6066: one host_name
    out->has_sni = true;
    out->sni = std::string(name);
  }
  return SniStatus::kComplete;
}

SniStatus ParseHello(std::string_view body, ClientHelloInfo* out) {
  Reader r(body);
  std::string_view v;
  uint16_t legacy_version;
  if (!r.U16(&legacy_version) || (legacy_version >> 8) != 3) return SniStatus::kMalformed;
  if (!r.Skip(32)) return SniStatus::kMalformed;                   // random
  if (!r.Vec8(&v) || v.size() > 32) return SniStatus::kMalformed;  // legacy_session_id
  if (!r.Vec16(&v) || v.size() < 2 || v.size() % 2) return SniStatus::kMalformed;  // suites
  if (!r.Vec8(&v) || v.empty()) return SniStatus::kMalformed;  // compression methods
  if (r.empty()) return SniStatus::kComplete;                  // no extensions at all
  std::string_view exts;
  if (!r.Vec16(&exts) || !r.empty()) return SniStatus::kMalformed;
  Reader e(exts);
  uint32_t seen_low = 0;  // duplicate detection for the extensions we care about
  while (!e.empty()) {
    uint16_t type;
    std::string_view data;
    if (!e.U16(&type) || !e.Vec16(&data)) return SniStatus::kMalformed;
    if (type == kExtServerName) {
      if (seen_low & 1u) return SniStatus::kMalformed;
      seen_low |= 1u;
      SniStatus s = ParseServerNameList(data, out);
      if (s != SniStatus::kComplete) return s;
    } else if (type == kExtEncryptedClientHello) {
      out->has_ech = true;
    }
  }
  return SniStatus::kComplete;
}

}  // namespace

SniStatus ParseClientHello(std::string_view data, ClientHelloInfo* out) {
  *out = ClientHelloInfo{};
  // Gather handshake bytes from consecutive handshake records until the first message is
  // whole. Record: type(1) version(2) length(2) payload.
  std::string handshake;
  size_t pos = 0;
  while (true) {
    if (data.size() - pos < 1) return SniStatus::kNeedMore;
    if (static_cast<uint8_t>(data[pos]) != kHandshakeRecord) {
      return pos == 0 ? SniStatus::kNotTls : SniStatus::kMalformed;
    }
    if (data.size() - pos < 2) return SniStatus::kNeedMore;
    if (static_cast<uint8_t>(data[pos + 1]) != 3) {
      return pos == 0 ? SniStatus::kNotTls : SniStatus::kMalformed;
    }
    if (data.size() - pos < 5) return SniStatus::kNeedMore;
    size_t len = (static_cast<uint8_t>(data[pos + 3]) << 8) | static_cast<uint8_t>(data[pos + 4]);
    if (len == 0 || len > kMaxRecordPayload) return SniStatus::kMalformed;
    if (data.size() - pos - 5 < len) return SniStatus::kNeedMore;
    handshake.append(data.substr(pos + 5, len));
    pos += 5 + len;
    if (handshake.size() >= 4) {
      if (static_cast<uint8_t>(handshake[0]) != kClientHello) return SniStatus::kMalformed;
      size_t hs_len = (static_cast<uint8_t>(handshake[1]) << 16) |
                      (static_cast<uint8_t>(handshake[2]) << 8) |
                      static_cast<uint8_t>(handshake[3]);
      if (hs_len + 4 > kMaxClientHelloBytes) return SniStatus::kMalformed;
      if (handshake.size() >= hs_len + 4) {
        out->bytes = pos;
        SniStatus s = ParseHello(std::string_view(handshake).substr(4, hs_len), out);
        if (s != SniStatus::kComplete) {
          ClientHelloInfo empty;
          *out = empty;
        }
        return s;
      }
    }
    if (pos >= kMaxClientHelloBytes + 5 * 8) return SniStatus::kMalformed;
  }
}

}  // namespace sbx::net
