// The oci backend (BK-3): a sandbox is an OCI container run by crun (default) or runc, built
// from the content-addressed image and the request (oci_bundle.cc), with the same rules as
// native (read-only root, uid 1000, no capabilities, no_new_privs, the seccomp deny-list,
// RLIMIT_NOFILE, new namespaces, the egress namespace or none).
//
// The OCI runtime is chosen by SBX_OCI_RUNTIME=crun|runc (default crun), read when the runtime
// opens; the backend's name (and every result's `backend`) is "oci" either way: selection ranks
// isolation classes, not implementations (docs/backends.md).
//
// Limits: the backend makes the sandbox's cgroup itself (host::CgroupManager, below the
// runtime's own cgroup) and starts the OCI runtime inside it, because on this hybrid host
// crun cannot manage cgroups at all (it runs with --cgroup-manager=disabled) and runc would
// create its cgroups outside the runtime's own. runc still nests its cgroup below ours.
#include <fmt/format.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "backend/backend.h"
#include "backend/common/fs_layer.h"
#include "backend/common/limits.h"
#include "backend/common/probe_cache.h"
#include "backend/common/spawn.h"
#include "backend/oci/oci_container.h"
#include "backend/oci/oci_sandbox.h"
#include "host/cgroup.h"
#include "host/image.h"
#include "host/random_hex.h"

namespace sbx::backend {
namespace {

using Clock = std::chrono::steady_clock;

// The cgroup2 mount points of a hybrid host (v1 controllers in use, plus a cgroup2 mount):
// crun must not see them (common/spawn.h).
std::vector<std::string> HybridV2Mounts(const host::CgroupManager& cgroups) {
  std::vector<std::string> out;
  if (cgroups.version() != host::CgroupVersion::kV1) return out;
  std::ifstream mi("/proc/self/mountinfo");
  std::string line;
  while (std::getline(mi, line)) {
    auto dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    // fields: id parent major:minor root mount-point ...
    std::istringstream is(line);
    std::string id, parent, dev, root, mount_point;
    is >> id >> parent >> dev >> root >> mount_point;
    out.push_back(mount_point);
  }
  return out;
}

class OciSandbox final : public ContainerSandbox {
 public:
  using ContainerSandbox::ContainerSandbox;
  ~OciSandbox() override { Destroy(nullptr); }

  Status Start(StageTimings* timings, CreateMode mode) {
    return StartFirst(timings, mode == CreateMode::kPersistent);
  }

  // SNAP-3 (oci), as native: freeze every process (cgroup freezer) and make the filesystem
  // layer a durable snapshot; a later revert returns to it (SNAP-2). Process state is not
  // durable on this backend (no CRIU here).
  StatusOr<double> Suspend() override {
    if (destroyed_ || !current_) return FailedPrecondition("sandbox is destroyed");
    if (suspended_) return FailedPrecondition("sandbox is already suspended");
    if (current_->crashed()) return FailedPrecondition("sandbox crashed; revert it first");
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
    if (destroyed_ || !current_) return FailedPrecondition("sandbox is destroyed");
    if (!suspended_) return FailedPrecondition("sandbox is not suspended");
    auto t0 = Clock::now();
    RETURN_IF_ERROR(current_->cgroup()->Thaw());
    suspended_ = false;
    return SecondsSince(t0);
  }

 private:
  // The writable directories of the frozen container, read as root through its init's root
  // with GNU tar (symlinks stored, never followed), become the layer above the image of every
  // later container.
  Status SnapshotLayer() {
    ASSIGN_OR_RETURN(std::string root, SnapshotRoot());
    int n = ++snapshots_;
    std::string tar = fmt::format("{}/layer-{}.tar", root, n);
    std::string dir = fmt::format("{}/layer-{}", root, n);
    RETURN_IF_ERROR(CopyWritableLayer(current_->init_pid(), tar, dir));
    layer_dir_ = dir;
    slot_->Invalidate();  // the spare was built from the old snapshot
    // The previous layer stays until the sandbox ends: the running instance may still have it
    // as its overlay's lower layer, and a lower layer must not change under a mounted overlay
    // (files vanished: native_revert_itest ASecondSuspendKeepsTheFilesOfTheFirst). One per suspend.
    if (keep_spare_) ScheduleSpare();
    return Status::Ok();
  }

  int snapshots_ = 0;
};

class OciBackend final : public Backend {
 public:
  explicit OciBackend(const BackendContext& ctx) : ctx_(ctx) {
    const char* env = std::getenv("SBX_OCI_RUNTIME");
    std::string want = env && *env ? env : "crun";
    rt_.flavor = want == "runc" ? OciFlavor::kRunc : OciFlavor::kCrun;
    requested_ = want;
  }
  std::string name() const override { return "oci"; }
  std::string Implementation() const override { return version_.empty() ? rt_.name() : version_; }

  Status Probe() override {
    if (requested_ != "crun" && requested_ != "runc") {
      return InvalidArgument(fmt::format("SBX_OCI_RUNTIME={}: must be crun or runc", requested_));
    }
    if (geteuid() != 0) return Status(Code::kPermissionDenied, "the oci backend needs root");
    if (!ctx_.cgroups) return Unsupported("no usable cgroup hierarchy");
    if (!ctx_.images || !ctx_.seccomp) return Unsupported("no image store or seccomp filter");
    rt_.binary = FindExecutable(rt_.name());
    if (rt_.binary.empty()) {
      return Unsupported(
          fmt::format("{} is not installed (apt-get install {})", rt_.name(), rt_.name()));
    }
    rt_.root = ctx_.state_dir + "/" + rt_.name();
    rt_.sealed = std::make_shared<const SealedBinary>(rt_.binary);  // copied on first use
    if (rt_.flavor == OciFlavor::kCrun) {
      // crun 1.8.1 cannot manage cgroups on this layout at all; the backend does it.
      rt_.global = {"--cgroup-manager=disabled"};
      rt_.hide_dirs = HybridV2Mounts(*ctx_.cgroups);
    }
    std::ifstream fs("/proc/filesystems");
    std::string line;
    bool overlay = false;
    while (std::getline(fs, line)) overlay = overlay || line.find("overlay") != std::string::npos;
    if (!overlay) return Unsupported("the kernel has no overlay filesystem");

    // A real container, once per boot and binary (common/probe_cache.h).
    std::string cache = std::filesystem::path(ctx_.state_dir).parent_path().string() +
                        "/probe-oci-" + rt_.name() + ".json";
    std::string key = ProbeKey(rt_.binary, fmt::format("{}", fmt::join(rt_.hide_dirs, ",")));
    if (auto hit = ReadProbeCache(cache, key)) {
      if (!hit->value("ok", false)) return Unsupported(hit->value("reason", "probe failed"));
      version_ = hit->value("version", "");
      return Status::Ok();
    }
    auto t0 = Clock::now();
    Status live = LiveProbe();
    if (!live.ok()) {
      Status failed = live.WithContext(fmt::format("{} probe", rt_.name()));
      WriteProbeCache(cache, key, {{"ok", false}, {"reason", failed.message()}});
      return failed;
    }
    WriteProbeCache(cache, key,
                    {{"ok", true}, {"version", version_}, {"seconds", SecondsSince(t0)}});
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
    auto sb = std::make_unique<OciSandbox>(ctx_, rt_, "oci", id, spec, image.rootfs_dir);
    RETURN_IF_ERROR(sb->Start(timings, mode));
    if (timings && timings->allocate >= 0) timings->allocate += image_s;
    return std::unique_ptr<Sandbox>(std::move(sb));
  }

 private:
  Status LiveProbe() {
    auto ver = RunCommand(SpawnPlan{.argv = {rt_.binary, "--version"}}, 10);
    if (!ver.ok()) return ver.status();
    if (!ver->ok())
      return Unsupported(fmt::format("{} --version: {}", rt_.name(), ver->Describe()));
    version_ = ver->out.substr(0, ver->out.find('\n'));
    ASSIGN_OR_RETURN(host::Image image, ctx_.images->Get("sandbox"));
    InstanceRequest req;
    req.sandbox_id = "probe" + host::RandomHex(4);
    req.image_dir = image.rootfs_dir;
    req.limits = DefaultedLimits({});
    ASSIGN_OR_RETURN(auto c, StartInstance(ctx_, rt_, req, nullptr));
    auto r =
        c->Exec(ExecSpec{.command = "test \"$(id -u)\" = 1000 && echo ok", .timeout_s = 20}, {});
    c->Teardown(nullptr);
    if (!r.ok()) return r.status();
    if (r->status != ExecStatus::kOk || r->stdout_tail != "ok\n") {
      return Unsupported(
          fmt::format("a probe container did not run: {} {}", r->reason, r->stderr_tail));
    }
    return Status::Ok();
  }

  const BackendContext& ctx_;
  OciRuntime rt_;
  std::string requested_, version_;
};

}  // namespace

std::unique_ptr<Backend> MakeOciBackend(const BackendContext& ctx) {
  return std::make_unique<OciBackend>(ctx);
}

}  // namespace sbx::backend
