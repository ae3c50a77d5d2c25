// The microVM layer (docs/microvm.md): QEMU `-M microvm` under TCG, a golden VM booted once and
// saved as a template, and copy-on-write clones restored from it, each driven through the guest
// agent (reference/src/backend/microvm/guest/) over a virtio-serial port.
//
// The backend (microvm_backend.cc, microvm_sandbox.h) holds a Template per guest image and makes a
// Vm per sandbox (and per revert). The layer's files: microvm_protocol.cc (the agent's wire
// protocol; its numbers in microvm_agent_protocol.h, shared with the agent),
// microvm_channels.{h,cc} (QMP and the agent's socket), microvm_spawn.{h,cc} (QEMU's start),
// microvm_vm.cc (QemuVm), microvm_template.cc (Template and Vm).
//
// Ownership: every QEMU process has exactly one owner, the Template or Vm object that started it;
// its destructor kills the process, reaps it and removes the state directory. Every QEMU is
// forked by one long-lived process-wide spawner thread and gets PR_SET_PDEATHSIG(SIGKILL), so it
// dies with the process if the owner never runs its destructor (a crash, an abort in a test).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/microvm/microvm_agent_protocol.h"
#include "sbx/status.h"

namespace sbx::microvm {

// ---- the agent protocol, version 2 (docs/microvm.md "Agent protocol") ----
namespace proto {

// The numbers (magic, version, types, tags) are in microvm_agent_protocol.h, shared with the
// guest agent.

struct Field {
  uint16_t tag = 0;
  std::string value;
};
struct Frame {
  uint8_t type = 0;
  uint32_t id = 0;
  std::vector<Field> fields;

  const Field* Find(uint16_t tag) const;
};

Field StrField(uint16_t tag, std::string_view v);
Field U8Field(uint16_t tag, uint8_t v);
Field U32Field(uint16_t tag, uint32_t v);
Field U64Field(uint16_t tag, uint64_t v);

// Header + fields. Fails (kInvalidArgument) only if the payload would not fit a u32.
StatusOr<std::string> Encode(const Frame& frame);

// Incremental decoder of what the guest sends. A malformed frame (bad magic, version, flags,
// a payload over kMaxReplyPayload, a field running past the payload) is an error that names the
// defect; after one, the stream is out of step and every later Next() returns the same error.
class Decoder {
 public:
  explicit Decoder(uint32_t max_payload = kMaxReplyPayload) : max_payload_(max_payload) {}
  void Feed(std::string_view bytes) { buf_.append(bytes.data(), bytes.size()); }
  // A complete frame, std::nullopt when more bytes are needed, or the error.
  StatusOr<std::optional<Frame>> Next();
  size_t buffered() const { return buf_.size(); }

 private:
  uint32_t max_payload_;
  std::string buf_;
  Status broken_;
};

// Typed readers of one field: kInvalidArgument naming the tag when it has the wrong size.
StatusOr<uint64_t> FieldU64(const Frame& f, uint16_t tag, uint64_t dflt);
StatusOr<uint32_t> FieldU32(const Frame& f, uint16_t tag, uint32_t dflt);
StatusOr<bool> FieldFlag(const Frame& f, uint16_t tag);

}  // namespace proto

// ---- commands ----
struct ExecRequest {
  std::vector<std::string> argv;     // or:
  std::optional<std::string> shell;  // a line for `/bin/sh -c` (busybox)
  std::vector<std::string> env;      // NAME=VALUE; empty: PATH and HOME only
  std::string cwd;                   // empty: /
  std::string stdin_data;
  uint32_t timeout_ms = 0;    // 0: none; the agent kills the command's cgroup at the deadline
  uint64_t memory_limit = 0;  // bytes, for the command's guest cgroup; 0: none
  uint32_t output_limit = 0;  // per stream; 0: the agent's default (1 MiB)
  // v2 (each sent only when non-empty / non-zero)
  std::string root;            // chroot here ("/sandbox") in new PID + mount namespaces
  uint32_t uid = 0, gid = 0;   // setgid/setgroups()/setuid before exec
  uint32_t pids_limit = 0;     // pids.max of the command's guest cgroup; 0: none
  uint32_t nofile = 0;         // RLIMIT_NOFILE soft+hard; 0: leave
  uint32_t term_grace_ms = 0;  // at the deadline: SIGTERM, cgroup.kill this much later
};

struct ExecResult {
  std::optional<int> exit_code;  // one of these two is set
  std::optional<int> signal;
  std::string stdout_data, stderr_data;
  bool stdout_truncated = false, stderr_truncated = false;
  uint64_t cpu_usec = 0;
  uint64_t peak_memory = 0;  // bytes (memory.peak of the command's cgroup)
  bool oom = false;          // the guest cgroup's memory.events oom_kill > 0
  bool timed_out = false;
  uint64_t wall_usec = 0;   // in the guest
  std::string start_error;  // the command could not be started (then exit_code is 127)
  // With a root: the least space left on its writable mounts (work, tmp, var/tmp) after the
  // command, and what they hold together; -1 / 0 when the agent did not say.
  int64_t disk_free = -1;
  uint64_t disk_used = 0;
};

StatusOr<ExecResult> DecodeExecResult(const proto::Frame& f);
StatusOr<std::string> EncodeExecRequest(uint32_t id, const ExecRequest& req);
// The fields of an EXEC request (what EncodeExecRequest frames), validated the same way.
StatusOr<std::vector<proto::Field>> ExecRequestFields(const ExecRequest& req);

// The guest's per-clone set-up (CONFIGURE), sent once after the clock, before the first EXEC.
struct GuestConfig {
  std::string address;  // dotted IPv4 for eth0; empty: eth0 stays down
  uint32_t prefix = 32;
  std::string gateway;      // dotted IPv4; default route via it (needs address)
  uint64_t disk_bytes = 0;  // size= of the root's tmpfs mounts (work, tmp, var/tmp); 0: leave
  std::string hostname;     // empty: leave
};
// The fields of a CONFIGURE request; kInvalidArgument for an address that is not dotted IPv4,
// a prefix over 32, a gateway without an address.
StatusOr<std::vector<proto::Field>> ConfigureFields(const GuestConfig& cfg);

// Bumped whenever the QEMU command line (devices, their order, confinement) changes: a template
// saved by an older build cannot be loaded by clones of this one.
inline constexpr int kMachineRevision = 3;

// ---- configuration ----
struct VmConfig {
  std::string qemu = "qemu-system-x86_64";
  std::string vmlinux;    // uncompressed ELF kernel (the microvm-guest image's /vmlinux)
  std::string initramfs;  // newc archive with the agent as /init
  std::string state_root =
      "/tmp";                // per-VM directories are made here (keep it short: socket paths)
  uint32_t memory_mb = 256;  // under 128 the guest panics
  uint32_t tsc_khz = 0;      // 0: the host's, from /proc/cpuinfo
  std::chrono::milliseconds boot_timeout{60000};
  std::chrono::milliseconds control_timeout{10000};  // QMP commands, migration, ping, set-clock
  std::chrono::milliseconds exec_slack{15000};       // added to an exec's own timeout on the host
  // QEMU under a seccomp filter, chrooted into an empty directory, as a uid of its own
  // (QemuVm::Start). Off only in tests that show what it changes.
  bool confine = true;
};

// The guest image from the image store (docs/images.md): ref "microvm-guest" unpacked into
// cache_dir; fills vmlinux and initramfs.
StatusOr<VmConfig> ConfigFromImageStore(const std::string& store_dir, const std::string& cache_dir,
                                        const std::string& ref = "microvm-guest");

// The host's TSC frequency in kHz (the "cpu MHz" of /proc/cpuinfo), for tsc_early_khz=.
StatusOr<uint32_t> HostTscKhz();

// Stage timings, in the order they happened.
struct Stages {
  std::vector<std::pair<std::string, double>> ms;
  void Add(std::string name, double v) { ms.emplace_back(std::move(name), v); }
  double Get(std::string_view name) const;
  std::string ToString() const;
};

// Memory of one QEMU process (/proc/PID/smaps_rollup), kB.
struct ProcessMemory {
  uint64_t rss_kb = 0, pss_kb = 0, private_dirty_kb = 0, shared_clean_kb = 0;
};

class Qmp;
class AgentChannel;

// How a clone's QEMU is started (Vm::Prepare / Clone / RestoreFromState).
struct PrepareOptions {
  // An open tap fd (IFF_TAP|IFF_NO_PI, made by the caller; QEMU gets a dup, the caller keeps
  // its fd) as the backend of the guest's virtio-net device. -1: a dead-end backend (a hub
  // port with nothing else on the hub: frames go nowhere).
  int tap_fd = -1;
  // cgroup.procs (or v1 `tasks`: host::Cgroup::JoinFiles) files the QEMU child writes "0" to
  // before exec, so all of QEMU (and all the memory it ever touches) is in those cgroups from
  // its first instruction. A failure: the child exits 127, Prepare names the file and errno.
  std::vector<std::string> cgroup_procs;
};

// A running QEMU and the two channels to it; shared by the template's golden VM and clones.
class QemuVm {
 public:
  ~QemuVm();
  QemuVm(const QemuVm&) = delete;
  QemuVm& operator=(const QemuVm&) = delete;

  // The process the VM's life hangs on: QEMU, or (confined) the keeper, the init of QEMU's PID
  // namespace: killing it kills QEMU (SpawnQemu).
  pid_t pid() const { return pid_; }
  // QEMU's own host pid (the keeper's child when confined).
  StatusOr<pid_t> QemuPid() const;
  const std::string& dir() const { return dir_; }
  const Stages& stages() const { return stages_; }
  bool alive() const { return pid_ > 0; }

  Status Ping();
  StatusOr<ExecResult> Exec(const ExecRequest& req);
  // Sets the guest's CLOCK_REALTIME to the host's and reseeds its RNG with 64 host bytes
  // (getrandom); `clock_skew_ms` gets how far the guest clock was off before.
  Status SyncClockAndReseed(double* clock_skew_ms = nullptr);
  // CONFIGURE: eth0 address and routes, tmpfs sizes, hostname (see GuestConfig).
  Status Configure(const GuestConfig& cfg);
  // Suspend to a file: stop, then migrate the whole VM (device state and the RAM pages it has;
  // a clone's RAM is private, so none of it is skipped) into `path`. The VM stays paused;
  // Destroy it afterwards. Restore with Vm::RestoreFromState.
  Status SaveState(const std::string& path);
  Status Stop();                     // QMP stop: vCPUs halted, the guest sees no time pass
  Status Resume();                   // QMP cont
  StatusOr<std::string> RunState();  // QMP query-status: "running", "paused", ...
  // Kills QEMU, reaps it, removes the state directory. Idempotent; also run by the destructor.
  Status Destroy();
  StatusOr<ProcessMemory> Memory() const;

  // Tests: raw bytes into the agent's channel, a raw request, and the agent's unsolicited
  // complaints (ERROR frames with id 0, sent when it had to skip bytes that were not a frame).
  Status SendRawForTesting(std::string_view bytes);
  StatusOr<proto::Frame> RequestRawForTesting(uint8_t type, std::vector<proto::Field> fields);
  const std::vector<std::string>& agent_complaints() const;

 protected:
  QemuVm() = default;
  // Starts QEMU with the machine arguments plus `extra`; fds[i] becomes fd 5+i in QEMU.
  // The network device's backend is the tap in `popts` (or the dead end); QEMU joins
  // popts.cgroup_procs before exec.
  Status Start(const VmConfig& cfg, const std::string& dir, const std::string& ram_path,
               bool share_ram, std::vector<std::string> extra, std::vector<int> fds,
               const PrepareOptions& popts = {});
  StatusOr<proto::Frame> Request(uint8_t type, std::vector<proto::Field> fields,
                                 std::chrono::milliseconds timeout);
  std::string Diagnostics() const;  // tails of qemu.log and console.log

  // QEMU's migration stream to or from a file, the one sequence every save and load uses.
  // Capabilities x-ignore-shared (RAM in a shared file is not in the stream; both sides must
  // agree) and events (the MIGRATION event).
  Status SetMigrationCapabilities(std::chrono::steady_clock::time_point deadline);
  // The paused VM's state into `path`; returns when QEMU has finished with the file.
  Status MigrateToFile(const std::string& path, std::chrono::steady_clock::time_point deadline);
  // Waits for the MIGRATION event that ends a migration; an error unless it completed.
  Status WaitMigrationEnd(std::chrono::steady_clock::time_point deadline);

  VmConfig cfg_;
  std::string dir_;
  pid_t pid_ = -1;
  uint32_t next_id_ = 1;
  std::unique_ptr<Qmp> qmp_;
  std::unique_ptr<AgentChannel> agent_;
  Stages stages_;
  bool remove_dir_ = true;

  friend class Template;
};

// The golden VM, booted once and saved: RAM in `ram_path()` (a shared file, written by the golden
// VM and never again) and the device state in `state_path()` (x-ignore-shared migration stream).
// The golden QEMU is gone once Boot returns; clones map the RAM file privately.
class Template {
 public:
  // Boots into a fresh directory made under cfg.state_root.
  static StatusOr<std::unique_ptr<Template>> Boot(const VmConfig& cfg);
  // Boots into `dir` (created if missing; files of an earlier template there are replaced).
  // template.json is written last (by rename), so a directory that has it is complete.
  static StatusOr<std::unique_ptr<Template>> Boot(const VmConfig& cfg, const std::string& dir);
  // Adopts a directory made by an earlier Boot (maybe by another process) without booting:
  // golden.ram, golden.state and template.json must be there, and template.json must match
  // `cfg` (memory_mb, tsc_khz, sizes of vmlinux and initramfs) or kFailedPrecondition.
  // Like a booted one, it removes its files when destroyed unless set_keep_files(true).
  static StatusOr<std::unique_ptr<Template>> Open(const VmConfig& cfg, const std::string& dir);
  ~Template();
  Template(const Template&) = delete;
  Template& operator=(const Template&) = delete;

  const VmConfig& config() const { return cfg_; }
  const std::string& dir() const { return dir_; }
  std::string ram_path() const { return dir_ + "/golden.ram"; }
  std::string state_path() const { return dir_ + "/golden.state"; }
  const Stages& stages() const { return stages_; }
  const std::string& guest_kernel() const { return guest_kernel_; }
  const std::string& guest_cgroup() const { return guest_cgroup_; }
  const std::string& agent_version() const { return agent_version_; }
  // The guest prepared /sandbox at boot (READY's kHasRoot).
  bool has_root() const { return has_root_; }
  std::string json_path() const { return dir_ + "/template.json"; }
  // true: the destructor leaves the files (a shared cache); Remove() still removes them.
  void set_keep_files(bool keep) { keep_files_ = keep; }
  bool keep_files() const { return keep_files_; }
  // Removes the template's files (the clones keep their mapping of the RAM file).
  void Remove();

 private:
  Template() = default;
  VmConfig cfg_;
  std::string dir_;
  Stages stages_;
  std::string guest_kernel_, guest_cgroup_, agent_version_;
  bool has_root_ = false;
  bool keep_files_ = false;
};

// A clone: a new QEMU restored from the template, RAM copy-on-write from the golden file.
class Vm : public QemuVm {
 public:
  struct Options {
    bool reseed = true;  // false only in tests that show why it is needed
  };
  // Prepare + Restore. Stages (ms since the step began): spawn, qmp, prepared; restore, cont,
  // clock; total.
  static StatusOr<std::unique_ptr<Vm>> Clone(const Template& t, Options opts,
                                             const PrepareOptions& popts = {});
  static StatusOr<std::unique_ptr<Vm>> Clone(const Template& t) { return Clone(t, Options{}); }
  // The half of a clone that does not need the saved state: QEMU started with the template's RAM
  // file mapped privately, waiting (-incoming defer). A pool can keep some of these ready.
  static StatusOr<std::unique_ptr<Vm>> Prepare(const Template& t, const PrepareOptions& popts = {});
  // A new QEMU (same machine as the template's clones) loading a file written by
  // QemuVm::SaveState, then `cont`, then clock + reseed. No Restore afterwards.
  static StatusOr<std::unique_ptr<Vm>> RestoreFromState(const Template& t, const std::string& path,
                                                        const PrepareOptions& popts = {});
  // The other half: load the template's state (x-ignore-shared), `cont` once loaded, then set
  // the guest clock and reseed its RNG. Once per Vm.
  Status Restore(const Template& t, Options opts);
  Status Restore(const Template& t) { return Restore(t, Options{}); }
  double clock_skew_ms() const { return clock_skew_ms_; }

 private:
  Vm() = default;
  // Loads a migration stream from `path` (-incoming defer was given), conts, sets the clock.
  Status LoadState(const std::string& path, Options opts, std::chrono::milliseconds timeout);
  double clock_skew_ms_ = 0;
  std::string template_dir_;
  bool restored_ = false;
};

}  // namespace sbx::microvm
