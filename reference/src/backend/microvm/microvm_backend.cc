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
//
// This file is the Backend: the probe, the golden templates (one per tool image, booted once and
// kept on disk) and their spare clones; the sandbox is microvm_sandbox.h.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>

#include "backend/backend.h"
#include "backend/common/limits.h"
#include "backend/common/probe_cache.h"
#include "backend/common/spawn.h"
#include "backend/microvm/microvm_cpio.h"
#include "backend/microvm/microvm_sandbox.h"
#include "host/image.h"
#include "host/sha256.h"

namespace sbx::backend {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kGuestRef = "microvm-guest";

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
    double template_s = SecondsSince(t0);
    ASSIGN_OR_RETURN(
        auto sb, StartMicrovmSandbox(ctx_, taps_.get(), std::move(spares), id, s, timings, mode));
    if (timings && timings->allocate >= 0) timings->allocate += template_s;
    return sb;
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
