// The guest agent's wire protocol, host side: frames, fields, and the exec and configure
// messages (microvm_vm.h, namespace proto; docs/microvm.md "Protocol").
#include <arpa/inet.h>
#include <fmt/format.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/microvm/microvm_vm.h"

namespace sbx::microvm {
namespace {

void PutLe(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; i++) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetLe(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace

namespace proto {

const Field* Frame::Find(uint16_t tag) const {
  for (const auto& f : fields)
    if (f.tag == tag) return &f;
  return nullptr;
}

Field StrField(uint16_t tag, std::string_view v) { return Field{tag, std::string(v)}; }
Field U8Field(uint16_t tag, uint8_t v) { return Field{tag, std::string(1, static_cast<char>(v))}; }
Field U32Field(uint16_t tag, uint32_t v) {
  Field f{tag, {}};
  PutLe(f.value, v, 4);
  return f;
}
Field U64Field(uint16_t tag, uint64_t v) {
  Field f{tag, {}};
  PutLe(f.value, v, 8);
  return f;
}

StatusOr<std::string> Encode(const Frame& frame) {
  std::string payload;
  for (const auto& f : frame.fields) {
    if (f.value.size() > 0xffffffffu) return InvalidArgument("field too long");
    PutLe(payload, f.tag, 2);
    PutLe(payload, f.value.size(), 4);
    payload += f.value;
  }
  if (payload.size() > 0xffffffffu) return InvalidArgument("frame payload too long");
  std::string out(kMagic, 4);
  out.push_back(static_cast<char>(kVersion));
  out.push_back(static_cast<char>(frame.type));
  PutLe(out, 0, 2);
  PutLe(out, frame.id, 4);
  PutLe(out, payload.size(), 4);
  out += payload;
  return out;
}

StatusOr<std::optional<Frame>> Decoder::Next() {
  if (!broken_.ok()) return broken_;
  auto fail = [&](std::string why) -> Status {
    broken_ = Status(Code::kToolError, "guest agent sent a malformed frame: " + why);
    return broken_;
  };
  size_t have = std::min(buf_.size(), size_t{4});
  if (std::memcmp(buf_.data(), kMagic, have) != 0) {
    std::string hex;
    for (size_t i = 0; i < have; i++)
      hex += fmt::format("{:02x}", static_cast<unsigned char>(buf_[i]));
    return fail("bad magic " + hex + " (want 53425856, \"SBXV\")");
  }
  if (buf_.size() < kHeaderSize) return std::optional<Frame>();
  unsigned version = static_cast<unsigned char>(buf_[4]);
  if (version != kVersion)
    return fail(fmt::format("protocol version {}, want {}", version, kVersion));
  uint64_t flags = GetLe(buf_.data() + 6, 2);
  if (flags != 0) return fail(fmt::format("flags 0x{:x} set, none are defined", flags));
  uint32_t len = static_cast<uint32_t>(GetLe(buf_.data() + 12, 4));
  if (len > max_payload_)
    return fail(fmt::format("payload of {} bytes, over the {} byte limit", len, max_payload_));
  if (buf_.size() < kHeaderSize + len) return std::optional<Frame>();
  Frame f;
  f.type = static_cast<uint8_t>(buf_[5]);
  f.id = static_cast<uint32_t>(GetLe(buf_.data() + 8, 4));
  const char* p = buf_.data() + kHeaderSize;
  uint32_t off = 0;
  while (off < len) {
    if (len - off < 6) return fail(fmt::format("truncated field header at payload offset {}", off));
    uint16_t tag = static_cast<uint16_t>(GetLe(p + off, 2));
    uint32_t flen = static_cast<uint32_t>(GetLe(p + off + 2, 4));
    off += 6;
    if (flen > len - off)
      return fail(fmt::format("field {} of {} bytes runs past the payload ({} left)", tag, flen,
                              len - off));
    f.fields.push_back(Field{tag, std::string(p + off, flen)});
    off += flen;
  }
  buf_.erase(0, kHeaderSize + len);
  return std::optional<Frame>(std::move(f));
}

StatusOr<uint64_t> FieldU64(const Frame& f, uint16_t tag, uint64_t dflt) {
  const Field* x = f.Find(tag);
  if (!x) return dflt;
  if (x->value.size() != 8)
    return InvalidArgument(fmt::format("field {}: {} bytes, want 8", tag, x->value.size()));
  return GetLe(x->value.data(), 8);
}
StatusOr<uint32_t> FieldU32(const Frame& f, uint16_t tag, uint32_t dflt) {
  const Field* x = f.Find(tag);
  if (!x) return dflt;
  if (x->value.size() != 4)
    return InvalidArgument(fmt::format("field {}: {} bytes, want 4", tag, x->value.size()));
  return static_cast<uint32_t>(GetLe(x->value.data(), 4));
}
StatusOr<bool> FieldFlag(const Frame& f, uint16_t tag) {
  const Field* x = f.Find(tag);
  if (!x) return false;
  if (x->value.size() != 1 || static_cast<unsigned char>(x->value[0]) > 1)
    return InvalidArgument(fmt::format("field {}: want one byte 0 or 1", tag));
  return x->value[0] == 1;
}

}  // namespace proto

StatusOr<std::vector<proto::Field>> ExecRequestFields(const ExecRequest& req) {
  if (req.shell.has_value() == !req.argv.empty())
    return InvalidArgument("exec: give argv or a shell line, exactly one");
  if (!req.root.empty() && req.root[0] != '/')
    return InvalidArgument("exec: root must be an absolute path, got \"" + req.root + "\"");
  std::vector<proto::Field> f;
  for (const auto& a : req.argv) f.push_back(proto::StrField(proto::kArgv, a));
  if (req.shell) f.push_back(proto::StrField(proto::kShell, *req.shell));
  for (const auto& e : req.env) f.push_back(proto::StrField(proto::kEnv, e));
  if (!req.cwd.empty()) f.push_back(proto::StrField(proto::kCwd, req.cwd));
  if (!req.stdin_data.empty()) f.push_back(proto::StrField(proto::kStdin, req.stdin_data));
  if (req.timeout_ms) f.push_back(proto::U32Field(proto::kTimeoutMs, req.timeout_ms));
  if (req.memory_limit) f.push_back(proto::U64Field(proto::kMemLimit, req.memory_limit));
  if (req.output_limit) f.push_back(proto::U32Field(proto::kOutputLimit, req.output_limit));
  if (!req.root.empty()) f.push_back(proto::StrField(proto::kRoot, req.root));
  if (req.uid) f.push_back(proto::U32Field(proto::kUid, req.uid));
  if (req.gid) f.push_back(proto::U32Field(proto::kGid, req.gid));
  if (req.pids_limit) f.push_back(proto::U32Field(proto::kPidsLimit, req.pids_limit));
  if (req.nofile) f.push_back(proto::U32Field(proto::kNofile, req.nofile));
  if (req.term_grace_ms) f.push_back(proto::U32Field(proto::kTermGraceMs, req.term_grace_ms));
  return f;
}

StatusOr<std::vector<proto::Field>> ConfigureFields(const GuestConfig& cfg) {
  std::vector<proto::Field> f;
  auto ipv4 = [](const std::string& a, const char* what) -> Status {
    in_addr x{};
    if (inet_pton(AF_INET, a.c_str(), &x) != 1)
      return InvalidArgument(
          fmt::format("configure: {} \"{}\" is not a dotted IPv4 address", what, a));
    return Status::Ok();
  };
  if (cfg.prefix > 32)
    return InvalidArgument(fmt::format("configure: prefix {} over 32", cfg.prefix));
  if (!cfg.address.empty()) {
    RETURN_IF_ERROR(ipv4(cfg.address, "address"));
    f.push_back(proto::StrField(proto::kAddress, cfg.address));
    f.push_back(proto::U32Field(proto::kPrefix, cfg.prefix));
  }
  if (!cfg.gateway.empty()) {
    if (cfg.address.empty()) return InvalidArgument("configure: a gateway needs an address");
    RETURN_IF_ERROR(ipv4(cfg.gateway, "gateway"));
    f.push_back(proto::StrField(proto::kGateway, cfg.gateway));
  }
  if (cfg.disk_bytes) f.push_back(proto::U64Field(proto::kDiskBytes, cfg.disk_bytes));
  if (!cfg.hostname.empty()) {
    if (cfg.hostname.size() > 64 || cfg.hostname.find('\0') != std::string::npos)
      return InvalidArgument("configure: hostname over 64 bytes or with a NUL byte");
    f.push_back(proto::StrField(proto::kHostname, cfg.hostname));
  }
  return f;
}

StatusOr<std::string> EncodeExecRequest(uint32_t id, const ExecRequest& req) {
  ASSIGN_OR_RETURN(auto fields, ExecRequestFields(req));
  proto::Frame f{proto::kExec, id, std::move(fields)};
  ASSIGN_OR_RETURN(std::string out, proto::Encode(f));
  if (out.size() - proto::kHeaderSize > proto::kMaxRequestPayload)
    return InvalidArgument(fmt::format("exec request of {} bytes, over the agent's {} byte limit",
                                       out.size() - proto::kHeaderSize, proto::kMaxRequestPayload));
  return out;
}

StatusOr<ExecResult> DecodeExecResult(const proto::Frame& f) {
  if (f.type != proto::kExecResult)
    return Status(Code::kToolError,
                  fmt::format("agent answered exec with frame type 0x{:x}", f.type));
  ExecResult r;
  auto bad = [](const Status& s) {
    return Status(Code::kToolError, "agent's exec result: " + s.message());
  };
  if (f.Find(proto::kExitCode)) {
    auto v = proto::FieldU32(f, proto::kExitCode, 0);
    if (!v.ok()) return bad(v.status());
    if (*v > 255) return bad(InvalidArgument(fmt::format("exit code {}", *v)));
    r.exit_code = static_cast<int>(*v);
  }
  if (f.Find(proto::kSignal)) {
    auto v = proto::FieldU32(f, proto::kSignal, 0);
    if (!v.ok()) return bad(v.status());
    if (*v == 0 || *v > 64) return bad(InvalidArgument(fmt::format("signal {}", *v)));
    r.signal = static_cast<int>(*v);
  }
  if (r.exit_code.has_value() == r.signal.has_value())
    return bad(InvalidArgument("want exactly one of exit code and signal"));
  if (const auto* x = f.Find(proto::kStdout)) r.stdout_data = x->value;
  if (const auto* x = f.Find(proto::kStderr)) r.stderr_data = x->value;
  if (const auto* x = f.Find(proto::kStartError)) r.start_error = x->value;
  if (f.Find(proto::kDiskFree)) {
    auto v = proto::FieldU64(f, proto::kDiskFree, 0);
    if (!v.ok()) return bad(v.status());
    r.disk_free = static_cast<int64_t>(std::min<uint64_t>(*v, INT64_MAX));
  }
  struct {
    uint16_t tag;
    bool* out;
  } flags[] = {{proto::kStdoutTruncated, &r.stdout_truncated},
               {proto::kStderrTruncated, &r.stderr_truncated},
               {proto::kOom, &r.oom},
               {proto::kTimedOut, &r.timed_out}};
  for (auto& fl : flags) {
    auto v = proto::FieldFlag(f, fl.tag);
    if (!v.ok()) return bad(v.status());
    *fl.out = *v;
  }
  struct {
    uint16_t tag;
    uint64_t* out;
  } nums[] = {{proto::kCpuUsec, &r.cpu_usec},
              {proto::kPeakMemory, &r.peak_memory},
              {proto::kWallUsec, &r.wall_usec},
              {proto::kDiskUsed, &r.disk_used}};
  for (auto& n : nums) {
    auto v = proto::FieldU64(f, n.tag, 0);
    if (!v.ok()) return bad(v.status());
    *n.out = *v;
  }
  return r;
}

}  // namespace sbx::microvm
