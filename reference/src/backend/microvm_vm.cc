// The microVM layer: see microvm_vm.h and docs/microvm.md.
#include "backend/microvm_vm.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "backend/microvm_spawn.h"
#include "host/image.h"

namespace sbx::microvm {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

void PutLe(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; i++) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetLe(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::string Tail(const std::string& path, size_t max = 1500) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (s.size() > max) s = "…" + s.substr(s.size() - max);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

// Milliseconds left until `deadline`, at least 0.
int MsLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

// A listening unix socket at `path` (made before QEMU starts, handed to it as a file descriptor,
// so that connecting right after the spawn never races QEMU's own start-up).
StatusOr<int> ListenUnix(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path) return InvalidArgument("socket path too long: " + path);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket");
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0 || listen(fd, 4) < 0) {
    Status s = ErrnoStatus("bind/listen " + path);
    close(fd);
    return s;
  }
  return fd;
}

StatusOr<int> ConnectUnix(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket");
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0) {
    Status s = ErrnoStatus("connect " + path);
    close(fd);
    return s;
  }
  return fd;
}

Status WriteAll(int fd, std::string_view data, Clock::time_point deadline, const char* what) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t w = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      off += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN) return ErrnoStatus(std::string("writing to ") + what);
    pollfd p{fd, POLLOUT, 0};
    int rc = poll(&p, 1, MsLeft(deadline));
    if (rc == 0) return Status(Code::kTimeout, std::string("timed out writing to ") + what);
  }
  return Status::Ok();
}

// Reads what is there (at least one byte, waiting until the deadline). Empty string: EOF.
StatusOr<std::string> ReadSome(int fd, Clock::time_point deadline, const char* what) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    int rc = poll(&p, 1, MsLeft(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return ErrnoStatus(std::string("poll on ") + what);
    if (rc == 0) return Status(Code::kTimeout, std::string("timed out waiting for ") + what);
    char buf[65536];
    ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) return ErrnoStatus(std::string("reading ") + what);
    return std::string(buf, static_cast<size_t>(r));
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Protocol
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
    for (size_t i = 0; i < have; i++) hex += fmt::format("{:02x}", static_cast<unsigned char>(buf_[i]));
    return fail("bad magic " + hex + " (want 53425856, \"SBXV\")");
  }
  if (buf_.size() < kHeaderSize) return std::optional<Frame>();
  unsigned version = static_cast<unsigned char>(buf_[4]);
  if (version != kVersion) return fail(fmt::format("protocol version {}, want {}", version, kVersion));
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
      return fail(fmt::format("field {} of {} bytes runs past the payload ({} left)", tag, flen, len - off));
    f.fields.push_back(Field{tag, std::string(p + off, flen)});
    off += flen;
  }
  buf_.erase(0, kHeaderSize + len);
  return std::optional<Frame>(std::move(f));
}

StatusOr<uint64_t> FieldU64(const Frame& f, uint16_t tag, uint64_t dflt) {
  const Field* x = f.Find(tag);
  if (!x) return dflt;
  if (x->value.size() != 8) return InvalidArgument(fmt::format("field {}: {} bytes, want 8", tag, x->value.size()));
  return GetLe(x->value.data(), 8);
}
StatusOr<uint32_t> FieldU32(const Frame& f, uint16_t tag, uint32_t dflt) {
  const Field* x = f.Find(tag);
  if (!x) return dflt;
  if (x->value.size() != 4) return InvalidArgument(fmt::format("field {}: {} bytes, want 4", tag, x->value.size()));
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
      return InvalidArgument(fmt::format("configure: {} \"{}\" is not a dotted IPv4 address", what, a));
    return Status::Ok();
  };
  if (cfg.prefix > 32) return InvalidArgument(fmt::format("configure: prefix {} over 32", cfg.prefix));
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
    return Status(Code::kToolError, fmt::format("agent answered exec with frame type 0x{:x}", f.type));
  ExecResult r;
  auto bad = [](const Status& s) { return Status(Code::kToolError, "agent's exec result: " + s.message()); };
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

// ---------------------------------------------------------------------------------------------
// Configuration

StatusOr<uint32_t> HostTscKhz() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("cpu MHz", 0) != 0) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) break;
    double mhz = std::strtod(line.c_str() + colon + 1, nullptr);
    if (mhz < 100 || mhz > 20000) break;
    return static_cast<uint32_t>(mhz * 1000.0 + 0.5);
  }
  return Unsupported("no usable \"cpu MHz\" line in /proc/cpuinfo (needed for tsc_early_khz=)");
}

StatusOr<VmConfig> ConfigFromImageStore(const std::string& store_dir, const std::string& cache_dir,
                                        const std::string& ref) {
  host::ImageStore store(store_dir, cache_dir);
  auto img = store.Get(ref);
  if (!img.ok()) return img.status().WithContext("microVM guest image " + ref);
  VmConfig cfg;
  cfg.vmlinux = img->rootfs_dir + "/vmlinux";
  cfg.initramfs = img->rootfs_dir + "/initramfs.cpio";
  for (const auto* p : {&cfg.vmlinux, &cfg.initramfs})
    if (access(p->c_str(), R_OK) != 0) return NotFound("guest image " + ref + " has no " + *p);
  return cfg;
}

double Stages::Get(std::string_view name) const {
  for (const auto& [n, v] : ms)
    if (n == name) return v;
  return -1;
}
std::string Stages::ToString() const {
  std::string s;
  for (const auto& [n, v] : ms) s += fmt::format("{}{}={:.1f}ms", s.empty() ? "" : " ", n, v);
  return s;
}

// ---------------------------------------------------------------------------------------------
// QMP: one JSON object per line; replies are matched in order, events are kept.
class Qmp {
 public:
  explicit Qmp(int fd) : fd_(fd) {}
  ~Qmp() { close(fd_); }

  Status Handshake(Clock::time_point deadline) {
    ASSIGN_OR_RETURN(json greeting, ReadObject(deadline));
    if (!greeting.contains("QMP")) return Internal("QMP: no greeting, got " + greeting.dump());
    return Command("qmp_capabilities", json::object(), deadline).status();
  }

  // Sends a command, with `fd` as SCM_RIGHTS if >= 0; the "return" value or the error.
  StatusOr<json> Command(const std::string& cmd, const json& args, Clock::time_point deadline, int fd = -1) {
    json req = {{"execute", cmd}};
    if (!args.empty()) req["arguments"] = args;
    std::string line = req.dump() + "\n";
    if (fd >= 0) {
      iovec iov{line.data(), line.size()};
      char ctl[CMSG_SPACE(sizeof(int))] = {};
      msghdr m{};
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      m.msg_control = ctl;
      m.msg_controllen = sizeof ctl;
      cmsghdr* c = CMSG_FIRSTHDR(&m);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
      ssize_t w = sendmsg(fd_, &m, MSG_NOSIGNAL);
      if (w != static_cast<ssize_t>(line.size())) return ErrnoStatus("QMP sendmsg " + cmd);
    } else {
      RETURN_IF_ERROR(WriteAll(fd_, line, deadline, "QMP"));
    }
    for (;;) {
      ASSIGN_OR_RETURN(json o, ReadObject(deadline));
      if (o.contains("event")) {
        events_.push_back(std::move(o));
        continue;
      }
      if (o.contains("error"))
        return Status(Code::kInternal, fmt::format("QMP {}: {}", cmd, o["error"].value("desc", o.dump())));
      if (o.contains("return")) return o["return"];
    }
  }

  // Waits for an event `name` whose data matches `pred`.
  template <typename Pred>
  StatusOr<json> WaitEvent(const std::string& name, Pred pred, Clock::time_point deadline) {
    for (;;) {
      while (!events_.empty()) {
        json e = std::move(events_.front());
        events_.pop_front();
        if (e.value("event", "") == name && pred(e.value("data", json::object()))) return e;
      }
      ASSIGN_OR_RETURN(json o, ReadObject(deadline));
      if (o.contains("event")) events_.push_back(std::move(o));
    }
  }

 private:
  StatusOr<json> ReadObject(Clock::time_point deadline) {
    for (;;) {
      auto nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        json o = json::parse(line, nullptr, false);
        if (o.is_discarded() || !o.is_object()) return Internal("QMP: not a JSON object: " + line.substr(0, 200));
        return o;
      }
      if (buf_.size() > (1u << 20)) return Internal("QMP: line over 1 MiB");
      ASSIGN_OR_RETURN(std::string more, ReadSome(fd_, deadline, "QMP"));
      if (more.empty()) return Status(Code::kToolError, "QMP: QEMU closed the monitor (it exited?)");
      buf_ += more;
    }
  }

  int fd_;
  std::string buf_;
  std::deque<json> events_;
};

// The agent's channel: frames out, frames in through the decoder.
class AgentChannel {
 public:
  explicit AgentChannel(int fd) : fd_(fd) {}
  ~AgentChannel() { close(fd_); }

  Status Send(std::string_view bytes, Clock::time_point deadline) {
    return WriteAll(fd_, bytes, deadline, "the guest agent");
  }
  // The next frame; ERROR frames with id 0 (the agent skipping bytes) are recorded and skipped.
  StatusOr<proto::Frame> Receive(Clock::time_point deadline) {
    for (;;) {
      ASSIGN_OR_RETURN(std::optional<proto::Frame> f, dec_.Next());
      if (f) {
        if (f->type == proto::kError && f->id == 0) {
          // SECURITY: what a guest says is bounded here: the last kMaxComplaints, each cut to
          // kComplaintBytes (a guest streaming ERROR frames must not grow the runtime).
          const auto* m = f->Find(proto::kMessage);
          if (complaints_.size() >= kMaxComplaints) complaints_.erase(complaints_.begin());
          complaints_.push_back((m ? m->value : "(no message)").substr(0, kComplaintBytes));
          ++complaints_total_;
          continue;
        }
        return std::move(*f);
      }
      ASSIGN_OR_RETURN(std::string more, ReadSome(fd_, deadline, "the guest agent"));
      if (more.empty()) return Status(Code::kToolError, "the guest agent's channel closed (QEMU exited?)");
      dec_.Feed(more);
    }
  }
  const std::vector<std::string>& complaints() const { return complaints_; }

 private:
  int fd_;
  proto::Decoder dec_;
  static constexpr size_t kMaxComplaints = 64, kComplaintBytes = 256;
  std::vector<std::string> complaints_;
  uint64_t complaints_total_ = 0;
};

// ---------------------------------------------------------------------------------------------
// What the VM needs besides the spawner (microvm_spawn.cc).
namespace {
// The uid a confined QEMU runs as: one per VM of this process (4096 per process, cycling),
// in a range no account uses (2,000,000,000 .. 4,048,000,000).
uint32_t ConfinedUid() {
  static std::atomic<uint32_t> seq{0};
  return 2000000000u + (static_cast<uint32_t>(getpid()) % 500000u) * 4096u + (seq.fetch_add(1) % 4096u);
}


constexpr const char* kGuestMac = "52:54:00:12:34:56";
// Saving or loading a whole VM (its RAM) to or from a file.
constexpr std::chrono::milliseconds kStateFileTimeout{120000};

}  // namespace

// ---------------------------------------------------------------------------------------------
// QemuVm

QemuVm::~QemuVm() { (void)Destroy(); }

std::string QemuVm::Diagnostics() const {
  std::string s;
  std::string q = Tail(dir_ + "/qemu.log"), c = Tail(dir_ + "/console.log");
  if (!q.empty()) s += "; qemu: " + q;
  if (!c.empty()) s += "; guest console: " + c;
  return s;
}

Status QemuVm::Start(const VmConfig& cfg, const std::string& dir, const std::string& ram_path,
                     bool share_ram, std::vector<std::string> extra, std::vector<int> fds,
                     const PrepareOptions& popts) {
  cfg_ = cfg;
  dir_ = dir;
  auto t0 = Clock::now();
  uint32_t khz = cfg.tsc_khz;
  if (!khz) {
    ASSIGN_OR_RETURN(khz, HostTscKhz());
  }
  ASSIGN_OR_RETURN(int qmp_listen, ListenUnix(dir + "/qmp.sock"));
  auto agent_listen = ListenUnix(dir + "/agent.sock");
  if (!agent_listen.ok()) {
    close(qmp_listen);
    return agent_listen.status();
  }
  std::string mem = std::to_string(cfg.memory_mb) + "M";
  // fds in QEMU: 3 agent socket, 4 QMP socket, 5.. `fds`, then the tap if any.
  std::string netdev = "hubport,id=net0,hubid=0";
  if (popts.tap_fd >= 0) {
    netdev = fmt::format("tap,id=net0,fd={}", 5 + fds.size());
    fds.push_back(popts.tap_fd);
  }
  // The machine as measured in the architecture brief ("Backends on this machine"), plus the
  // agent's virtio-serial port, QMP, RAM in a file, and one virtio-net device. The golden VM
  // and every clone have the same devices in the same order (the migration stream requires
  // it); only the network device's backend differs: a tap given by the caller, or a hub port
  // on a hub with no other port (frames from the guest go nowhere, none ever arrive).
  std::vector<std::string> args = {
      cfg.qemu,
      "-M", "microvm,x-option-roms=off,isa-serial=on,pic=off,memory-backend=mem",
      "-accel", "tcg,thread=multi", "-cpu", "max", "-m", mem, "-smp", "1",
      "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
      "-serial", "file:" + dir + "/console.log",
      "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
      "-object", fmt::format("memory-backend-file,id=mem,size={},mem-path={},share={}", mem, ram_path,
                             share_ram ? "on" : "off"),
      "-device", "virtio-serial-device",
      "-chardev", "socket,id=agent,fd=3,server=on,wait=off",
      "-device", "virtserialport,chardev=agent,name=sbx.agent",
      "-netdev", netdev,
      "-device", std::string("virtio-net-device,netdev=net0,mac=") + kGuestMac,
      "-chardev", "socket,id=qmp,fd=4,server=on,wait=off",
      "-mon", "chardev=qmp,mode=control",
  };
  if (cfg.confine) {
    // SECURITY: QEMU is the boundary an escaped guest meets next, so it keeps nothing of root.
    // Everything it needs is opened before it drops (RAM file, kernel, logs; sockets, taps and
    // state files arrive as fds), then: a seccomp filter (no exec of helpers, no obsolete
    // calls, no scheduler/priority changes), a chroot into an empty directory (no host path
    // opens any more), and a uid of its own (no capability; another VM's QEMU is another user,
    // so it cannot be signalled or traced). QEMU 7.2 sets the filter before it drops, so
    // elevateprivileges=deny would kill its own setuid; after the drop to a non-zero uid with
    // every capability gone, set*uid can only lower privileges anyway.
    const std::string jail = dir + "/jail";
    if (mkdir(jail.c_str(), 0555) != 0 && errno != EEXIST) return ErrnoStatus("mkdir " + jail);
    const uint32_t id = ConfinedUid();
    for (std::string a : {std::string("-sandbox"), std::string("on,obsolete=deny,spawn=deny,resourcecontrol=deny"),
                          std::string("-chroot"), jail, std::string("-runas"), fmt::format("{}:{}", id, id)})
      args.push_back(std::move(a));
  }
  if (share_ram) {
    // Only the golden VM boots a kernel. Clones get no -kernel: their RAM already holds the
    // running kernel, and QEMU would otherwise read the 50 MB vmlinux into its fw_cfg for
    // nothing, at every clone.
    for (std::string a : {std::string("-kernel"), cfg.vmlinux, std::string("-initrd"), cfg.initramfs,
                          std::string("-append"),
                          fmt::format("console=ttyS0 quiet reboot=t panic=-1 tsc_early_khz={} tsc=reliable", khz)})
      args.push_back(std::move(a));
  }
  for (auto& e : extra) args.push_back(std::move(e));
  std::string log = dir + "/qemu.log";
  int logfd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  std::vector<int> src = {*agent_listen, qmp_listen};
  for (int f : fds) src.push_back(f);
  auto spawned = SpawnQemu(args, src, logfd, popts.cgroup_procs, cfg.confine);
  if (logfd >= 0) close(logfd);
  if (!spawned.ok()) {
    close(qmp_listen);
    close(*agent_listen);
    return spawned.status();
  }
  pid_t pid = *spawned;
  pid_ = pid;
  // Connect while we still hold the listening sockets: the connections wait in their backlog
  // until QEMU's main loop accepts them.
  auto qfd = ConnectUnix(dir + "/qmp.sock");
  auto afd = ConnectUnix(dir + "/agent.sock");
  close(qmp_listen);
  close(*agent_listen);
  if (!qfd.ok() || !afd.ok()) {
    if (qfd.ok()) close(*qfd);
    if (afd.ok()) close(*afd);
    return (qfd.ok() ? afd.status() : qfd.status()).WithContext("connecting to QEMU");
  }
  qmp_ = std::make_unique<Qmp>(*qfd);
  agent_ = std::make_unique<AgentChannel>(*afd);
  stages_.Add("spawn", MsSince(t0));
  Status hs = qmp_->Handshake(Clock::now() + cfg.control_timeout);
  if (!hs.ok()) {
    int st = 0;
    // If QEMU refused its arguments it has exited by now; say so with its own words.
    if (waitpid(pid_, &st, WNOHANG) == pid_) pid_ = -1;
    return Status(Code::kToolError, "QEMU did not start: " + hs.message() + Diagnostics());
  }
  stages_.Add("qmp", MsSince(t0));
  return Status::Ok();
}

StatusOr<proto::Frame> QemuVm::Request(uint8_t type, std::vector<proto::Field> fields,
                                       std::chrono::milliseconds timeout) {
  if (!alive() || !agent_) return FailedPrecondition("the VM is not running");
  uint32_t id = next_id_++;
  if (next_id_ == 0) next_id_ = 1;
  proto::Frame request{type, id, std::move(fields)};
  auto encoded = proto::Encode(request);
  // LC-8: a request may carry secrets (an exec's environment): no copy outlives its send.
  for (auto& field : request.fields) explicit_bzero(field.value.data(), field.value.size());
  if (!encoded.ok()) return encoded.status();
  std::string bytes = std::move(encoded).value();
  auto deadline = Clock::now() + timeout;
  Status sent = agent_->Send(bytes, deadline);
  explicit_bzero(bytes.data(), bytes.size());
  RETURN_IF_ERROR(sent);
  for (;;) {
    auto f = agent_->Receive(deadline);
    if (!f.ok()) return Status(f.status().code(), f.status().message() + Diagnostics());
    if (f->id != id) continue;  // a late answer to a request that timed out
    if (f->type == proto::kError) {
      const auto* m = f->Find(proto::kMessage);
      return Status(Code::kToolError, "guest agent: " + (m ? m->value : std::string("(no message)")));
    }
    return std::move(*f);
  }
}

Status QemuVm::Ping() {
  ASSIGN_OR_RETURN(proto::Frame f, Request(proto::kPing, {}, cfg_.control_timeout));
  if (f.type != proto::kPong) return Status(Code::kToolError, fmt::format("agent answered ping with 0x{:x}", f.type));
  return Status::Ok();
}

StatusOr<ExecResult> QemuVm::Exec(const ExecRequest& req) {
  if (!alive()) return FailedPrecondition("the VM is not running");
  ASSIGN_OR_RETURN(std::vector<proto::Field> fields, ExecRequestFields(req));
  size_t payload = 0;
  for (const auto& field : fields) payload += 6 + field.value.size();
  if (payload > proto::kMaxRequestPayload) {
    for (auto& field : fields) explicit_bzero(field.value.data(), field.value.size());
    return InvalidArgument(fmt::format("exec request of {} bytes, over the agent's {} byte limit",
                                       payload, proto::kMaxRequestPayload));
  }
  // The agent enforces the command's timeout (and the grace after it); the host waits that long
  // plus some slack, or without a timeout up to an hour.
  auto wait = req.timeout_ms ? std::chrono::milliseconds(req.timeout_ms) +
                                   std::chrono::milliseconds(req.term_grace_ms) + cfg_.exec_slack
                             : std::chrono::milliseconds(3600 * 1000);
  ASSIGN_OR_RETURN(proto::Frame f, Request(proto::kExec, std::move(fields), wait));
  return DecodeExecResult(f);
}

Status QemuVm::SyncClockAndReseed(double* clock_skew_ms) {
  std::string seed(64, '\0');
  size_t got = 0;
  while (got < seed.size()) {
    ssize_t r = getrandom(seed.data() + got, seed.size() - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus("getrandom");
    got += static_cast<size_t>(r);
  }
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t host_ns = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  ASSIGN_OR_RETURN(proto::Frame f,
                   Request(proto::kSetClock,
                           {proto::U64Field(proto::kRealtimeNs, host_ns), proto::StrField(proto::kSeed, seed)},
                           cfg_.control_timeout));
  if (f.type != proto::kClockSet)
    return Status(Code::kToolError, fmt::format("agent answered set-clock with 0x{:x}", f.type));
  auto before = proto::FieldU64(f, proto::kGuestNsBefore, 0);
  auto reseeded = proto::FieldFlag(f, proto::kReseeded);
  if (!before.ok() || !reseeded.ok()) return Status(Code::kToolError, "agent's clock-set reply is malformed");
  if (!*reseeded) return Status(Code::kToolError, "agent did not reseed its RNG");
  if (clock_skew_ms)
    *clock_skew_ms = (static_cast<double>(host_ns) - static_cast<double>(*before)) / 1e6;
  return Status::Ok();
}

Status QemuVm::Configure(const GuestConfig& gc) {
  if (!alive()) return FailedPrecondition("the VM is not running");
  ASSIGN_OR_RETURN(std::vector<proto::Field> fields, ConfigureFields(gc));
  ASSIGN_OR_RETURN(proto::Frame f, Request(proto::kConfigure, std::move(fields), cfg_.control_timeout));
  if (f.type != proto::kConfigured)
    return Status(Code::kToolError, fmt::format("agent answered configure with 0x{:x}", f.type));
  return Status::Ok();
}

Status QemuVm::SaveState(const std::string& path) {
  if (!alive() || !qmp_) return FailedPrecondition("the VM is not running");
  auto t0 = Clock::now();
  auto deadline = Clock::now() + std::max(cfg_.control_timeout, kStateFileTimeout);
  RETURN_IF_ERROR(Stop());
  // x-ignore-shared stays as the clone was started with it (on): a clone's RAM is private
  // (share=off), so it is not skipped, and the restoring QEMU has the capability on too (with
  // it, the stream carries each block's address, which both sides must agree to expect).
  RETURN_IF_ERROR(SetMigrationCapabilities(deadline).WithContext("saving the VM"));
  RETURN_IF_ERROR(MigrateToFile(path, deadline).WithContext("saving the VM"));
  stages_.Add("save", MsSince(t0));
  return Status::Ok();
}

Status QemuVm::SetMigrationCapabilities(Clock::time_point deadline) {
  return qmp_
      ->Command("migrate-set-capabilities",
                {{"capabilities", json::array({{{"capability", "x-ignore-shared"}, {"state", true}},
                                               {{"capability", "events"}, {"state", true}}})}},
                deadline)
      .status();
}

Status QemuVm::MigrateToFile(const std::string& path, Clock::time_point deadline) {
  int sfd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (sfd < 0) return ErrnoStatus("creating " + path);
  auto getfd = qmp_->Command("getfd", {{"fdname", "state"}}, deadline, sfd);
  close(sfd);
  if (!getfd.ok()) return getfd.status();
  RETURN_IF_ERROR(qmp_->Command("migrate", {{"uri", "fd:state"}}, deadline).status());
  RETURN_IF_ERROR(WaitMigrationEnd(deadline));
  // The MIGRATION event comes before QEMU's own clean-up of the migration (which closes its
  // copy of the file and moves the run state from finish-migrate to postmigrate; CI saw the
  // state read in between). The save is done when that has happened; QEMU sends no event for
  // it, so its status is asked until it changes.
  for (;;) {
    ASSIGN_OR_RETURN(std::string rs, RunState());
    if (rs != "finish-migrate") break;
    if (Clock::now() > deadline) return Status(Code::kToolError, "QEMU stayed in finish-migrate");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return Status::Ok();
}

Status QemuVm::WaitMigrationEnd(Clock::time_point deadline) {
  auto done = qmp_->WaitEvent(
      "MIGRATION",
      [](const json& d) {
        std::string s = d.value("status", "");
        return s == "completed" || s == "failed" || s == "cancelled";
      },
      deadline);
  if (!done.ok()) return Status(done.status().code(), done.status().message() + Diagnostics());
  std::string status = (*done)["data"].value("status", "");
  if (status != "completed") return Status(Code::kToolError, "migration " + status + Diagnostics());
  return Status::Ok();
}

Status QemuVm::Stop() {
  if (!alive()) return FailedPrecondition("the VM is not running");
  auto r = qmp_->Command("stop", json::object(), Clock::now() + cfg_.control_timeout);
  return r.ok() ? Status::Ok() : r.status();
}

Status QemuVm::Resume() {
  if (!alive()) return FailedPrecondition("the VM is not running");
  auto r = qmp_->Command("cont", json::object(), Clock::now() + cfg_.control_timeout);
  return r.ok() ? Status::Ok() : r.status();
}

StatusOr<std::string> QemuVm::RunState() {
  if (!alive()) return FailedPrecondition("the VM is not running");
  ASSIGN_OR_RETURN(json r, qmp_->Command("query-status", json::object(), Clock::now() + cfg_.control_timeout));
  return r.value("status", std::string("?"));
}

Status QemuVm::Destroy() {
  Status s;
  agent_.reset();
  qmp_.reset();
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int st = 0;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }
  if (remove_dir_ && !dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    if (ec) s = Internal("removing " + dir_ + ": " + ec.message());
    dir_.clear();
  }
  return s;
}

StatusOr<pid_t> QemuVm::QemuPid() const {
  if (!alive()) return FailedPrecondition("the VM is not running");
  if (!cfg_.confine) return pid_;
  std::ifstream f(fmt::format("/proc/{}/task/{}/children", pid_, pid_));
  pid_t child = 0;
  if (!(f >> child) || child <= 0) return NotFound(fmt::format("QEMU (the child of {})", pid_));
  return child;
}

StatusOr<ProcessMemory> QemuVm::Memory() const {
  if (!alive()) return FailedPrecondition("the VM is not running");
  ASSIGN_OR_RETURN(pid_t qemu, QemuPid());
  std::ifstream f(fmt::format("/proc/{}/smaps_rollup", qemu));
  if (!f) return ErrnoStatus("reading smaps_rollup");
  ProcessMemory m;
  std::string line;
  while (std::getline(f, line)) {  // the first line is the "[rollup]" mapping header
    std::istringstream in(line);
    std::string key;
    uint64_t v = 0;
    if (!(in >> key >> v)) continue;
    if (key == "Rss:") m.rss_kb = v;
    else if (key == "Pss:") m.pss_kb = v;
    else if (key == "Private_Dirty:") m.private_dirty_kb = v;
    else if (key == "Shared_Clean:") m.shared_clean_kb = v;
  }
  return m;
}

Status QemuVm::SendRawForTesting(std::string_view bytes) {
  if (!alive()) return FailedPrecondition("the VM is not running");
  return agent_->Send(bytes, Clock::now() + cfg_.control_timeout);
}

StatusOr<proto::Frame> QemuVm::RequestRawForTesting(uint8_t type, std::vector<proto::Field> fields) {
  return Request(type, std::move(fields), cfg_.control_timeout);
}

const std::vector<std::string>& QemuVm::agent_complaints() const {
  static const std::vector<std::string> kNone;
  return agent_ ? agent_->complaints() : kNone;
}

// ---------------------------------------------------------------------------------------------
// Template

namespace {
StatusOr<std::string> MakeDir(const std::string& root, const char* prefix) {
  std::string tmpl = root + "/" + prefix + "XXXXXX";
  if (!mkdtemp(tmpl.data())) return ErrnoStatus("mkdtemp " + tmpl);
  return tmpl;
}

Status CheckInputs(const VmConfig& cfg) {
  for (const auto* p : {&cfg.vmlinux, &cfg.initramfs})
    if (p->empty() || access(p->c_str(), R_OK) != 0) return NotFound("guest image file missing: " + *p);
  if (cfg.memory_mb < 128) return InvalidArgument("memory_mb under 128: the guest kernel panics");
  return Status::Ok();
}
}  // namespace

Template::~Template() {
  if (!keep_files_) Remove();
}

void Template::Remove() {
  if (dir_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  dir_.clear();
}

namespace {

uint64_t FileSize(const std::string& path) {
  struct stat st{};
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// What template.json records about the guest and the machine, for Open to compare.
json TemplateFacts(const VmConfig& cfg, uint32_t tsc_khz) {
  return json{{"machine_revision", kMachineRevision},
              {"protocol_version", proto::kVersion},
              {"qemu", cfg.qemu},
              {"memory_mb", cfg.memory_mb},
              {"tsc_khz", tsc_khz},
              {"vmlinux_bytes", FileSize(cfg.vmlinux)},
              {"initramfs_bytes", FileSize(cfg.initramfs)}};
}
}  // namespace

StatusOr<std::unique_ptr<Template>> Template::Boot(const VmConfig& cfg) {
  RETURN_IF_ERROR(CheckInputs(cfg));
  ASSIGN_OR_RETURN(std::string dir, MakeDir(cfg.state_root, "sbx-mvt-"));
  return Boot(cfg, dir);
}

StatusOr<std::unique_ptr<Template>> Template::Boot(const VmConfig& cfg, const std::string& dir) {
  RETURN_IF_ERROR(CheckInputs(cfg));
  if (dir.empty()) return InvalidArgument("Template::Boot: empty directory");
  auto t0 = Clock::now();
  std::unique_ptr<Template> t(new Template());
  t->cfg_ = cfg;
  {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Internal("creating " + dir + ": " + ec.message());
  }
  t->dir_ = dir;  // removed by the destructor from here on, whatever fails below
  // An earlier template here is incomplete from now on.
  for (const char* f : {"/template.json", "/golden.state", "/golden.ram", "/qmp.sock", "/agent.sock"})
    unlink((dir + f).c_str());
  uint32_t khz = cfg.tsc_khz;
  if (!khz) {
    ASSIGN_OR_RETURN(khz, HostTscKhz());
  }
  // The golden VM lives in the template's directory; its sockets and logs go with it.
  std::unique_ptr<QemuVm> golden(new QemuVm());
  golden->remove_dir_ = false;
  VmConfig gcfg = cfg;
  gcfg.tsc_khz = khz;  // the figure template.json records
  Status st = golden->Start(gcfg, t->dir_, t->ram_path(), /*share_ram=*/true, {}, {});
  if (!st.ok()) return st.WithContext("booting the golden VM");
  // READY: the agent is up and listening on its port.
  auto ready = golden->agent_->Receive(Clock::now() + cfg.boot_timeout);
  if (!ready.ok())
    return Status(ready.status().code(),
                  "golden VM: no READY from the guest agent: " + ready.status().message() + golden->Diagnostics());
  if (ready->type != proto::kReady)
    return Status(Code::kToolError, fmt::format("golden VM: first frame is type 0x{:x}, not READY", ready->type));
  if (const auto* k = ready->Find(proto::kKernel)) t->guest_kernel_ = k->value;
  if (const auto* c = ready->Find(proto::kCgroup)) t->guest_cgroup_ = c->value;
  if (const auto* v = ready->Find(proto::kAgentVersion)) t->agent_version_ = v->value;
  {
    auto root = proto::FieldFlag(*ready, proto::kHasRoot);
    if (!root.ok()) return Status(Code::kToolError, "golden VM: READY: " + root.status().message());
    t->has_root_ = *root;
  }
  t->stages_.Add("boot", MsSince(t0));
  RETURN_IF_ERROR(golden->Ping().WithContext("golden VM"));
  // One command and one set-clock before the save, so that what every clone's first command
  // needs in the guest (busybox's pages, the cgroup files, dentries) is already in the RAM file.
  {
    ExecRequest warm;
    warm.argv = {"echo", "warm"};
    auto w = golden->Exec(warm);
    if (!w.ok()) return w.status().WithContext("golden VM warm-up command");
    if (w->stdout_data != "warm\n" || w->exit_code.value_or(-1) != 0)
      return Status(Code::kToolError, "golden VM warm-up command: got \"" + w->stdout_data + "\"" + golden->Diagnostics());
    RETURN_IF_ERROR(golden->SyncClockAndReseed().WithContext("golden VM"));
  }
  t->stages_.Add("warm", MsSince(t0));
  // Pause, then save the device state; RAM stays in the shared file (x-ignore-shared).
  auto t1 = Clock::now();
  auto deadline = Clock::now() + cfg.control_timeout;
  RETURN_IF_ERROR(golden->Stop().WithContext("golden VM"));
  RETURN_IF_ERROR(golden->SetMigrationCapabilities(deadline).WithContext("golden VM"));
  RETURN_IF_ERROR(golden->MigrateToFile(t->state_path(), deadline).WithContext("saving the golden VM"));
  t->stages_.Add("save", MsSince(t1));
  // The golden QEMU must never run again: the RAM file is now the clones' base.
  RETURN_IF_ERROR(golden->Destroy());
  for (const char* f : {"/qmp.sock", "/agent.sock"}) unlink((t->dir_ + f).c_str());
  // template.json last, by rename: a directory that has it holds a complete template.
  json facts = TemplateFacts(cfg, khz);
  facts["guest_kernel"] = t->guest_kernel_;
  facts["guest_cgroup"] = t->guest_cgroup_;
  facts["agent_version"] = t->agent_version_;
  facts["has_root"] = t->has_root_;
  {
    std::string tmp = t->json_path() + ".tmp";
    std::ofstream out(tmp, std::ios::trunc);
    out << facts.dump(2) << "\n";
    out.close();
    if (!out) return Internal("writing " + tmp);
    if (rename(tmp.c_str(), t->json_path().c_str()) < 0) return ErrnoStatus("renaming " + tmp);
  }
  t->stages_.Add("total", MsSince(t0));
  return t;
}

StatusOr<std::unique_ptr<Template>> Template::Open(const VmConfig& cfg, const std::string& dir) {
  RETURN_IF_ERROR(CheckInputs(cfg));
  std::unique_ptr<Template> t(new Template());
  t->cfg_ = cfg;
  t->dir_ = dir;
  t->keep_files_ = true;  // until it is adopted: a failed Open never removes someone's files
  std::ifstream in(t->json_path());
  if (!in) return NotFound("no template in " + dir + " (template.json missing)");
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return FailedPrecondition(t->json_path() + " is not a JSON object");
  uint32_t khz = cfg.tsc_khz ? cfg.tsc_khz : j.value("tsc_khz", 0u);  // 0: the host's, as recorded
  json want = TemplateFacts(cfg, khz);
  for (auto& [k, v] : want.items()) {
    if (!j.contains(k) || j[k] != v)
      return FailedPrecondition(fmt::format("template in {} does not match: {} is {}, want {}", dir, k,
                                            j.contains(k) ? j[k].dump() : "missing", v.dump()));
  }
  if (FileSize(t->ram_path()) != static_cast<uint64_t>(cfg.memory_mb) << 20)
    return FailedPrecondition(fmt::format("template in {}: golden.ram missing or not {} MiB", dir, cfg.memory_mb));
  if (FileSize(t->state_path()) == 0) return FailedPrecondition("template in " + dir + ": golden.state missing or empty");
  t->guest_kernel_ = j.value("guest_kernel", "");
  t->guest_cgroup_ = j.value("guest_cgroup", "");
  t->agent_version_ = j.value("agent_version", "");
  t->has_root_ = j.value("has_root", false);
  t->keep_files_ = false;
  return t;
}

// ---------------------------------------------------------------------------------------------
// Vm

StatusOr<std::unique_ptr<Vm>> Vm::Prepare(const Template& t, const PrepareOptions& popts) {
  if (t.dir().empty()) return FailedPrecondition("the template was removed");
  auto t0 = Clock::now();
  const VmConfig& cfg = t.config();
  std::unique_ptr<Vm> vm(new Vm());
  ASSIGN_OR_RETURN(std::string dir, MakeDir(cfg.state_root, "sbx-mv-"));
  vm->dir_ = dir;  // removed by the destructor from here on, whatever fails below
  // Same machine as the golden VM, RAM mapped privately from its file, waiting for a state.
  Status st = vm->Start(cfg, dir, t.ram_path(), /*share_ram=*/false, {"-S", "-incoming", "defer"}, {}, popts);
  if (!st.ok()) return st.WithContext("starting a clone");
  RETURN_IF_ERROR(vm->SetMigrationCapabilities(Clock::now() + cfg.control_timeout).WithContext("clone"));
  vm->template_dir_ = t.dir();
  vm->stages_.Add("prepared", MsSince(t0));
  return vm;
}

Status Vm::Restore(const Template& t, Options opts) {
  if (!alive() || !qmp_) return FailedPrecondition("the clone's QEMU is not running");
  if (restored_) return FailedPrecondition("this clone was already restored");
  if (t.dir().empty() || t.dir() != template_dir_)
    return FailedPrecondition("the clone was prepared for another template (or it was removed)");
  return LoadState(t.state_path(), opts, t.config().control_timeout);
}

Status Vm::LoadState(const std::string& path, Options opts, std::chrono::milliseconds timeout) {
  auto t0 = Clock::now();
  auto deadline = Clock::now() + timeout;
  int sfd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (sfd < 0) return ErrnoStatus("opening the saved state " + path);
  auto getfd = qmp_->Command("getfd", {{"fdname", "state"}}, deadline, sfd);
  close(sfd);
  if (!getfd.ok()) return getfd.status().WithContext("clone");
  auto inc = qmp_->Command("migrate-incoming", {{"uri", "fd:state"}}, deadline);
  if (!inc.ok()) return inc.status().WithContext("clone");
  // `cont` only after the load completed: a cont during the load is overridden by the saved
  // run state (the golden VM was paused when saved) and the clone would stay paused.
  RETURN_IF_ERROR(WaitMigrationEnd(deadline).WithContext("restoring the clone"));
  restored_ = true;
  stages_.Add("restore", MsSince(t0));
  RETURN_IF_ERROR(Resume().WithContext("clone"));
  stages_.Add("cont", MsSince(t0));
  if (opts.reseed) {
    RETURN_IF_ERROR(SyncClockAndReseed(&clock_skew_ms_).WithContext("clone"));
  } else {
    RETURN_IF_ERROR(Ping().WithContext("clone"));
  }
  stages_.Add("clock", MsSince(t0));
  return Status::Ok();
}

StatusOr<std::unique_ptr<Vm>> Vm::Clone(const Template& t, Options opts, const PrepareOptions& popts) {
  auto t0 = Clock::now();
  ASSIGN_OR_RETURN(std::unique_ptr<Vm> vm, Prepare(t, popts));
  RETURN_IF_ERROR(vm->Restore(t, opts));
  vm->stages_.Add("total", MsSince(t0));
  return vm;
}

// ---- stubs (phase 2, being implemented) ----
StatusOr<std::unique_ptr<Vm>> Vm::RestoreFromState(const Template& t, const std::string& path,
                                                    const PrepareOptions& popts) {
  auto t0 = Clock::now();
  if (access(path.c_str(), R_OK) != 0) return ErrnoStatus("saved state " + path);
  // The same machine as every clone (RAM mapped privately from the template's file, x-ignore-
  // shared on as at the save); the stream holds all of the RAM the saved clone had.
  ASSIGN_OR_RETURN(std::unique_ptr<Vm> vm, Prepare(t, popts));
  RETURN_IF_ERROR(vm->LoadState(path, Options{}, std::max(t.config().control_timeout, kStateFileTimeout))
                      .WithContext("restoring from " + path));
  vm->stages_.Add("total", MsSince(t0));
  return vm;
}

}  // namespace sbx::microvm
