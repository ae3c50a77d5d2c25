// One container of the oci (BK-3) or gvisor (BK-4) backend, driven through the OCI runtime's
// command line: crun, runc or runsc. Like a native instance, it is one incarnation of a
// sandbox; revert replaces it with a fresh one.
//
// A container is:
//  * a cgroup made by the runtime's CgroupManager ("sb-<id>", below the runtime's own cgroup),
//    holding the limits (RES-1, RES-2, RES-4). The OCI runtime is started inside it, so every
//    process of the container (crun/runc: the init and every command; runsc: the Sentry, the
//    Gofer and the ptrace stubs) is in it whatever the runtime does with cgroups itself;
//  * an OCI bundle in <state>/sb/<id>/ (config.json; for crun/runc the root is an overlay of the
//    image under a size-limited tmpfs, mounted in the runtime command's private mount
//    namespace: see common/spawn.h);
//  * the container itself. crun/runc: its init is sbx-init in agent mode (init/sbx_init.cc),
//    reached over a socket passed in at create (--preserve-fds), so a command is a fork inside
//    the container, the protocol and client those of native (backend/init_client.h). runsc:
//    the init is a shell that only blocks and reaps orphans (uid 0, no capabilities, so a tool
//    cannot signal it), and each command is `runsc exec` (a host socket's descriptors cannot
//    cross into the Sentry, and a checkpoint could not hold the socket);
//  * optionally the instance's egress network namespace (net::Attachment).
//
// Ownership: a Container owns its cgroup, attachment, state directory and the runtime's record
// of the container; Teardown() (or the destructor) kills every process and removes all of it.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/common/init_client.h"
#include "backend/common/spawn.h"
#include "host/cgroup.h"
#include "host/fd.h"
#include "net/egress.h"
#include "sbx/model.h"

namespace sbx::backend {

enum class OciFlavor { kCrun, kRunc, kRunsc };

// How to drive one OCI runtime on this host (what the backend's probe found).
struct OciRuntime {
  OciFlavor flavor = OciFlavor::kCrun;
  std::string binary;                  // absolute path
  std::string root;                    // --root: the runtime's state, below our state dir
  std::vector<std::string> global;     // flags after --root, before the verb
  std::vector<std::string> hide_dirs;  // empty tmpfs over each, in a private mount namespace
  // crun/runc: the binary sealed in memory, executed instead of `binary` (common/spawn.h); null
  // for runsc. Shared by every copy of this runtime (one copy of the binary per runtime).
  std::shared_ptr<const SealedBinary> sealed;
  std::string name() const;  // "crun" | "runc" | "runsc"
  std::vector<std::string> Argv(const std::vector<std::string>& verb_and_args) const;
};

struct ContainerConfig {
  std::string id;            // "<sandbox>-<generation>": cgroup "sb-<id>", <state>/sb/<id>
  std::string container_id;  // the OCI runtime's name for it (unique on the host)
  std::string image_dir;     // the image's unpacked root (read-only, shared)
  std::string layer_dir;     // crun/runc: a durable filesystem layer above the image, or ""
  Limits limits;             // already defaulted
  int64_t guest_nproc = 0;   // runsc: every command's RLIMIT_NPROC (the guest's limit), 0: none
  std::map<std::string, std::string> env;  // the sandbox's environment (never secrets)
  std::unique_ptr<net::Attachment> net;    // null: a fresh network namespace with only lo
  std::string restore_image;               // runsc: restore this checkpoint, not a cold start
  double start_timeout_s = 60;
};

// What the next instance of a sandbox is made from.
struct InstanceRequest {
  std::string sandbox_id;
  int generation = 0;
  std::string image_dir;      // the template's image (read-only, shared)
  std::string layer_dir;      // crun/runc: durable filesystem layer (suspend), or ""
  std::string restore_image;  // runsc: checkpoint to restore, or "" for a cold start
  Limits limits;              // already defaulted
  int64_t guest_nproc = 0;    // as ContainerConfig::guest_nproc
  EgressPolicy egress;
  std::map<std::string, std::string> hosts;
  std::map<std::string, std::string> env;
};

// The instance id ("<sandbox>-<generation>"), also the id it is attached to the egress gateway
// under (one network per instance: a spare and the current one exist at once).
std::string InstanceId(const std::string& sandbox_id, int generation);

class Container;
// Attaches the instance's network (if the policy has rules) and starts its container. Static
// in spirit: runs on background threads for spares.
StatusOr<std::unique_ptr<Container>> StartInstance(const BackendContext& ctx, const OciRuntime& rt,
                                                   const InstanceRequest& req,
                                                   StageTimings* timings);

class Container {
 public:
  // LC-2 allocate (cgroup + limits, bundle) and LC-3 initialize (the container runs).
  static StatusOr<std::unique_ptr<Container>> Start(const BackendContext& ctx, const OciRuntime& rt,
                                                    ContainerConfig config, StageTimings* timings);
  ~Container();

  // LC-4..LC-6 for one command: `<runtime> exec` with the process (environment and secrets
  // included) passed in a memfd, never a file on disk (LC-4).
  StatusOr<ExecResult> Exec(const ExecSpec& exec,
                            const std::map<std::string, std::string>& secrets);

  // New CPU, memory, PIDs and descriptor limits (already defaulted; the disk quota is fixed),
  // and the guest's process limit (as ContainerConfig::guest_nproc).
  Status ApplyLimits(const Limits& limits, int64_t guest_nproc);
  // Waits (bounded) until the pre-spawned shell has started (Sandbox::Settle).
  void WaitPrespawned() { agent_.WaitPrespawned(5); }

  // runsc only: saves the container's whole state (processes, memory, its tmpfs mounts) to
  // image_dir. The container stops.
  Status Checkpoint(const std::string& image_dir);

  // SIGKILL to every process (the container's and the runtime's) now, without waiting.
  void KillNow();
  // Kills everything, removes the runtime's record, the cgroup, the network and the directory.
  // Idempotent.
  void Teardown(StageTimings* timings);

  bool crashed() const { return crashed_; }
  pid_t init_pid() const { return init_pid_; }
  host::Cgroup* cgroup() { return cgroup_.get(); }
  const std::string& dir() const { return dir_; }
  const std::string& container_id() const { return cid_; }

 private:
  Container() = default;
  Status WriteBundle(const BackendContext& ctx, const ContainerConfig& c);
  SpawnPlan Plan(const std::vector<std::string>& verb, bool join_cgroup, bool overlay) const;
  Status RunVerb(const std::vector<std::string>& verb, double timeout_s, bool join_cgroup,
                 bool overlay, std::vector<std::pair<int, int>> extra_fds = {});
  // RES-5: a signal to every process a command started, but not to the container's init.
  void SignalTools(int sig);
  bool InitAlive() const;

  OciRuntime rt_;
  std::string id_, cid_, dir_;
  Limits limits_;
  int64_t guest_nproc_ = 0;
  std::map<std::string, std::string> env_;
  OverlayRoot overlay_;
  std::unique_ptr<host::Cgroup> cgroup_;
  std::unique_ptr<net::Attachment> net_;
  pid_t init_pid_ = -1;
  host::UniqueFd init_pidfd_;
  Child shim_;        // reaps the container's host processes (common/spawn.h)
  InitClient agent_;  // the init: sbx-init --agent (--agent-stdin under runsc)
  int64_t oom_kills_seen_ = 0;
  bool created_ = false;  // the runtime has a record of the container
  bool crashed_ = false;
  bool torn_down_ = false;
};

}  // namespace sbx::backend
