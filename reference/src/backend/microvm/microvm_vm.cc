// The microVM layer: see microvm_vm.h and docs/microvm.md.
#include "backend/microvm/microvm_vm.h"

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

#include "backend/microvm/microvm_channels.h"
#include "backend/microvm/microvm_spawn.h"
#include "host/image.h"

namespace sbx::microvm {
namespace {
using json = nlohmann::json;
}  // namespace

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
// What the VM needs besides the spawner (microvm_spawn.cc).
namespace {
// The uid a confined QEMU runs as: one per VM of this process (4096 per process, cycling),
// in a range no account uses (2,000,000,000 .. 4,048,000,000).
uint32_t ConfinedUid() {
  static std::atomic<uint32_t> seq{0};
  return 2000000000u + (static_cast<uint32_t>(getpid()) % 500000u) * 4096u +
         (seq.fetch_add(1) % 4096u);
}

constexpr const char* kGuestMac = "52:54:00:12:34:56";

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
      "-M",
      "microvm,x-option-roms=off,isa-serial=on,pic=off,memory-backend=mem",
      "-accel",
      "tcg,thread=multi",
      "-cpu",
      "max",
      "-m",
      mem,
      "-smp",
      "1",
      "-nodefaults",
      "-no-user-config",
      "-display",
      "none",
      "-no-reboot",
      "-serial",
      "file:" + dir + "/console.log",
      "-device",
      "isa-debug-exit,iobase=0xf4,iosize=0x04",
      "-object",
      fmt::format("memory-backend-file,id=mem,size={},mem-path={},share={}", mem, ram_path,
                  share_ram ? "on" : "off"),
      "-device",
      "virtio-serial-device",
      "-chardev",
      "socket,id=agent,fd=3,server=on,wait=off",
      "-device",
      "virtserialport,chardev=agent,name=sbx.agent",
      "-netdev",
      netdev,
      "-device",
      std::string("virtio-net-device,netdev=net0,mac=") + kGuestMac,
      "-chardev",
      "socket,id=qmp,fd=4,server=on,wait=off",
      "-mon",
      "chardev=qmp,mode=control",
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
    for (std::string a :
         {std::string("-sandbox"), std::string("on,obsolete=deny,spawn=deny,resourcecontrol=deny"),
          std::string("-chroot"), jail, std::string("-runas"), fmt::format("{}:{}", id, id)})
      args.push_back(std::move(a));
  }
  if (share_ram) {
    // Only the golden VM boots a kernel. Clones get no -kernel: their RAM already holds the
    // running kernel, and QEMU would otherwise read the 50 MB vmlinux into its fw_cfg for
    // nothing, at every clone.
    for (std::string a :
         {std::string("-kernel"), cfg.vmlinux, std::string("-initrd"), cfg.initramfs,
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
      return Status(Code::kToolError,
                    "guest agent: " + (m ? m->value : std::string("(no message)")));
    }
    return std::move(*f);
  }
}

Status QemuVm::Ping() {
  ASSIGN_OR_RETURN(proto::Frame f, Request(proto::kPing, {}, cfg_.control_timeout));
  if (f.type != proto::kPong)
    return Status(Code::kToolError, fmt::format("agent answered ping with 0x{:x}", f.type));
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
  uint64_t host_ns =
      static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  ASSIGN_OR_RETURN(proto::Frame f, Request(proto::kSetClock,
                                           {proto::U64Field(proto::kRealtimeNs, host_ns),
                                            proto::StrField(proto::kSeed, seed)},
                                           cfg_.control_timeout));
  if (f.type != proto::kClockSet)
    return Status(Code::kToolError, fmt::format("agent answered set-clock with 0x{:x}", f.type));
  auto before = proto::FieldU64(f, proto::kGuestNsBefore, 0);
  auto reseeded = proto::FieldFlag(f, proto::kReseeded);
  if (!before.ok() || !reseeded.ok())
    return Status(Code::kToolError, "agent's clock-set reply is malformed");
  if (!*reseeded) return Status(Code::kToolError, "agent did not reseed its RNG");
  if (clock_skew_ms)
    *clock_skew_ms = (static_cast<double>(host_ns) - static_cast<double>(*before)) / 1e6;
  return Status::Ok();
}

Status QemuVm::Configure(const GuestConfig& gc) {
  if (!alive()) return FailedPrecondition("the VM is not running");
  ASSIGN_OR_RETURN(std::vector<proto::Field> fields, ConfigureFields(gc));
  ASSIGN_OR_RETURN(proto::Frame f,
                   Request(proto::kConfigure, std::move(fields), cfg_.control_timeout));
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
  ASSIGN_OR_RETURN(
      json r, qmp_->Command("query-status", json::object(), Clock::now() + cfg_.control_timeout));
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
    if (key == "Rss:")
      m.rss_kb = v;
    else if (key == "Pss:")
      m.pss_kb = v;
    else if (key == "Private_Dirty:")
      m.private_dirty_kb = v;
    else if (key == "Shared_Clean:")
      m.shared_clean_kb = v;
  }
  return m;
}

Status QemuVm::SendRawForTesting(std::string_view bytes) {
  if (!alive()) return FailedPrecondition("the VM is not running");
  return agent_->Send(bytes, Clock::now() + cfg_.control_timeout);
}

StatusOr<proto::Frame> QemuVm::RequestRawForTesting(uint8_t type,
                                                    std::vector<proto::Field> fields) {
  return Request(type, std::move(fields), cfg_.control_timeout);
}

const std::vector<std::string>& QemuVm::agent_complaints() const {
  static const std::vector<std::string> kNone;
  return agent_ ? agent_->complaints() : kNone;
}

}  // namespace sbx::microvm
