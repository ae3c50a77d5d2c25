#include "common/sandbox_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "common/fs_util.h"

namespace sandcheck::adapter {

namespace {

constexpr const char* kDefaultRoot = "/run/sandcheck-adapters";

sbx::Status MkdirMode(const std::string& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return sbx::ErrnoStatus(fmt::format("mkdir {}", path));
  }
  return sbx::Status::Ok();
}

Json OptJson(const std::optional<int64_t>& v) { return v ? Json(*v) : Json(nullptr); }

}  // namespace

Json RecordToJson(const SandboxRecord& r) {
  return Json{{"id", r.id},
              {"template", r.template_name},
              {"image", r.image},
              {"backend", r.backend},
              {"limits",
               {{"cpu_millicores", OptJson(r.limits.cpu_millicores)},
                {"memory_bytes", OptJson(r.limits.memory_bytes)},
                {"pids", OptJson(r.limits.pids)},
                {"disk_bytes", OptJson(r.limits.disk_bytes)},
                {"fds", OptJson(r.limits.fds)}}},
              {"env", r.env},
              {"crashed", r.crashed},
              {"container_live", r.container_live},
              {"container_id", r.container_id},
              {"cgroup_dirs", r.cgroup_dirs}};
}

sbx::StatusOr<SandboxRecord> RecordFromJson(const Json& j) {
  RETURN_IF_ERROR(CheckKeys(j,
                            {"id", "template", "image", "backend", "limits", "env", "crashed",
                             "container_live", "container_id", "cgroup_dirs"},
                            "sandbox record"));
  SandboxRecord r;
  ASSIGN_OR_RETURN(r.id, RequireString(j, "id"));
  ASSIGN_OR_RETURN(r.template_name, RequireString(j, "template"));
  ASSIGN_OR_RETURN(r.image, RequireString(j, "image"));
  ASSIGN_OR_RETURN(r.backend, RequireString(j, "backend"));
  ASSIGN_OR_RETURN(r.container_id, RequireString(j, "container_id"));
  ASSIGN_OR_RETURN(auto limits, OptObject(j, "limits"));
  if (limits) {
    ASSIGN_OR_RETURN(r.limits.cpu_millicores, OptCount(*limits, "cpu_millicores"));
    ASSIGN_OR_RETURN(r.limits.memory_bytes, OptCount(*limits, "memory_bytes"));
    ASSIGN_OR_RETURN(r.limits.pids, OptCount(*limits, "pids"));
    ASSIGN_OR_RETURN(r.limits.disk_bytes, OptCount(*limits, "disk_bytes"));
    ASSIGN_OR_RETURN(r.limits.fds, OptCount(*limits, "fds"));
  }
  ASSIGN_OR_RETURN(auto crashed, OptBool(j, "crashed"));
  r.crashed = crashed.value_or(false);
  ASSIGN_OR_RETURN(auto live, OptBool(j, "container_live"));
  r.container_live = live.value_or(false);
  if (auto it = j.find("env"); it != j.end() && it->is_object()) {
    for (const auto& [k, v] : it->items()) {
      if (!v.is_string()) return sbx::InvalidArgument("sandbox record: env values must be strings");
      r.env[k] = v.get<std::string>();
    }
  }
  if (auto it = j.find("cgroup_dirs"); it != j.end() && it->is_array()) {
    for (const auto& v : *it) {
      if (!v.is_string()) return sbx::InvalidArgument("sandbox record: bad cgroup_dirs");
      r.cgroup_dirs.push_back(v.get<std::string>());
    }
  }
  return r;
}

SandboxStore::SandboxStore(std::string adapter_name) {
  const char* env = std::getenv("SANDCHECK_ADAPTER_STATE");
  root_ = fmt::format("{}/{}", env && *env ? env : kDefaultRoot, adapter_name);
}

sbx::Status SandboxStore::ValidateId(const std::string& id) {
  bool ok = id.size() == 16;
  for (char c : id) ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!ok) return sbx::InvalidArgument(fmt::format("\"{}\" is not a sandbox id", id));
  return sbx::Status::Ok();
}

sbx::StatusOr<std::string> SandboxStore::Allocate() {
  // 0711: the bwrap adapter's unprivileged user must traverse to rootfs/ and work/, but must
  // not list the sandboxes or read their records.
  auto parent = root_.substr(0, root_.rfind('/'));
  RETURN_IF_ERROR(MkdirMode(parent, 0711));
  RETURN_IF_ERROR(MkdirMode(root_, 0711));
  for (int attempt = 0; attempt < 8; ++attempt) {
    unsigned char raw[8];
    if (getrandom(raw, sizeof raw, 0) != static_cast<ssize_t>(sizeof raw)) {
      return sbx::ErrnoStatus("getrandom");
    }
    std::string id;
    for (unsigned char b : raw) id += fmt::format("{:02x}", b);
    std::string dir = Dir(id);
    if (mkdir(dir.c_str(), 0711) == 0) {
      chmod(dir.c_str(), 0711);  // regardless of umask
      return id;
    }
    if (errno != EEXIST) return sbx::ErrnoStatus(fmt::format("mkdir {}", dir));
  }
  return sbx::Internal("could not allocate a sandbox id");
}

sbx::StatusOr<UniqueFd> SandboxStore::Lock(const std::string& id) const {
  RETURN_IF_ERROR(ValidateId(id));
  std::string path = Dir(id) + "/lock";
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) {
    if (errno == ENOENT) return sbx::NotFound(fmt::format("no sandbox {}", id));
    return sbx::ErrnoStatus(fmt::format("open {}", path));
  }
  while (flock(fd.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return sbx::ErrnoStatus(fmt::format("flock {}", path));
  }
  // Destroy may have removed the directory while this process waited for the lock.
  if (access(Dir(id).c_str(), F_OK) != 0 ||
      access((Dir(id) + "/sandbox.json").c_str(), F_OK) != 0) {
    return sbx::NotFound(fmt::format("no sandbox {}", id));
  }
  return fd;
}

sbx::StatusOr<SandboxRecord> SandboxStore::Load(const std::string& id) const {
  RETURN_IF_ERROR(ValidateId(id));
  auto text = ReadFile(Dir(id) + "/sandbox.json");
  if (!text.ok()) {
    if (text.status().code() == sbx::Code::kNotFound) {
      return sbx::NotFound(fmt::format("no sandbox {}", id));
    }
    return text.status();
  }
  ASSIGN_OR_RETURN(Json j, ParseObject(*text));
  auto rec = RecordFromJson(j);
  if (!rec.ok()) return rec.status().WithContext(Dir(id) + "/sandbox.json");
  if (rec->id != id) return sbx::Internal(fmt::format("sandbox record {} names {}", id, rec->id));
  return rec;
}

sbx::Status SandboxStore::Save(const SandboxRecord& record) const {
  return WriteFileAtomic(Dir(record.id) + "/sandbox.json", RecordToJson(record).dump(1) + "\n",
                         0600);
}

sbx::Status SandboxStore::Remove(const std::string& id) const {
  RETURN_IF_ERROR(ValidateId(id));
  return RemoveTree(Dir(id));
}

}  // namespace sandcheck::adapter
