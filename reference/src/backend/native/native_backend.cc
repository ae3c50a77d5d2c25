// The native backend (BK-1): namespaces + cgroups + seccomp + pivot_root, driven through
// sbx-init. A sandbox is a sequence of instances; revert replaces the instance with a fresh one
// started from the latest durable snapshot, so nothing of the previous task survives: no
// process, file, environment or socket (SNAP-2, POOL-7). A spare instance is pre-spawned in the
// background, so a revert costs a swap, and the old instance is torn down off the caller's path.
#include <fmt/format.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "backend/backend.h"
#include "backend/common/fs_layer.h"
#include "backend/common/spare_slot.h"
#include "backend/native/native_instance.h"
#include "host/cgroup.h"
#include "host/image.h"
#include "net/egress.h"

namespace sbx::backend {
namespace {

using Clock = std::chrono::steady_clock;

class NativeSandbox final : public Sandbox {
 public:
  NativeSandbox(const BackendContext& ctx, std::string id, SandboxSpec spec, std::string image_dir,
                NativeFlavor flavor = {})
      : ctx_(ctx),
        id_(std::move(id)),
        spec_(std::move(spec)),
        image_dir_(std::move(image_dir)),
        flavor_(std::move(flavor)),
        slot_(std::make_shared<SpareSlot<Instance>>()) {
    spec_.limits = DefaultedLimits(spec_.limits);
  }
  ~NativeSandbox() override { Destroy(nullptr); }

  // SNAP-1: the first instance starts from the golden snapshot (the template's image).
  Status Start(StageTimings* timings, CreateMode mode) {
    keep_spare_ = mode == CreateMode::kPersistent;
    prespawn_ = mode != CreateMode::kOneShot;
    ASSIGN_OR_RETURN(current_, SpawnInstance(ctx_, Config(), timings));
    if (keep_spare_) ScheduleSpare();
    return Status::Ok();
  }

  const std::string& id() const override { return id_; }

  SandboxState state() const override {
    if (!current_) return SandboxState::kDestroyed;
    if (suspended_) return SandboxState::kSuspended;
    return current_->crashed() ? SandboxState::kCrashed : SandboxState::kRunning;
  }

  StatusOr<ExecResult> Exec(const ExecSpec& exec) override {
    if (!current_) return FailedPrecondition("sandbox is destroyed");
    if (suspended_) return FailedPrecondition("sandbox is suspended; resume it first");
    if (current_->crashed()) {
      ExecResult r;
      r.status = ExecStatus::kSandboxUnavailable;
      r.state = SandboxState::kCrashed;
      r.reason = "the sandbox crashed; revert it before running another command";
      r.error_code = "sandbox_crashed";
      r.backend = flavor_.backend;
      r.sandbox_id = id_;
      return r;
    }
    const ExecSpec* run = &exec;
    ExecSpec line;
    if (flavor_.quote_argv && !exec.argv.empty()) {  // one command line of quoted words
      line = exec;
      line.command.clear();
      for (const auto& a : exec.argv)
        line.command += (line.command.empty() ? "" : " ") + ShellQuote(a);
      line.argv.clear();
      run = &line;
    }
    if (flavor_.command_prefix) {
      if (run != &line) line = exec;
      line.command = flavor_.command_prefix(exec, spec_.limits) + line.command;
      run = &line;
    }
    ASSIGN_OR_RETURN(ExecResult r, current_->Exec(*run, spec_.env, spec_.secrets));
    r.backend = flavor_.backend;
    r.sandbox_id = id_;
    return r;
  }

  // SNAP-2: back to the latest durable snapshot. The old instance is killed at once (its
  // processes cannot outlive the revert) and torn down in the background.
  StatusOr<double> Revert() override {
    if (!current_) return FailedPrecondition("sandbox is destroyed");
    auto t0 = Clock::now();
    std::shared_ptr<Instance> old(std::move(current_));
    old->KillNow();
    suspended_ = false;
    ctx_.background([old] { old->Teardown(nullptr); });
    ASSIGN_OR_RETURN(current_, TakeSpare());
    if (keep_spare_) ScheduleSpare();
    return SecondsSince(t0);
  }

  // SNAP-3 (native): freeze every process (cgroup freezer) and make the filesystem layer a
  // durable snapshot; a later revert returns to it (SNAP-2). Process state is not durable on
  // this backend (no CRIU here): a revert restarts processes from the golden state.
  StatusOr<double> Suspend() override {
    if (!current_) return FailedPrecondition("sandbox is destroyed");
    if (suspended_) return FailedPrecondition("sandbox is already suspended");
    auto t0 = Clock::now();
    RETURN_IF_ERROR(current_->cgroup()->Freeze());
    suspended_ = true;
    Status snap = SnapshotLayer();
    if (!snap.ok()) {
      (void)current_->cgroup()->Thaw();
      suspended_ = false;
      return snap;
    }
    return SecondsSince(t0);
  }

  StatusOr<double> Resume() override {
    if (!current_) return FailedPrecondition("sandbox is destroyed");
    if (!suspended_) return FailedPrecondition("sandbox is not suspended");
    auto t0 = Clock::now();
    RETURN_IF_ERROR(current_->cgroup()->Thaw());
    suspended_ = false;
    return SecondsSince(t0);
  }

  Status PutFile(const std::string& path, const std::string& content, int mode) override {
    // Written from inside, as the sandbox user: a symlink planted by a tool cannot redirect
    // the write to the host (a write through /proc/PID/root could be).
    ExecSpec e;
    e.argv = {"/bin/sh",  "-c", "cat > \"$1\" && chmod \"$2\" \"$1\"",
              "put_file", path, fmt::format("{:o}", mode & 07777)};
    e.stdin_data = content;
    e.timeout_s = 30;
    ASSIGN_OR_RETURN(ExecResult r, Exec(e));
    if (r.status != ExecStatus::kOk || r.exit_code != 0) {
      return Status(Code::kFailedPrecondition, fmt::format("put_file {}: {}", path, r.stderr_tail));
    }
    return Status::Ok();
  }

  void Settle() override {
    if (current_) current_->WaitPrespawned();
  }
  void Kill() override {
    if (current_) current_->KillNow();
  }

  std::vector<std::string> NetworkIds() const override {
    std::vector<std::string> ids;
    int first = std::max(0, generation_ - 16);
    for (int g = first; g < generation_; ++g) ids.push_back(fmt::format("{}-{}", id_, g));
    return ids;
  }

  Status Reset() override {
    if (!current_) return FailedPrecondition("sandbox is destroyed");
    suspended_ = false;
    return current_->Reset();
  }

  Status ApplyLimits(const Limits& limits) override {
    if (!current_) return FailedPrecondition("sandbox is destroyed");
    RETURN_IF_ERROR(current_->ApplyLimits(limits));
    spec_.limits = DefaultedLimits(limits);
    return Status::Ok();
  }

  void Destroy(StageTimings* timings) override {
    if (auto spare = slot_->Close()) spare->Teardown(nullptr);
    if (current_) {
      current_->Teardown(timings);
      current_.reset();
    }
    if (!snapshot_root_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(snapshot_root_, ec);
      snapshot_root_.clear();
    }
    // LC-8: zero the secrets this sandbox held.
    for (auto& [k, v] : spec_.secrets) explicit_bzero(v.data(), v.size());
    spec_.secrets.clear();
  }

 private:
  struct SpawnConfig {
    std::string id_prefix;
    std::string lower;
    Limits limits;
    EgressPolicy egress;
    std::map<std::string, std::string> hosts;
    int generation;
    bool prespawn;
    std::function<Entrypoint(const Limits&)> entrypoint;
    bool wasm_host_signals;
  };

  SpawnConfig Config() {
    return {id_,
            durable_layer_.empty() ? image_dir_ : durable_layer_ + ":" + image_dir_,
            spec_.limits,
            spec_.egress,
            spec_.hosts,
            generation_++,
            prespawn_,
            flavor_.entrypoint,
            flavor_.wasm_host_signals};
  }

  // Builds one instance. Static: runs on background threads without touching the sandbox.
  static StatusOr<std::unique_ptr<Instance>> SpawnInstance(const BackendContext& ctx,
                                                           const SpawnConfig& c,
                                                           StageTimings* timings) {
    auto t0 = Clock::now();
    InstanceConfig cfg;
    cfg.id = fmt::format("{}-{}", c.id_prefix, c.generation);
    cfg.lower_dir = c.lower;
    cfg.limits = c.limits;
    cfg.prespawn = c.prespawn;
    cfg.entrypoint = c.entrypoint;
    cfg.wasm_host_signals = c.wasm_host_signals;
    if (!c.egress.empty()) {
      if (!ctx.egress)
        return Status(Code::kSandboxUnavailable, "egress is not available in this runtime");
      ASSIGN_OR_RETURN(net::EgressService * svc, ctx.egress());
      // One network per instance: a spare and the current instance are attached at once.
      ASSIGN_OR_RETURN(cfg.net, svc->Attach(cfg.id, c.egress, c.hosts));
    }
    double attach_s = SecondsSince(t0);
    auto inst = Instance::Spawn(ctx, std::move(cfg), timings);
    if (inst.ok() && timings && timings->allocate >= 0) timings->allocate += attach_s;
    return inst;
  }

  void ScheduleSpare() {
    const BackendContext* ctx = &ctx_;
    slot_->Schedule(
        ctx_.background, [ctx, cfg = Config()] { return SpawnInstance(*ctx, cfg, nullptr); },
        [](std::unique_ptr<Instance> stale) { stale->Teardown(nullptr); });
  }

  // The pre-spawned spare if it is there and current, else a synchronous spawn.
  StatusOr<std::unique_ptr<Instance>> TakeSpare() {
    if (auto spare = slot_->Take()) return spare;
    return SpawnInstance(ctx_, Config(), nullptr);
  }

  // Copies the writable directories (the whole filesystem layer: the rest of the root is
  // read-only) of the frozen instance into a durable layer on disk, and makes it the base of
  // every later instance (SNAP-2). Read as root through /proc/<init>/root with GNU tar, which
  // stores symlinks as symlinks and never follows them.
  Status SnapshotLayer() {
    if (ctx_.snapshot_dir.empty()) return Unsupported("no snapshot directory configured");
    snapshot_root_ = ctx_.snapshot_dir + "/" + id_;
    std::error_code ec;
    std::filesystem::create_directories(snapshot_root_, ec);
    if (ec) return Internal(fmt::format("snapshot dir {}: {}", snapshot_root_, ec.message()));
    int n = ++snapshots_;
    std::string tar = fmt::format("{}/layer-{}.tar", snapshot_root_, n);
    std::string dir = fmt::format("{}/layer-{}", snapshot_root_, n);
    RETURN_IF_ERROR(CopyWritableLayer(current_->init_pid(), tar, dir));
    durable_layer_ = dir;
    slot_->Invalidate();  // the spare was built from the old snapshot: it is stale now
    // The previous layer stays until the sandbox ends: the running instance may still have it
    // as its overlay's lower layer, and a lower layer must not change under a mounted overlay
    // (files vanished: native_revert_itest ASecondSuspendKeepsTheFilesOfTheFirst). One per suspend.
    if (keep_spare_) ScheduleSpare();
    return Status::Ok();
  }

  const BackendContext& ctx_;
  std::string id_;
  SandboxSpec spec_;
  std::string image_dir_;
  NativeFlavor flavor_;
  std::string durable_layer_;  // "" = golden snapshot (the image) only
  std::string snapshot_root_;
  int snapshots_ = 0;
  std::unique_ptr<Instance> current_;
  std::shared_ptr<SpareSlot<Instance>> slot_;
  int generation_ = 0;
  bool suspended_ = false;
  bool keep_spare_ = false;
  bool prespawn_ = false;
};

class NativeBackend final : public Backend {
 public:
  explicit NativeBackend(const BackendContext& ctx) : ctx_(ctx) {}
  std::string name() const override { return "native"; }

  Status Probe() override {
    if (geteuid() != 0) {
      return Status(Code::kPermissionDenied,
                    "native backend needs root (namespaces, cgroups, mounts)");
    }
    if (!ctx_.cgroups) return Unsupported("no usable cgroup hierarchy");
    if (access(ctx_.init_path.c_str(), X_OK) != 0)
      return ErrnoStatus("sbx-init at " + ctx_.init_path);
    std::ifstream fs("/proc/filesystems");
    std::string line;
    bool overlay = false;
    while (std::getline(fs, line)) overlay = overlay || line.find("overlay") != std::string::npos;
    if (!overlay) return Unsupported("the kernel has no overlay filesystem");
    return Status::Ok();
  }

  std::vector<std::string> Features() const override {
    return {"egress",        "revert",      "suspend",     "destroy",    "limits.cpu",
            "limits.memory", "limits.pids", "limits.disk", "limits.fds", "timeout",
            "tenants",       "trust",       "secrets",     "files"};
  }

  StatusOr<std::unique_ptr<Sandbox>> Create(const std::string& id, const SandboxSpec& spec,
                                            StageTimings* timings, CreateMode mode) override {
    auto t0 = Clock::now();
    ASSIGN_OR_RETURN(host::Image image, ctx_.images->Get(spec.template_name));
    double image_s = SecondsSince(t0);
    ASSIGN_OR_RETURN(auto sb,
                     CreateNativeSandbox(ctx_, id, spec, image.rootfs_dir, {}, timings, mode));
    if (timings && timings->allocate >= 0) timings->allocate += image_s;
    return sb;
  }

 private:
  const BackendContext& ctx_;
};

}  // namespace

StatusOr<std::unique_ptr<Sandbox>> CreateNativeSandbox(
    const BackendContext& ctx, const std::string& id, const SandboxSpec& spec,
    const std::string& image_dir, NativeFlavor flavor, StageTimings* timings, CreateMode mode) {
  auto sb = std::make_unique<NativeSandbox>(ctx, id, spec, image_dir, std::move(flavor));
  RETURN_IF_ERROR(sb->Start(timings, mode));
  return std::unique_ptr<Sandbox>(std::move(sb));
}

std::unique_ptr<Backend> MakeNativeBackend(const BackendContext& ctx) {
  return std::make_unique<NativeBackend>(ctx);
}

}  // namespace sbx::backend
