// Where an adapter keeps its sandboxes between invocations (each op is a new process):
//   <root>/<adapter>/<id>/            0711, root-owned
//     sandbox.json                    the record below (0600)
//     rootfs/                         this sandbox's own unpacked copy of the image
//     work/                           /work inside the sandbox, owned by the sandbox user
//     lock                            flock(2) serialising ops on the sandbox
// <root> is $SANDCHECK_ADAPTER_STATE, else /run/sandcheck-adapters.
//
// Thread-safety: no shared state; concurrent adapter processes are serialised per sandbox by
// Lock().
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/json_io.h"
#include "sbx/status.h"

namespace sandcheck::adapter {

// The image's unprivileged user ("sandbox" in fixtures/rootfs/build-rootfs.sh): commands run as it.
inline constexpr uid_t kSandboxUid = 1000;
inline constexpr gid_t kSandboxGid = 1000;

// Limits as asked for in `create` (nullopt or 0: no limit asked).
struct Limits {
  std::optional<int64_t> cpu_millicores;
  std::optional<int64_t> memory_bytes;
  std::optional<int64_t> pids;
  std::optional<int64_t> disk_bytes;
  std::optional<int64_t> fds;
};

struct SandboxRecord {
  std::string id;
  std::string template_name;
  std::string image;  // "sha256:<hex>" the rootfs was unpacked from
  std::string backend;
  Limits limits;
  std::map<std::string, std::string> env;
  // A hard limit ended the sandbox (RES-8): exec answers sandbox_unavailable until a revert.
  bool crashed = false;
  // Set before a runtime object is made, cleared after it is gone: if the adapter died in
  // between, revert/destroy clean it up.
  bool container_live = false;
  std::string container_id;
  std::vector<std::string> cgroup_dirs;  // made by the runtime for container_id, to sweep
};

Json RecordToJson(const SandboxRecord& r);
sbx::StatusOr<SandboxRecord> RecordFromJson(const Json& j);

class SandboxStore {
 public:
  explicit SandboxStore(std::string adapter_name);

  const std::string& root() const { return root_; }
  std::string Dir(const std::string& id) const { return root_ + "/" + id; }
  std::string Rootfs(const std::string& id) const { return Dir(id) + "/rootfs"; }
  std::string Work(const std::string& id) const { return Dir(id) + "/work"; }

  // kInvalidArgument unless `id` looks like one of ours (16 lower-case hex digits).
  static sbx::Status ValidateId(const std::string& id);

  // Creates a new, empty sandbox directory with a fresh random id.
  sbx::StatusOr<std::string> Allocate();

  // Exclusive lock on the sandbox; kNotFound if there is no such sandbox.
  sbx::StatusOr<UniqueFd> Lock(const std::string& id) const;

  sbx::StatusOr<SandboxRecord> Load(const std::string& id) const;
  sbx::Status Save(const SandboxRecord& record) const;

  // Deletes the sandbox's directory tree (never across a mount, never through a symlink).
  sbx::Status Remove(const std::string& id) const;

 private:
  std::string root_;
};

}  // namespace sandcheck::adapter
