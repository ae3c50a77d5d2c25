// Over 600 lines: the microvm Backend, its Sandbox and the spare clones they share. The VM layer
// is already apart (microvm_vm.h); splitting the sandbox from the backend is open in issue 36.
// The microvm backend (BK-5, PROD-4, NFR-2; docs/microvm.md): a sandbox is a QEMU `-M microvm`
// guest (TCG here: no /dev/kvm), a copy-on-write clone of a golden VM booted once per tool image.
//
//  * Guest: Debian's cloud kernel, an initramfs holding our agent as PID 1 (the microvm-guest
//    image) with the tool image's rootfs appended under /sandbox. Commands run there as uid
//    1000, chrooted, in their own PID and mount namespaces, in a guest cgroup (memory, pids),
//    /bin /usr /etc read-only, /work /tmp /var/tmp tmpfs of the disk quota.
//  * Golden snapshot (SNAP-1): the template, booted once and kept on disk under
//    <image cache>/microvm-templates/<key> (key: guest image, tool image, QEMU, memory, TSC), so a
//    runtime that starts later opens it instead of booting (3-4 s). Every sandbox and every
//    revert is a fresh clone restored from it (SNAP-2); a pool of spares, each restored, with
//    its clock set, its RNG reseeded and one command already run (so TCG has translated the
//    command path once), is refilled in the background: create and revert take one.
//  * Limits: the command's guest cgroup has the memory (OOM there is resource_exceeded and ends
//    the sandbox, RES-8) and pids limits; RLIMIT_NOFILE; the timeout is the agent's SIGTERM,
//    grace, kill; disk = the tmpfs sizes. QEMU itself runs inside a HOST cgroup (made below
//    the runtime's own) with the CPU quota (the vCPU thread is throttled: RES-1), a memory
//    limit of the request plus QEMU's own overhead and pids: whatever the guest does, the VM
//    cannot take more (a breach there ends the sandbox too).
//  * Egress: the sandbox's network namespace from the egress service, its veth bridged with the
//    VM's tap (microvm_net.h); the guest holds the sandbox's address: gateway, DNS allow list
//    and 403 apply unchanged. Without egress rules the guest's eth0 stays down (SNAP-5).
//  * Suspend: the VM's whole state into a file (QEMU migration), QEMU ended; resume restores a
//    new QEMU from it (SNAP-3). The file becomes the latest durable snapshot.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "backend/backend.h"
#include "backend/common/command_watch.h"
#include "backend/common/init_client.h"
#include "backend/common/limits.h"
#include "backend/common/probe_cache.h"
#include "backend/common/spawn.h"
#include "backend/microvm/microvm_cpio.h"
#include "backend/microvm/microvm_net.h"
#include "backend/microvm/microvm_vm.h"
#include "host/cgroup.h"
#include "host/image.h"
#include "host/sha256.h"
#include "net/egress.h"

namespace sbx::backend {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

constexpr const char* kGuestRef = "microvm-guest";
constexpr const char* kRoot = "/sandbox";
constexpr uint32_t kSandboxUid = 1000;
// Guest RAM. Clones map the golden RAM privately, so pages a guest never touches cost nothing;
// the size only bounds what a request may ask (the guest's kernel, agent and the image in
// RAM need the rest).
constexpr uint32_t kGuestMemoryMb = 1024;
constexpr int64_t kGuestReserveBytes = 160ll << 20;
constexpr int64_t kMaxMemoryRequest = (int64_t{kGuestMemoryMb} << 20) - kGuestReserveBytes;
// QEMU's own memory beside the guest's RAM (the TCG code buffer, its heap, libraries: about
// 70 MiB per clone measured). The host cgroup's limit is the whole guest's RAM plus this: a
// clone's RAM is a private copy-on-write mapping without a balloon, so every guest page ever
// written stays resident in QEMU even after the guest frees it; a limit of the request alone
// would end a sandbox whose commands each stayed within it. RES-2 is the guest cgroup's.
constexpr int64_t kHostOverheadBytes = 320ll << 20;
constexpr int64_t kHostMemoryBytes = (int64_t{kGuestMemoryMb} << 20) + kHostOverheadBytes;
constexpr int64_t kQemuPids = 64;  // QEMU's threads (main, RCU, vCPU, I/O workers)
constexpr uint32_t kOutputLimit = 1u << 20;
constexpr int kSpareFloor = 1;

std::string Hex6() {
  static std::atomic<uint32_t> seq{0};
  return fmt::format("{:x}{:04x}", getpid() & 0xfff, seq.fetch_add(1) & 0xffff);
}

// One clone with what it lives in: its host cgroup and its tap.
struct Clone {
  std::unique_ptr<microvm::Vm> vm;
  std::unique_ptr<host::Cgroup> cgroup;
  Tap tap;
  void Kill() {
    if (vm && vm->pid() > 0) ::kill(vm->pid(), SIGKILL);
  }
  void Destroy() {
    if (vm) (void)vm->Destroy();
    vm.reset();
    cgroup.reset();  // kills what is left, removes the directories
    tap.fd.Reset();
  }
};

// The request every command of a sandbox shares (its limits), from an ExecSpec.
microvm::ExecRequest GuestRequest(const ExecSpec& exec, const SandboxSpec& spec) {
  microvm::ExecRequest req;
  if (exec.argv.empty()) {
    req.shell = exec.command;
  } else {
    req.argv = exec.argv;
  }
  std::map<std::string, std::string> env = AgentBaseEnv();
  for (const auto* m : {&spec.env, &exec.env, &spec.secrets, &exec.secrets})
    for (const auto& [k, v] : *m) env[k] = v;
  for (auto& [k, v] : env) {
    req.env.push_back(k + "=" + v);
    explicit_bzero(v.data(), v.size());  // LC-8: the request's copy is zeroed after the command
  }
  req.cwd = "/work";
  req.stdin_data = exec.stdin_data;
  req.timeout_ms = exec.timeout_s > 0 ? static_cast<uint32_t>(std::ceil(exec.timeout_s * 1000)) : 0;
  req.term_grace_ms = static_cast<uint32_t>(std::max(0.0, exec.grace_s) * 1000);
  req.memory_limit = static_cast<uint64_t>(spec.limits.memory_bytes);
  req.output_limit = kOutputLimit;
  req.root = kRoot;
  req.uid = req.gid = kSandboxUid;
  req.pids_limit = static_cast<uint32_t>(spec.limits.pids);
  req.nofile = static_cast<uint32_t>(spec.limits.fds);
  return req;
}

// LC-8: the environment (secrets included) does not outlive the command in this process.
void ZeroRequest(microvm::ExecRequest* req) {
  for (auto* s : {&req->stdin_data}) {
    std::fill(s->begin(), s->end(), '\0');
  }
  for (auto& e : req->env) std::fill(e.begin(), e.end(), '\0');
  if (req->shell) std::fill(req->shell->begin(), req->shell->end(), '\0');
}

// Watches the host cgroup during one command: if QEMU as a whole breaches its memory limit
// (v1: the kernel's OOM killer is disabled there, so QEMU would wait in the kernel), QEMU is
// killed and the command's wait ends.
class HostOomWatch {
 public:
  HostOomWatch(host::Cgroup* cg, pid_t qemu, int64_t seen) : cg_(cg), qemu_(qemu), seen_(seen) {
    int oom = cg_->OomEventFd();
    if (oom < 0 || pipe2(stop_, O_CLOEXEC) != 0) return;
    thread_ = std::thread([this, oom] {
      pollfd p[2] = {{oom, POLLIN, 0}, {stop_[0], POLLIN, 0}};
      while (true) {
        if (poll(p, 2, -1) < 0 && errno != EINTR) return;
        if (p[1].revents) return;
        if (p[0].revents) {
          // A wake-up, not the verdict (v2 wakes on every memory.events change).
          (void)cg_->TakeOomEvent();
          if (cg_->UnderOom() || cg_->OomKills() > seen_) {
            fired_ = true;
            ::kill(qemu_, SIGKILL);
            return;
          }
        }
      }
    });
  }
  ~HostOomWatch() {
    if (thread_.joinable()) {
      (void)!write(stop_[1], "x", 1);
      thread_.join();
    }
    for (int fd : stop_)
      if (fd >= 0) close(fd);
  }
  bool fired() const { return fired_; }

 private:
  host::Cgroup* cg_;
  pid_t qemu_;
  int64_t seen_;
  int stop_[2] = {-1, -1};
  std::atomic<bool> fired_{false};
  std::thread thread_;
};

// Spares of one template: restored clones waiting for a sandbox (create, revert).
class SpareClones : public std::enable_shared_from_this<SpareClones> {
 public:
  SpareClones(const BackendContext& ctx, std::unique_ptr<microvm::Template> t, TapHolder* taps)
      : ctx_(ctx), template_(std::move(t)), taps_(taps) {}
  ~SpareClones() {
    std::lock_guard lock(mu_);
    for (auto& c : ready_) c.Destroy();
  }
  const microvm::Template& tmpl() const { return *template_; }

  // A spare if one is ready, else a clone made now; `warm_up` then: warmed up too (for a
  // sandbox made ahead of its first command: a warm pool's, POOL-2), else not (for a command
  // that waits: its own first run does the translating).
  StatusOr<Clone> Take(bool warm_up) {
    std::optional<Clone> got;
    {
      // A spare on its way is nearer than a new clone (which would still have every code path
      // of its first command to translate): wait for it, boundedly.
      std::unique_lock lock(mu_);
      // Only a refill that is RUNNING counts: one still queued may sit behind this very
      // thread in the runtime's executor.
      changed_.wait_for(lock, std::chrono::seconds(10),
                        [&] { return !ready_.empty() || making_ == 0; });
      if (!ready_.empty()) {
        got = std::move(ready_.front());
        ready_.pop_front();
      }
    }
    Refill();
    if (got) return std::move(*got);
    return Make(warm_up);
  }

  // Clones the template (QEMU inside a host cgroup of its own, its tap in the holding
  // namespace); `warm_up`: and runs one command in it.
  StatusOr<Clone> Make(bool warm_up) {
    Clone c;
    ASSIGN_OR_RETURN(c.cgroup, ctx_.cgroups->Create("sb-vm-" + Hex6()));
    // A spare's ceiling until a sandbox takes it (then the sandbox's limits): the whole guest.
    RETURN_IF_ERROR(c.cgroup->SetMemoryBytes(kHostMemoryBytes));
    RETURN_IF_ERROR(c.cgroup->SetPidsMax(kQemuPids));
    ASSIGN_OR_RETURN(c.tap, taps_->MakeTap());
    microvm::PrepareOptions po;
    po.tap_fd = c.tap.fd.get();
    po.cgroup_procs = c.cgroup->JoinFiles();
    auto vm = microvm::Vm::Clone(*template_, {}, po);
    if (!vm.ok()) {
      c.Destroy();
      return vm.status().WithContext("microVM clone");
    }
    c.vm = std::move(vm).value();
    if (warm_up) {
      // TCG translates guest code per QEMU process: one command through the same path a
      // sandbox's commands take (chroot, namespaces, busybox sh) makes the first real one
      // cost what a second one does. It leaves nothing in /work or /tmp.
      SandboxSpec spec;
      spec.limits = DefaultedLimits({});
      auto r = c.vm->Exec(
          GuestRequest(ExecSpec{.command = "echo warm > /dev/null", .timeout_s = 10}, spec));
      if (!r.ok() || r->exit_code.value_or(-1) != 0) {
        c.Destroy();
        return Status(Code::kInternal, "warm-up command in a new microVM clone failed: " +
                                           (r.ok() ? r->stderr_data : r.status().message()));
      }
    }
    return c;
  }

  // Keeps kSpareFloor spares ready, in the background (the runtime drains it: Settle).
  void Refill() {
    {
      std::lock_guard lock(mu_);
      if (static_cast<int>(ready_.size()) + filling_ >= kSpareFloor || !ctx_.background) return;
      ++filling_;
    }
    auto self = shared_from_this();
    posting_ = true;  // thread_local: true only while this thread is inside the post below
    ctx_.background([self] {
      if (posting_) {
        // The runtime ran the task inline (its executor's backlog is full): a caller's create
        // or revert must not pay for a whole spare. The next take schedules one again.
        std::lock_guard lock(self->mu_);
        --self->filling_;
        return;
      }
      {
        std::lock_guard lock(self->mu_);
        ++self->making_;
      }
      auto c = self->Make(true);
      std::lock_guard lock(self->mu_);
      --self->filling_;
      --self->making_;
      if (c.ok()) {
        self->ready_.push_back(std::move(c).value());
      } else {
        self->last_error_ = c.status().message();
      }
      self->changed_.notify_all();
    });
    posting_ = false;
  }

 private:
  const BackendContext& ctx_;
  std::unique_ptr<microvm::Template> template_;
  TapHolder* taps_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Clone> ready_;
  static inline thread_local bool posting_ = false;
  int filling_ = 0;  // refills scheduled or running
  int making_ = 0;   // refills running
  std::string last_error_;
};

class MicrovmSandbox final : public Sandbox {
 public:
  MicrovmSandbox(const BackendContext& ctx, TapHolder* taps, std::shared_ptr<SpareClones> spares,
                 std::string id, SandboxSpec spec)
      : ctx_(ctx),
        taps_(taps),
        spares_(std::move(spares)),
        id_(std::move(id)),
        spec_(std::move(spec)) {}
  ~MicrovmSandbox() override { Destroy(nullptr); }

  Status Start(StageTimings* timings, CreateMode mode) {
    auto t0 = Clock::now();
    if (!spec_.egress.empty()) {
      if (!ctx_.egress)
        return Status(Code::kSandboxUnavailable, "egress is not available in this runtime");
      ASSIGN_OR_RETURN(net::EgressService * svc, ctx_.egress());
      ASSIGN_OR_RETURN(net_, svc->Attach(id_, spec_.egress, spec_.hosts));
    }
    ASSIGN_OR_RETURN(Clone c, spares_->Take(mode == CreateMode::kPooled));
    if (timings) timings->allocate = Since(t0);
    auto t1 = Clock::now();
    Status st = Install(c, true);
    if (!st.ok()) {
      c.Destroy();
      return st;
    }
    cur_ = std::move(c);
    if (timings) timings->initialize = Since(t1);
    return Status::Ok();
  }

  const std::string& id() const override { return id_; }
  SandboxState state() const override {
    if (destroyed_) return SandboxState::kDestroyed;
    if (suspended_) return SandboxState::kSuspended;
    if (crashed_) return SandboxState::kCrashed;
    return SandboxState::kRunning;
  }

  StatusOr<ExecResult> Exec(const ExecSpec& exec) override {
    if (destroyed_) return FailedPrecondition("sandbox is destroyed");
    if (suspended_) return FailedPrecondition("sandbox is suspended; resume it first");
    if (crashed_ || !cur_.vm) return FailedPrecondition("sandbox crashed; revert it first");
    if (!exec.secrets.empty() || !spec_.secrets.empty()) held_secrets_ = true;
    ExecResult r;
    r.backend = "microvm";
    r.sandbox_id = id_;
    auto t_inject = Clock::now();
    microvm::ExecRequest req = GuestRequest(exec, spec_);
    auto valid = microvm::EncodeExecRequest(0, req);  // what the VM layer will send, checked
    if (valid.ok()) explicit_bzero(valid->data(), valid->size());
    if (!valid.ok()) {
      // Bad input (stdin over one request, a NUL byte, an empty env name): refused before
      // anything reaches the guest; the sandbox is untouched.
      ZeroRequest(&req);
      return InvalidArgument("the microvm backend cannot send this command: " +
                             valid.status().message());
    }
    (void)cur_.cgroup->ResetPeak();
    const host::CgroupUsage before = cur_.cgroup->Usage();
    r.stages.inject_context = Since(t_inject);

    auto t_exec = Clock::now();
    StatusOr<microvm::ExecResult> res = Status(Code::kInternal, "not run");
    bool host_oom = false;
    {
      HostOomWatch watch(cur_.cgroup.get(), cur_.vm->pid(), oom_kills_seen_);
      res = cur_.vm->Exec(req);
      host_oom = watch.fired();
    }
    ZeroRequest(&req);
    r.seconds = r.stages.execute = Since(t_exec);

    auto t_collect = Clock::now();
    const host::CgroupUsage after = cur_.cgroup->Usage();
    r.usage.throttled_seconds = after.throttled_seconds - before.throttled_seconds;
    if (!res.ok() && !host_oom && cur_.vm->Ping().ok()) {
      // The guest is alive and answered: the agent refused this request (an ERROR reply with
      // its id). The sandbox stays usable.
      r.status = ExecStatus::kToolError;
      r.error_code = "exec_refused";
      r.reason = "the guest agent refused the command: " + res.status().message();
      r.stages.collect = Since(t_collect);
      return r;
    }
    if (!res.ok()) {
      host_oom = host_oom || cur_.cgroup->UnderOom() || after.oom_kills > oom_kills_seen_;
      EndVm();
      r.state = SandboxState::kCrashed;
      if (host_oom) {
        SetMemoryExceeded(kHostMemoryBytes, &r);
        r.reason += "; the VM as a whole (QEMU included) reached its host cgroup's limit";
      } else {
        r.status = ExecStatus::kSandboxUnavailable;
        r.error_code = "vm_failed";
        r.reason = "the microVM failed during the command: " + res.status().message();
      }
      r.stages.collect = Since(t_collect);
      return r;
    }
    const microvm::ExecResult& g = *res;
    r.stdout_bytes = static_cast<int64_t>(g.stdout_data.size());
    r.stderr_bytes = static_cast<int64_t>(g.stderr_data.size());
    r.stdout_tail = Tail(g.stdout_data);
    r.stderr_tail = Tail(g.stderr_data);
    if (g.signal) {
      r.signal = *g.signal;
      r.exit_code = 128 + r.signal;
    } else {
      r.exit_code = g.exit_code.value_or(-1);
    }
    // CPU from the host cgroup (QEMU as a whole), never from inside: the guest's clock runs on
    // while the host throttles its vCPU, so the guest counts throttled time as its own (with a
    // 0.5 CPU quota the guest's cgroup reported 0.98 of a CPU).
    r.usage.cpu_seconds = after.cpu_seconds - before.cpu_seconds;
    r.usage.memory_peak_bytes = static_cast<int64_t>(g.peak_memory);
    r.usage.oom_kills = g.oom ? 1 : 0;
    r.usage.disk_used_bytes = static_cast<int64_t>(g.disk_used);
    // The guest cgroup's pids peak is not reported by the agent (its 6.1 kernel has no
    // pids.peak); QEMU's host tasks are not the command's processes. -1: unknown.
    r.usage.pids_peak = -1;
    if (!g.start_error.empty()) {
      r.status = ExecStatus::kToolError;
      r.exit_code = 127;
      r.reason = "cannot start the command in the guest: " + g.start_error;
      r.error_code = "exec_failed";
    } else if (g.oom) {
      // RES-8: a memory breach ends the whole sandbox; a revert makes it usable.
      SetMemoryExceeded(spec_.limits.memory_bytes, &r);
      EndVm();
    } else if (g.disk_free >= 0 && g.disk_free < kDiskFullBelow) {
      // RES-3 as native: a full scratch mount ends the sandbox; a revert gives the space back.
      SetDiskExceeded(spec_.limits.disk_bytes, &r);
      EndVm();
    } else if (g.timed_out) {
      SetTimedOut(exec, &r);
    }
    if (crashed_) r.state = SandboxState::kCrashed;
    r.stages.collect = Since(t_collect);
    return r;
  }

  StatusOr<double> Revert() override {
    if (destroyed_) return FailedPrecondition("sandbox is destroyed");
    auto t0 = Clock::now();
    Clone next;
    if (!latest_state_.empty()) {
      // SNAP-2: the latest durable snapshot is a suspend's state file.
      ASSIGN_OR_RETURN(next, FromState(latest_state_));
    } else {
      ASSIGN_OR_RETURN(next, spares_->Take(false));
    }
    Retire();
    Status st = Install(next, latest_state_.empty());
    if (!st.ok()) {
      next.Destroy();
      crashed_ = true;
      return st.WithContext("revert");
    }
    cur_ = std::move(next);
    crashed_ = suspended_ = false;
    held_secrets_ = false;
    return Since(t0);
  }

  // SNAP-3: the VM's whole state (devices and the RAM it has) into a file; QEMU ends.
  StatusOr<double> Suspend() override {
    if (destroyed_) return FailedPrecondition("sandbox is destroyed");
    if (suspended_) return FailedPrecondition("sandbox is already suspended");
    if (crashed_ || !cur_.vm) return FailedPrecondition("sandbox crashed; revert it first");
    if (held_secrets_) {
      // SECURITY (LC-4): the state file is the guest's RAM, where a command's environment was.
      return FailedPrecondition(
          "suspend refused: commands of this sandbox were given secrets, and the VM's state "
          "file (its RAM) would write them to disk (LC-4); revert first");
    }
    auto t0 = Clock::now();
    ASSIGN_OR_RETURN(std::string dir, SnapshotDir());
    std::string path = fmt::format("{}/suspend-{}.state", dir, ++suspends_);
    Status st = cur_.vm->SaveState(path);
    if (!st.ok()) {
      std::error_code ec;
      fs::remove(path, ec);
      (void)cur_.vm->Resume();
      return st.WithContext("suspend");
    }
    Retire();
    std::string previous = latest_state_;
    latest_state_ = path;
    if (!previous.empty()) {
      std::error_code ec;
      fs::remove(previous, ec);
    }
    suspended_ = true;
    return Since(t0);
  }

  StatusOr<double> Resume() override {
    if (destroyed_) return FailedPrecondition("sandbox is destroyed");
    if (!suspended_) return FailedPrecondition("sandbox is not suspended");
    auto t0 = Clock::now();
    ASSIGN_OR_RETURN(Clone next, FromState(latest_state_));
    Status st = Install(next, false);
    if (!st.ok()) {
      next.Destroy();
      return st.WithContext("resume");
    }
    cur_ = std::move(next);
    suspended_ = false;
    return Since(t0);
  }

  Status PutFile(const std::string&, const std::string&, int) override {
    return Unsupported("files: the microvm backend has no file transfer into the guest");
  }

  void Destroy(StageTimings* timings) override {
    if (destroyed_) return;
    destroyed_ = true;
    auto t0 = Clock::now();
    cur_.Kill();
    if (timings) timings->destroy = Since(t0);
    auto t1 = Clock::now();
    cur_.Destroy();
    net_.reset();
    if (!snapshot_dir_.empty()) {
      std::error_code ec;
      fs::remove_all(snapshot_dir_, ec);
    }
    if (timings) timings->cleanup = Since(t1);
  }

  void Kill() override { cur_.Kill(); }

  // POOL-2: the next user's limits. The guest's (memory, pids, fds) travel with every command;
  // the host cgroup's are set here. The disk quota (the tmpfs sizes) is fixed at creation.
  Status ApplyLimits(const Limits& in) override {
    if (destroyed_ || crashed_ || !cur_.vm) return FailedPrecondition("sandbox cannot take limits");
    Limits l = DefaultedLimits(in);
    if (l.disk_bytes != spec_.limits.disk_bytes)
      return FailedPrecondition("the disk quota of a pooled microVM sandbox is fixed at creation");
    if (l.memory_bytes > kMaxMemoryRequest)
      return InvalidArgument(fmt::format(
          "memory limit {} bytes is more than a microVM guest can give", l.memory_bytes));
    RETURN_IF_ERROR(cur_.cgroup->SetCpuMillicores(l.cpu_millicores));
    RETURN_IF_ERROR(cur_.cgroup->SetMemoryBytes(kHostMemoryBytes));
    spec_.limits = l;
    return Status::Ok();
  }

 private:
  static std::string Tail(const std::string& s) {
    return s.size() <= kOutputTailBytes ? s : s.substr(s.size() - kOutputTailBytes);
  }

  // A clone becomes this sandbox's: its host cgroup gets the sandbox's limits, its tap joins
  // the sandbox's network, and (for a clone of the golden VM) the guest is configured.
  Status Install(Clone& c, bool configure) {
    const Limits& l = spec_.limits;
    RETURN_IF_ERROR(c.cgroup->SetCpuMillicores(l.cpu_millicores));
    RETURN_IF_ERROR(c.cgroup->SetMemoryBytes(kHostMemoryBytes));
    oom_kills_seen_ = c.cgroup->OomKills();
    microvm::GuestConfig gc;
    gc.disk_bytes = static_cast<uint64_t>(l.disk_bytes);
    gc.hostname = "sandbox";
    if (net_) {
      RETURN_IF_ERROR(taps_->Plug(c.tap, net_->netns_fd(), net_->sandbox_address()));
      gc.address = net_->sandbox_address();
      gc.prefix = 32;
      gc.gateway = net_->resolver_address();
    }
    if (configure) RETURN_IF_ERROR(c.vm->Configure(gc).WithContext("configuring the guest"));
    return Status::Ok();
  }

  // A new clone restored from a state file (suspend), in a fresh host cgroup and tap.
  StatusOr<Clone> FromState(const std::string& path) {
    Clone c;
    ASSIGN_OR_RETURN(c.cgroup, ctx_.cgroups->Create("sb-vm-" + Hex6()));
    RETURN_IF_ERROR(c.cgroup->SetPidsMax(kQemuPids));
    RETURN_IF_ERROR(c.cgroup->SetMemoryBytes(kHostMemoryBytes));
    ASSIGN_OR_RETURN(c.tap, taps_->MakeTap());
    microvm::PrepareOptions po;
    po.tap_fd = c.tap.fd.get();
    po.cgroup_procs = c.cgroup->JoinFiles();
    auto vm = microvm::Vm::RestoreFromState(spares_->tmpl(), path, po);
    if (!vm.ok()) {
      c.Destroy();
      return vm.status();
    }
    c.vm = std::move(vm).value();
    return c;
  }

  // The current clone ends at once (SIGKILL); its reaping and removal go to the background.
  void Retire() {
    cur_.Kill();
    auto old = std::make_shared<Clone>(std::move(cur_));
    cur_ = Clone{};
    if (ctx_.background) {
      ctx_.background([old] { old->Destroy(); });
    } else {
      old->Destroy();
    }
  }

  void EndVm() {
    crashed_ = true;
    cur_.Kill();
  }

  StatusOr<std::string> SnapshotDir() {
    if (snapshot_dir_.empty()) {
      std::string base =
          ctx_.snapshot_dir.empty() ? ctx_.state_dir + "/snapshots" : ctx_.snapshot_dir;
      snapshot_dir_ = base + "/" + id_;
      std::error_code ec;
      fs::create_directories(snapshot_dir_, ec);
      if (ec) return Status(Code::kInternal, "snapshot dir " + snapshot_dir_ + ": " + ec.message());
    }
    return snapshot_dir_;
  }

  const BackendContext& ctx_;
  TapHolder* taps_;
  std::shared_ptr<SpareClones> spares_;
  std::string id_;
  SandboxSpec spec_;
  std::unique_ptr<net::Attachment> net_;
  Clone cur_;
  bool crashed_ = false, suspended_ = false, destroyed_ = false, held_secrets_ = false;
  int64_t oom_kills_seen_ = 0;
  int suspends_ = 0;
  std::string snapshot_dir_, latest_state_;
};

class MicrovmBackend final : public Backend {
 public:
  explicit MicrovmBackend(const BackendContext& ctx) : ctx_(ctx) {}
  ~MicrovmBackend() override {
    std::lock_guard lock(mu_);
    spares_by_template_.clear();
  }
  std::string name() const override { return "microvm"; }

  Status Probe() override {
    if (geteuid() != 0) return Status(Code::kPermissionDenied, "the microvm backend needs root");
    if (!ctx_.cgroups) return Unsupported("no usable cgroup hierarchy");
    if (!ctx_.images) return Unsupported("no image store");
    qemu_ = FindExecutable("qemu-system-x86_64");
    if (qemu_.empty())
      return Unsupported("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)");
    if (access("/dev/net/tun", R_OK | W_OK) != 0) return ErrnoStatus("/dev/net/tun");
    auto guest = ctx_.images->Get(kGuestRef);
    if (!guest.ok()) {
      return Unsupported(fmt::format(
          "no microVM guest image '{}' ({}): it is built from Debian's linux-image-cloud-amd64 "
          "and busybox-static (fixtures/microvm/build-guest.sh)",
          kGuestRef, guest.status().message()));
    }
    guest_ = *guest;
    const std::string state_root = fs::path(ctx_.state_dir).parent_path().string();
    const std::string cache = state_root + "/probe-microvm.json";
    const std::string key = ProbeKey(qemu_, "-version");
    if (auto hit = ReadProbeCache(cache, key); hit && hit->value("ok", false)) {
      qemu_version_ = hit->value("version", "");
    } else {
      auto v = RunCommand(SpawnPlan{.argv = {qemu_, "-version"}}, 10);
      if (!v.ok()) return v.status();
      if (!v->ok()) return Unsupported("qemu-system-x86_64 -version: " + v->Describe());
      qemu_version_ = v->out.substr(0, v->out.find('\n'));
      WriteProbeCache(cache, key, {{"ok", true}, {"version", qemu_version_}});
    }
    return Status::Ok();
  }

  std::string Implementation() const override {
    return fmt::format(
        "{}, -M microvm under TCG{}, copy-on-write clones of a golden VM; firecracker: {}",
        qemu_version_, access("/dev/kvm", R_OK | W_OK) == 0 ? "" : " (no /dev/kvm)",
        FirecrackerUnavailable());
  }

  std::vector<std::string> Features() const override {
    return {"egress",        "revert",      "suspend",     "destroy",    "limits.cpu",
            "limits.memory", "limits.pids", "limits.disk", "limits.fds", "timeout",
            "tenants",       "trust",       "secrets"};
  }

  StatusOr<std::unique_ptr<Sandbox>> Create(const std::string& id, const SandboxSpec& spec,
                                            StageTimings* timings, CreateMode mode) override {
    SandboxSpec s = spec;
    s.limits = DefaultedLimits(s.limits);
    if (s.limits.memory_bytes > kMaxMemoryRequest) {
      return InvalidArgument(fmt::format(
          "memory limit {} bytes is more than a microVM guest of {} MiB can give a command "
          "(at most {} bytes)",
          s.limits.memory_bytes, kGuestMemoryMb, kMaxMemoryRequest));
    }
    auto t0 = Clock::now();
    ASSIGN_OR_RETURN(std::shared_ptr<SpareClones> spares, SparesFor(s.template_name));
    double template_s = Since(t0);
    auto sb = std::make_unique<MicrovmSandbox>(ctx_, taps_.get(), std::move(spares), id, s);
    RETURN_IF_ERROR(sb->Start(timings, mode));
    if (timings && timings->allocate >= 0) timings->allocate += template_s;
    return std::unique_ptr<Sandbox>(std::move(sb));
  }

 private:
  static std::string FirecrackerUnavailable() {
    std::string why;
    if (access("/dev/kvm", R_OK | W_OK) != 0) why = "no /dev/kvm";
    if (FindExecutable("firecracker").empty())
      why += std::string(why.empty() ? "" : ", ") + "firecracker is not installed";
    return why.empty() ? "present, not implemented by this runtime" : "unavailable (" + why + ")";
  }

  // The template's directory key: everything the golden VM depends on.
  StatusOr<std::string> TemplateKey(const host::Image& image, uint32_t tsc) const {
    struct stat st {};
    if (stat(qemu_.c_str(), &st) != 0) return ErrnoStatus(qemu_);
    host::Sha256 h;
    // The machine revision and protocol version too: a build that changes either boots its own
    // template, never over one that other runtimes' clones are restored from.
    h.Update(fmt::format("m{}|p{}|{}|{}|{}|{}|{}|{}|{}", microvm::kMachineRevision,
                         microvm::proto::kVersion, guest_.digest, image.digest, qemu_, st.st_size,
                         st.st_mtim.tv_sec, kGuestMemoryMb, tsc));
    return host::Sha256::ToHex(h.Finish()).substr(0, 24);
  }

  StatusOr<std::shared_ptr<SpareClones>> SparesFor(const std::string& template_name) {
    std::lock_guard lock(mu_);
    ASSIGN_OR_RETURN(host::Image image, ctx_.images->Get(template_name));
    if (auto it = spares_by_template_.find(image.digest); it != spares_by_template_.end())
      return it->second;
    if (!taps_) {
      ASSIGN_OR_RETURN(taps_, TapHolder::Create());
    }
    ASSIGN_OR_RETURN(uint32_t tsc, microvm::HostTscKhz());
    ASSIGN_OR_RETURN(std::string key, TemplateKey(image, tsc));
    // A cache beside the unpacked images (shared by every runtime of the host, like them): not
    // in the runtime's state root, which holds only what a runtime owns and the reaper sweeps.
    const std::string cache = ctx_.cache_dir.empty()
                                  ? fs::path(ctx_.state_dir).parent_path().string() + "/images"
                                  : ctx_.cache_dir;
    const std::string root = cache + "/microvm-templates";
    const std::string dir = root + "/" + key;
    std::error_code ec;
    fs::create_directories(root, ec);
    if (ec) return Status(Code::kInternal, "template dir " + root + ": " + ec.message());
    fs::create_directories(ctx_.state_dir + "/vm", ec);

    microvm::VmConfig cfg;
    cfg.qemu = qemu_;
    cfg.vmlinux = guest_.rootfs_dir + "/vmlinux";
    cfg.initramfs = dir + "/initrd.cpio";  // the guest's initramfs + the tool image's rootfs
    cfg.state_root = ctx_.state_dir + "/vm";
    cfg.memory_mb = kGuestMemoryMb;
    cfg.tsc_khz = tsc;

    // Another runtime may be making the same template: one boots, the others wait and open.
    int lock_fd = open((dir + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd < 0) return ErrnoStatus(dir + ".lock");
    host::UniqueFd lock_owner(lock_fd);
    if (flock(lock_fd, LOCK_EX) != 0) return ErrnoStatus("flock " + dir + ".lock");
    auto t = microvm::Template::Open(cfg, dir);
    if (!t.ok()) {
      fs::create_directories(dir, ec);
      const std::string tree = dir + "/sandbox.cpio";
      RETURN_IF_ERROR(microvm::WriteNewcTree(image.rootfs_dir, "sandbox", tree));
      RETURN_IF_ERROR(
          microvm::ConcatFiles({guest_.rootfs_dir + "/initramfs.cpio", tree}, cfg.initramfs));
      fs::remove(tree, ec);
      t = microvm::Template::Boot(cfg, dir);
      if (!t.ok()) return t.status().WithContext("booting the golden microVM");
    }
    if (!(*t)->has_root()) {
      return Status(Code::kInternal,
                    "the golden microVM did not prepare the tool image's root (/sandbox)");
    }
    (*t)->set_keep_files(true);
    auto spares = std::make_shared<SpareClones>(ctx_, std::move(t).value(), taps_.get());
    spares_by_template_[image.digest] = spares;
    return spares;
  }

  const BackendContext& ctx_;
  std::string qemu_, qemu_version_;
  host::Image guest_;
  std::mutex mu_;
  std::unique_ptr<TapHolder> taps_;
  std::map<std::string, std::shared_ptr<SpareClones>> spares_by_template_;
};

}  // namespace

std::unique_ptr<Backend> MakeMicrovmBackend(const BackendContext& ctx) {
  return std::make_unique<MicrovmBackend>(ctx);
}

}  // namespace sbx::backend
