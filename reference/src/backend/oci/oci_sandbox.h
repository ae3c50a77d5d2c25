// A sandbox of the oci (BK-3) or gvisor (BK-4) backend: a sequence of containers, like a
// native sandbox is a sequence of instances (docs/snapshots.md). Revert kills the current
// container at once, swaps in the spare (pre-started in the background from the latest durable
// snapshot) and tears the old one down off the caller's path. What a durable snapshot is, and
// how suspend/resume work, is the backend's: a filesystem layer for oci, a `runsc checkpoint`
// image for gvisor.
//
// Thread-safety: as every Sandbox, used by one caller at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/common/spare_slot.h"
#include "backend/oci/oci_container.h"

namespace sbx::backend {

class ContainerSandbox : public Sandbox {
 public:
  ContainerSandbox(const BackendContext& ctx, OciRuntime rt, std::string backend_name,
                   std::string id, SandboxSpec spec, std::string image_dir);
  ~ContainerSandbox() override;

  const std::string& id() const override { return id_; }
  SandboxState state() const override;
  StatusOr<ExecResult> Exec(const ExecSpec& exec) override;
  StatusOr<double> Revert() override;
  Status PutFile(const std::string& path, const std::string& content, int mode) override;
  void Destroy(StageTimings* timings) override;
  void Kill() override;
  void Settle() override;
  std::vector<std::string> NetworkIds() const override;
  // POOL-7: a fresh container (as a revert); POOL-2: the next user's CPU, memory, PIDs and
  // descriptor limits (the disk quota is the size of a tmpfs made at start: fixed).
  Status Reset() override;
  Status ApplyLimits(const Limits& limits) override;

  // Whether a spare is ready now (measurements: revert with and without a ready spare).
  bool SpareReady() { return slot_->Ready(); }

 protected:
  // The next instance's request: generation, durable state (layer or checkpoint image).
  virtual InstanceRequest NextRequest();
  // The limits a container is given for the requested ones (gVisor adds its own threads).
  virtual Limits HostLimits(const Limits& requested) const;
  // The RLIMIT_NPROC every command gets for the requested (defaulted) limits; 0: none (the
  // host's pids.max is the limit). gvisor: the requested pids, held by the Sentry.
  virtual int64_t GuestNproc(const Limits&) const { return 0; }
  // Starts the first container; `keep_spare` pre-starts the next one in the background.
  Status StartFirst(StageTimings* timings, bool keep_spare);
  void ScheduleSpare();
  // The ready spare, or a container started now.
  StatusOr<std::unique_ptr<Container>> TakeSpare();
  // Kills `old` now and tears it down in the background.
  void Retire(std::unique_ptr<Container> old);
  // The directory for this sandbox's durable snapshots (created on first use).
  StatusOr<std::string> SnapshotRoot();

  const BackendContext& ctx_;
  OciRuntime rt_;
  std::string backend_name_;
  std::string id_;
  SandboxSpec spec_;         // its limits: the host's (HostLimits)
  int64_t guest_nproc_ = 0;  // GuestNproc of the requested limits
  std::string image_dir_;
  std::string layer_dir_;      // oci: durable filesystem layer (suspend)
  std::string restore_image_;  // gvisor: durable checkpoint (golden, or the latest suspend)
  std::string snapshot_root_;
  std::unique_ptr<Container> current_;
  std::shared_ptr<SpareSlot<Container>> slot_;
  int generation_ = 0;
  bool keep_spare_ = false;
  bool suspended_ = false;
  bool destroyed_ = false;
  // LC-4: secrets were handed to a process of the current container (the sandbox's own or a
  // command's) since it started. A gVisor checkpoint holds every process's memory, so it would
  // write them to disk: gvisor refuses to suspend then.
  bool held_secrets_ = false;
};

}  // namespace sbx::backend
