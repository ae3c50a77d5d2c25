// The gvisor backend (BK-4): a sandbox is a gVisor container (runsc): the tool's system calls
// are served by the Sentry, a user-space kernel, and never reach the host kernel directly.
//
// On this host (docs/backends.md has the probe results and the figures):
//  * platform: probed, not assumed. runsc 2022-12 offers ptrace and kvm; kvm hangs here (the
//    sandbox never comes up), ptrace works. SBX_GVISOR_PLATFORM overrides the choice.
//  * network: --network=none (loopback only, SNAP-5) without an egress policy; with one, the
//    container joins the instance's egress namespace (linux.namespaces network path) with
//    --network=sandbox, so gVisor's own network stack takes over the namespace's veth and the
//    gateway sees the sandbox's address as for native. (runsc refuses to run with a network in
//    what it thinks is the root namespace, which it decides from /proc/sys/net/core/
//    rmem_default — present in every namespace on kernel 6.18: runsc commands run with an
//    empty tmpfs over /proc/sys/net, common/spawn.h.)
//  * limits: --ignore-cgroups, and runsc is started inside the sandbox's cgroup, so the
//    Sentry, the Gofer and the ptrace stubs are all in it: CPU and memory hold for the whole
//    sandbox (the Sentry included). The requested pids bound the guest's processes through
//    the Sentry's own count (every command's RLIMIT_NPROC: a fork bomb's fork fails with
//    EAGAIN, as under pids.max natively); pids.max counts gVisor's host tasks (about 12 per
//    guest process on ptrace) and is set to a ceiling above that (GvisorHostLimits).
//  * snapshots: a persistent sandbox takes a golden `runsc checkpoint` at create (SNAP-1);
//    every later container is a `runsc restore` of the latest durable checkpoint (SNAP-2), and
//    a spare is restored in the background so that a revert is a swap. Suspend = checkpoint
//    (durable process state: memory, processes, the tmpfs /work), resume = restore (SNAP-3).
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "backend/backend.h"
#include "backend/common/limits.h"
#include "backend/common/probe_cache.h"
#include "backend/common/spawn.h"
#include "backend/oci/oci_container.h"
#include "backend/oci/oci_sandbox.h"
#include "host/image.h"
#include "host/random_hex.h"

namespace sbx::backend {
namespace {

using Clock = std::chrono::steady_clock;

// gVisor's own host threads (Sentry, Gofer, ptrace stubs) count against pids.max: about 20 at
// rest here, and on ptrace about 12 more per guest process (40 guest processes: 489 host
// tasks, 80: 1012; measured 2026-12-03). The guest's processes are held to the requested
// pids by the Sentry (RLIMIT_NPROC of every command, GuestNproc); the host's pids.max is a
// ceiling on gVisor's own tasks, sized so that processes that fit the guest's limit fit it. A
// bomb retrying failed forks costs host tasks too (30 processes retrying: 1038 tasks), so there
// the ceiling may end the sandbox first: resource_exceeded, never more guest processes.
constexpr int64_t kHostThreadAllowance = 64;
constexpr int64_t kHostTasksPerGuestProcess = 16;

// Platforms in order of preference (faster first); those this runsc lists are probed.
constexpr const char* kPlatformPreference[] = {"systrap", "kvm", "ptrace"};
constexpr double kPlatformProbeTimeoutS = 4;

// The runtime flags for one sandbox: its network mode depends on its egress policy.
OciRuntime ForSandbox(OciRuntime rt, bool egress) {
  if (egress) {
    rt.global.push_back("--network=sandbox");
    rt.hide_dirs.push_back("/proc/sys/net");
  } else {
    rt.global.push_back("--network=none");
  }
  return rt;
}

Limits GvisorHostLimits(const Limits& l) {
  Limits out = DefaultedLimits(l);
  out.pids = kHostThreadAllowance + kHostTasksPerGuestProcess * out.pids;
  return out;
}

class GvisorSandbox final : public ContainerSandbox {
 public:
  using ContainerSandbox::ContainerSandbox;
  ~GvisorSandbox() override { Destroy(nullptr); }

  Limits HostLimits(const Limits& requested) const override { return GvisorHostLimits(requested); }
  int64_t GuestNproc(const Limits& requested) const override { return requested.pids; }

  Status Start(StageTimings* timings, CreateMode mode) {
    guest_nproc_ = GuestNproc(spec_.limits);  // already defaulted
    spec_.limits = HostLimits(spec_.limits);
    if (mode != CreateMode::kPersistent) return StartFirst(timings, false);
    // SNAP-1: the golden checkpoint: a fresh container, checkpointed as soon as it runs.
    auto t0 = Clock::now();
    ASSIGN_OR_RETURN(std::string root, SnapshotRoot());
    ASSIGN_OR_RETURN(auto golden, StartInstance(ctx_, rt_, NextRequest(), timings));
    RETURN_IF_ERROR(golden->Checkpoint(root + "/golden").WithContext("golden checkpoint"));
    Retire(std::move(golden));
    restore_image_ = golden_image_ = root + "/golden";
    // The first container is a restore of the golden checkpoint, like every later one.
    ASSIGN_OR_RETURN(current_, StartInstance(ctx_, rt_, NextRequest(), nullptr));
    keep_spare_ = true;
    ScheduleSpare();
    if (timings && timings->initialize >= 0)
      timings->initialize = SecondsSince(t0) - timings->allocate;
    return Status::Ok();
  }

  // SNAP-3: the whole state (processes, memory, the tmpfs /work) goes to a checkpoint image on
  // disk, which becomes the latest durable snapshot (SNAP-2). The container stops.
  StatusOr<double> Suspend() override {
    if (destroyed_) return FailedPrecondition("sandbox is destroyed");
    if (suspended_) return FailedPrecondition("sandbox is already suspended");
    if (!current_ || current_->crashed())
      return FailedPrecondition("sandbox crashed; revert it first");
    if (held_secrets_) {
      // SECURITY (LC-4): a checkpoint is the memory of every process, environments included.
      return FailedPrecondition(
          "suspend refused: commands of this sandbox were given secrets, and a gVisor "
          "checkpoint (the memory of every process) would write them to disk (LC-4); revert "
          "first, or keep secrets out of sandboxes that must be suspended");
    }
    auto t0 = Clock::now();
    ASSIGN_OR_RETURN(std::string root, SnapshotRoot());
    std::string image = fmt::format("{}/suspend-{}", root, ++suspends_);
    Status st = current_->Checkpoint(image);
    Retire(std::move(current_));
    if (!st.ok()) {
      std::error_code ec;
      std::filesystem::remove_all(image, ec);
      // The sandbox is crashed now (runsc ends a container whose checkpoint failed): a revert
      // restores the previous snapshot. gVisor cannot save a descriptor that came from the
      // host: a background process that kept a command's output (a host pipe) open.
      return Status(Code::kToolError,
                    "suspend: gVisor could not save the sandbox (" + st.message() +
                        "); a background process probably kept a command's output open — "
                        "detach it (</dev/null >/dev/null 2>&1). Revert returns to the "
                        "previous snapshot.");
    }
    std::string previous = restore_image_;
    fallback_image_ = golden_image_;
    restore_image_ = image;
    slot_->Invalidate();
    suspended_ = true;
    if (previous.find("/suspend-") != std::string::npos) {
      std::error_code ec;
      std::filesystem::remove_all(previous, ec);
    }
    return SecondsSince(t0);
  }

  // Restores the suspended state into a new container (and network namespace).
  StatusOr<double> Resume() override {
    if (destroyed_) return FailedPrecondition("sandbox is destroyed");
    if (!suspended_) return FailedPrecondition("sandbox is not suspended");
    auto t0 = Clock::now();
    auto restored = TakeSpare();
    suspended_ = false;
    if (!restored.ok()) {
      // gVisor cannot restore every checkpoint: a process that still holds a host descriptor
      // (typically a background process that kept a command's stdout, which is a host pipe)
      // fails at restore. That snapshot is unusable: the latest durable one before it becomes
      // current again, and the sandbox needs a revert (it is CRASHED until then).
      std::error_code ec;
      std::filesystem::remove_all(restore_image_, ec);
      restore_image_ = fallback_image_;
      slot_->Invalidate();
      return Status(
          Code::kToolError,
          "resume: the suspended state cannot be restored (" + restored.status().message() +
              "); a background process probably kept a command's output open — detach "
              "it (</dev/null >/dev/null 2>&1). Revert returns to the previous snapshot.");
    }
    current_ = std::move(restored).value();
    if (keep_spare_) ScheduleSpare();
    return SecondsSince(t0);
  }

 private:
  int suspends_ = 0;
  std::string golden_image_, fallback_image_;
};

class GvisorBackend final : public Backend {
 public:
  explicit GvisorBackend(const BackendContext& ctx) : ctx_(ctx) { rt_.flavor = OciFlavor::kRunsc; }
  std::string name() const override { return "gvisor"; }
  std::string Implementation() const override { return "runsc, platform " + platform_; }

  Status Probe() override {
    if (geteuid() != 0) return Status(Code::kPermissionDenied, "the gvisor backend needs root");
    if (!ctx_.cgroups) return Unsupported("no usable cgroup hierarchy");
    if (!ctx_.images || !ctx_.seccomp) return Unsupported("no image store or seccomp filter");
    rt_.binary = FindExecutable("runsc");
    if (rt_.binary.empty()) return Unsupported("runsc is not installed (apt-get install runsc)");
    rt_.root = ctx_.state_dir + "/runsc";

    const std::string state_root = std::filesystem::path(ctx_.state_dir).parent_path().string();
    // runsc's platform list: a Go binary's start (tens of ms, on every runtime open) for an
    // answer that changes only with the binary, so it is remembered like the probe (issue 16).
    const std::string list_cache = state_root + "/probe-gvisor-platforms.json";
    const std::string list_key = ProbeKey(rt_.binary, "help platforms");
    std::string platforms;
    if (auto hit = ReadProbeCache(list_cache, list_key); hit && hit->value("ok", false)) {
      platforms = hit->value("platforms", "");
    } else {
      auto listed = RunCommand(SpawnPlan{.argv = {rt_.binary, "help", "platforms"}}, 10);
      if (!listed.ok()) return listed.status();
      platforms = listed->out;
      if (listed->ok())
        WriteProbeCache(list_cache, list_key, {{"ok", true}, {"platforms", platforms}});
    }
    std::vector<std::string> candidates;
    const char* forced = std::getenv("SBX_GVISOR_PLATFORM");
    for (const char* p : kPlatformPreference) {
      bool has = false;
      std::istringstream is(platforms);
      std::string w;
      while (is >> w) has = has || w == p;
      if (has && (!forced || !*forced || std::string(forced) == p)) candidates.push_back(p);
    }
    if (candidates.empty()) {
      return Unsupported(
          fmt::format("no usable gVisor platform (runsc lists: {}{})", platforms,
                      forced ? std::string(" ; SBX_GVISOR_PLATFORM=") + forced : ""));
    }
    std::string cache = state_root + "/probe-gvisor.json";
    std::string key = ProbeKey(rt_.binary, fmt::format("{}", fmt::join(candidates, ",")));
    if (auto hit = ReadProbeCache(cache, key)) {
      if (!hit->value("ok", false)) return Unsupported(hit->value("reason", "probe failed"));
      platform_ = hit->value("platform", "");
      findings_ = hit->value("findings", "");
    } else {
      std::string chosen;
      for (const std::string& p : candidates) {
        auto t0 = Clock::now();
        Status s = TryPlatform(p);
        findings_ += fmt::format("{}{}: {} ({:.2f} s)", findings_.empty() ? "" : "; ", p,
                                 s.ok() ? "works" : s.message(), SecondsSince(t0));
        if (s.ok() && chosen.empty()) chosen = p;
        if (s.ok()) break;  // candidates are in order of preference
      }
      if (chosen.empty()) {
        std::string reason = "no gVisor platform works here: " + findings_;
        WriteProbeCache(cache, key, {{"ok", false}, {"reason", reason}});
        return Unsupported(reason);
      }
      platform_ = chosen;
      WriteProbeCache(cache, key, {{"ok", true}, {"platform", platform_}, {"findings", findings_}});
    }
    rt_.global = BaseFlags(platform_);
    return Status::Ok();
  }

  std::vector<std::string> Features() const override {
    // No limits.disk: the writable directories are tmpfs mounts inside the Sentry, each as big
    // as the quota and all counted against the memory limit, but the runtime cannot watch them
    // from outside to report a breach.
    return {"egress",        "revert",      "suspend",    "destroy", "limits.cpu",
            "limits.memory", "limits.pids", "limits.fds", "timeout", "tenants",
            "trust",         "secrets",     "files"};
  }

  StatusOr<std::unique_ptr<Sandbox>> Create(const std::string& id, const SandboxSpec& spec,
                                            StageTimings* timings, CreateMode mode) override {
    auto t0 = Clock::now();
    ASSIGN_OR_RETURN(host::Image image, ctx_.images->Get(spec.template_name));
    double image_s = SecondsSince(t0);
    auto sb = std::make_unique<GvisorSandbox>(ctx_, ForSandbox(rt_, !spec.egress.empty()), "gvisor",
                                              id, spec, image.rootfs_dir);
    RETURN_IF_ERROR(sb->Start(timings, mode));
    if (timings && timings->allocate >= 0) timings->allocate += image_s;
    return std::unique_ptr<Sandbox>(std::move(sb));
  }

 private:
  static std::vector<std::string> BaseFlags(const std::string& platform) {
    // --ignore-cgroups: runsc runs inside the sandbox's cgroup (made by the backend); with it,
    // runsc does not touch cgroups itself. --oci-seccomp: the Sentry takes the spec's filter
    // for the container's own process; runsc 2022-12 does not apply it to `runsc exec`
    // processes (docs/backends.md): for the tools, the Sentry itself is the syscall boundary.
    return {"--platform=" + platform, "--ignore-cgroups", "--oci-seccomp"};
  }

  // A container on `platform`, one command in it, everything removed; bounded in time (a
  // platform that hangs is killed with the whole cgroup).
  Status TryPlatform(const std::string& platform) {
    ASSIGN_OR_RETURN(host::Image image, ctx_.images->Get("sandbox"));
    OciRuntime rt = rt_;
    rt.global = BaseFlags(platform);
    rt = ForSandbox(rt, false);
    InstanceRequest req;
    req.sandbox_id = "probe" + host::RandomHex(4);
    req.image_dir = image.rootfs_dir;
    req.limits = GvisorHostLimits({});
    ContainerConfig cfg;
    cfg.id = InstanceId(req.sandbox_id, 0);
    cfg.container_id = fmt::format("sbx-{}-{}", ctx_.runtime_id, cfg.id);
    cfg.image_dir = req.image_dir;
    cfg.limits = req.limits;
    cfg.start_timeout_s = kPlatformProbeTimeoutS;
    ASSIGN_OR_RETURN(auto c, Container::Start(ctx_, rt, std::move(cfg), nullptr));
    auto r = c->Exec(ExecSpec{.command = "test \"$(id -u)\" = 1000 && echo ok",
                              .timeout_s = kPlatformProbeTimeoutS},
                     {});
    c->Teardown(nullptr);
    if (!r.ok()) return r.status();
    if (r->status != ExecStatus::kOk || r->stdout_tail != "ok\n") {
      return Unsupported(
          fmt::format("a probe sandbox did not run: {} {}", r->reason, r->stderr_tail));
    }
    return Status::Ok();
  }

  const BackendContext& ctx_;
  OciRuntime rt_;
  std::string platform_, findings_;
};

}  // namespace

std::unique_ptr<Backend> MakeGvisorBackend(const BackendContext& ctx) {
  return std::make_unique<GvisorBackend>(ctx);
}

}  // namespace sbx::backend
