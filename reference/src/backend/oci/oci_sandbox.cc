#include "backend/oci/oci_sandbox.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "backend/common/limits.h"

namespace sbx::backend {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

ContainerSandbox::ContainerSandbox(const BackendContext& ctx, OciRuntime rt,
                                   std::string backend_name, std::string id, SandboxSpec spec,
                                   std::string image_dir)
    : ctx_(ctx),
      rt_(std::move(rt)),
      backend_name_(std::move(backend_name)),
      id_(std::move(id)),
      spec_(std::move(spec)),
      image_dir_(std::move(image_dir)),
      slot_(std::make_shared<SpareSlot<Container>>()) {
  spec_.limits = DefaultedLimits(spec_.limits);
}

Limits ContainerSandbox::HostLimits(const Limits& requested) const {
  return DefaultedLimits(requested);
}

Status ContainerSandbox::Reset() {
  if (destroyed_) return FailedPrecondition("sandbox is destroyed");
  auto s = Revert();
  return s.ok() ? Status::Ok() : s.status();
}

Status ContainerSandbox::ApplyLimits(const Limits& requested) {
  if (destroyed_ || !current_) return FailedPrecondition("sandbox is destroyed");
  Limits l = HostLimits(requested);
  if (l.disk_bytes != spec_.limits.disk_bytes) {
    return FailedPrecondition("the disk quota of a pooled sandbox is fixed at creation");
  }
  const int64_t nproc = GuestNproc(DefaultedLimits(requested));
  RETURN_IF_ERROR(current_->ApplyLimits(l, nproc));
  spec_.limits = l;
  guest_nproc_ = nproc;
  slot_->Invalidate();  // a spare made with the old limits is stale
  return Status::Ok();
}

ContainerSandbox::~ContainerSandbox() { ContainerSandbox::Destroy(nullptr); }

SandboxState ContainerSandbox::state() const {
  if (destroyed_) return SandboxState::kDestroyed;
  if (suspended_) return SandboxState::kSuspended;
  if (!current_ || current_->crashed()) return SandboxState::kCrashed;
  return SandboxState::kRunning;
}

InstanceRequest ContainerSandbox::NextRequest() {
  InstanceRequest r;
  r.sandbox_id = id_;
  r.generation = generation_++;
  r.image_dir = image_dir_;
  r.layer_dir = layer_dir_;
  r.restore_image = restore_image_;
  r.limits = spec_.limits;
  r.guest_nproc = guest_nproc_;
  r.egress = spec_.egress;
  r.hosts = spec_.hosts;
  r.env = spec_.env;
  return r;
}

Status ContainerSandbox::StartFirst(StageTimings* timings, bool keep_spare) {
  keep_spare_ = keep_spare;
  ASSIGN_OR_RETURN(current_, StartInstance(ctx_, rt_, NextRequest(), timings));
  if (keep_spare_) ScheduleSpare();
  return Status::Ok();
}

void ContainerSandbox::ScheduleSpare() {
  const BackendContext* ctx = &ctx_;
  OciRuntime rt = rt_;
  InstanceRequest req = NextRequest();
  slot_->Schedule(
      ctx_.background, [ctx, rt, req]() { return StartInstance(*ctx, rt, req, nullptr); },
      [](std::unique_ptr<Container> c) { c->Teardown(nullptr); });
}

StatusOr<std::unique_ptr<Container>> ContainerSandbox::TakeSpare() {
  if (auto spare = slot_->Take()) return spare;
  return StartInstance(ctx_, rt_, NextRequest(), nullptr);
}

void ContainerSandbox::Retire(std::unique_ptr<Container> old) {
  if (!old) return;
  old->KillNow();
  std::shared_ptr<Container> dying(std::move(old));
  ctx_.background([dying] { dying->Teardown(nullptr); });
}

StatusOr<std::string> ContainerSandbox::SnapshotRoot() {
  if (snapshot_root_.empty()) {
    std::string base =
        ctx_.snapshot_dir.empty() ? ctx_.state_dir + "/snapshots" : ctx_.snapshot_dir;
    snapshot_root_ = base + "/" + id_;
    std::error_code ec;
    std::filesystem::create_directories(snapshot_root_, ec);
    if (ec) return Internal(fmt::format("snapshot dir {}: {}", snapshot_root_, ec.message()));
    chmod(snapshot_root_.c_str(), 0700);
  }
  return snapshot_root_;
}

StatusOr<ExecResult> ContainerSandbox::Exec(const ExecSpec& exec) {
  if (destroyed_) return FailedPrecondition("sandbox is destroyed");
  if (suspended_) return FailedPrecondition("sandbox is suspended; resume it first");
  if (!current_ || current_->crashed()) {
    ExecResult r;
    r.status = ExecStatus::kSandboxUnavailable;
    r.state = SandboxState::kCrashed;
    r.reason = "the sandbox crashed; revert it before running another command";
    r.error_code = "sandbox_crashed";
    r.backend = backend_name_;
    r.sandbox_id = id_;
    return r;
  }
  held_secrets_ = held_secrets_ || !spec_.secrets.empty() || !exec.secrets.empty();
  ASSIGN_OR_RETURN(ExecResult r, current_->Exec(exec, spec_.secrets));
  r.backend = backend_name_;
  r.sandbox_id = id_;
  return r;
}

// SNAP-2: back to the latest durable snapshot. The old container is killed at once (nothing of
// it can outlive the revert) and torn down in the background.
StatusOr<double> ContainerSandbox::Revert() {
  if (destroyed_) return FailedPrecondition("sandbox is destroyed");
  auto t0 = Clock::now();
  Retire(std::move(current_));
  suspended_ = false;
  held_secrets_ = false;  // a fresh container from a snapshot that never held them
  ASSIGN_OR_RETURN(current_, TakeSpare());
  if (keep_spare_) ScheduleSpare();
  return SecondsSince(t0);
}

Status ContainerSandbox::PutFile(const std::string& path, const std::string& content, int mode) {
  // Written from inside, as the sandbox user: a symlink planted by a tool cannot redirect the
  // write to the host.
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

void ContainerSandbox::Kill() {
  if (current_) current_->KillNow();
}

std::vector<std::string> ContainerSandbox::NetworkIds() const {
  std::vector<std::string> ids;
  int first = std::max(0, generation_ - 16);
  for (int g = first; g < generation_; ++g) ids.push_back(InstanceId(id_, g));
  return ids;
}

void ContainerSandbox::Settle() {
  if (current_ && !destroyed_ && !suspended_) current_->WaitPrespawned();
}

void ContainerSandbox::Destroy(StageTimings* timings) {
  if (destroyed_) return;
  destroyed_ = true;
  // The spare (a whole container) is reclaimed beside the current one, on another background
  // thread: the sandbox's reclaim costs one container's teardown, not two in a row (NFR-4).
  if (auto spare = slot_->Close()) {
    std::shared_ptr<Container> dying(std::move(spare));
    dying->KillNow();
    ctx_.background([dying] { dying->Teardown(nullptr); });
  }
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

}  // namespace sbx::backend
