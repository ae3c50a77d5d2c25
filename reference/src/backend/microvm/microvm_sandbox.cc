// The microvm backend's Sandbox (microvm_sandbox.h; docs/microvm.md): a clone from its
// template's spares, its host cgroup and tap, the network attachment, commands through the
// guest agent, revert (a fresh clone), suspend and resume (QEMU migration into a file).
#include "backend/microvm/microvm_sandbox.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "backend/backend.h"
#include "backend/common/init_client.h"
#include "backend/common/limits.h"
#include "backend/microvm/microvm_net.h"
#include "backend/microvm/microvm_vm.h"
#include "host/cgroup.h"
#include "net/egress.h"

namespace sbx::backend {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

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
    if (timings) timings->allocate = SecondsSince(t0);
    auto t1 = Clock::now();
    Status st = Install(c, true);
    if (!st.ok()) {
      c.Destroy();
      return st;
    }
    cur_ = std::move(c);
    if (timings) timings->initialize = SecondsSince(t1);
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
    r.stages.inject_context = SecondsSince(t_inject);

    auto t_exec = Clock::now();
    StatusOr<microvm::ExecResult> res = Status(Code::kInternal, "not run");
    bool host_oom = false;
    {
      HostOomWatch watch(cur_.cgroup.get(), cur_.vm->pid(), oom_kills_seen_);
      res = cur_.vm->Exec(req);
      host_oom = watch.fired();
    }
    ZeroRequest(&req);
    r.seconds = r.stages.execute = SecondsSince(t_exec);

    auto t_collect = Clock::now();
    const host::CgroupUsage after = cur_.cgroup->Usage();
    r.usage.throttled_seconds = after.throttled_seconds - before.throttled_seconds;
    if (!res.ok() && !host_oom && cur_.vm->Ping().ok()) {
      // The guest is alive and answered: the agent refused this request (an ERROR reply with
      // its id). The sandbox stays usable.
      r.status = ExecStatus::kToolError;
      r.error_code = "exec_refused";
      r.reason = "the guest agent refused the command: " + res.status().message();
      r.stages.collect = SecondsSince(t_collect);
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
      r.stages.collect = SecondsSince(t_collect);
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
    r.stages.collect = SecondsSince(t_collect);
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
    return SecondsSince(t0);
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
    return SecondsSince(t0);
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
    return SecondsSince(t0);
  }

  Status PutFile(const std::string&, const std::string&, int) override {
    return Unsupported("files: the microvm backend has no file transfer into the guest");
  }

  void Destroy(StageTimings* timings) override {
    if (destroyed_) return;
    destroyed_ = true;
    auto t0 = Clock::now();
    cur_.Kill();
    if (timings) timings->destroy = SecondsSince(t0);
    auto t1 = Clock::now();
    cur_.Destroy();
    net_.reset();
    if (!snapshot_dir_.empty()) {
      std::error_code ec;
      fs::remove_all(snapshot_dir_, ec);
    }
    if (timings) timings->cleanup = SecondsSince(t1);
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
    return StartClone(ctx_, taps_, [&](const microvm::PrepareOptions& po) {
      return microvm::Vm::RestoreFromState(spares_->tmpl(), path, po);
    });
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

}  // namespace

StatusOr<std::unique_ptr<Sandbox>> StartMicrovmSandbox(const BackendContext& ctx, TapHolder* taps,
                                                       std::shared_ptr<SpareClones> spares,
                                                       const std::string& id,
                                                       const SandboxSpec& spec,
                                                       StageTimings* timings, CreateMode mode) {
  auto sb = std::make_unique<MicrovmSandbox>(ctx, taps, std::move(spares), id, spec);
  RETURN_IF_ERROR(sb->Start(timings, mode));
  return std::unique_ptr<Sandbox>(std::move(sb));
}

}  // namespace sbx::backend
