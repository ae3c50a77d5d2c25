#include "common/cgroup_probe.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>

#include "common/fs_util.h"

namespace sandcheck::adapter {

namespace {

struct CgroupMount {
  bool v2 = false;
  std::vector<std::string> options;  // super options of a v1 mount ("memory", "name=systemd")
  std::string root;                  // the sub-tree mounted (field 4)
  std::string mount_point;           // field 5
};

std::string Unescape(const std::string& s) {  // mountinfo escapes space, tab, \n, \ as \ooo
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = (s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0');
      out.push_back(static_cast<char>(v));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

sbx::StatusOr<std::vector<CgroupMount>> CgroupMounts() {
  ASSIGN_OR_RETURN(std::string text, ReadFile("/proc/self/mountinfo"));
  std::vector<CgroupMount> mounts;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto fields = Split(line, ' ');
    size_t dash = 0;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (dash < 5 || dash + 1 >= fields.size()) continue;
    const std::string& fstype = fields[dash + 1];
    if (fstype != "cgroup" && fstype != "cgroup2") continue;
    CgroupMount m;
    m.v2 = fstype == "cgroup2";
    m.root = Unescape(fields[3]);
    m.mount_point = Unescape(fields[4]);
    if (dash + 3 < fields.size()) m.options = Split(fields[dash + 3], ',');
    mounts.push_back(std::move(m));
  }
  return mounts;
}

bool HasAll(const std::vector<std::string>& options, const std::string& controllers) {
  for (const auto& c : Split(controllers, ',')) {
    bool found = false;
    for (const auto& o : options) found = found || o == c;
    if (!found) return false;
  }
  return true;
}

// Maps a cgroup path through a mount of (part of) its hierarchy; empty if not below the root.
std::string MapPath(const CgroupMount& m, const std::string& path) {
  std::string root = m.root == "/" ? "" : m.root;
  if (path.compare(0, root.size(), root) != 0) return "";
  std::string rest = path.substr(root.size());
  if (!rest.empty() && rest[0] != '/') return "";
  return m.mount_point + rest;
}

sbx::StatusOr<uint64_t> ReadKey(const std::string& file, const std::string& key) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(file));
  std::istringstream in(text);
  std::string k;
  uint64_t v;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return sbx::Unsupported(fmt::format("{} has no \"{}\" (kernel too old?)", file, key));
}

}  // namespace

sbx::StatusOr<std::vector<CgroupDir>> CgroupDirsOf(pid_t pid) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(fmt::format("/proc/{}/cgroup", pid)));
  ASSIGN_OR_RETURN(auto mounts, CgroupMounts());
  std::vector<CgroupDir> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto c1 = line.find(':');
    auto c2 = line.find(':', c1 + 1);
    if (c1 == std::string::npos || c2 == std::string::npos) continue;
    CgroupDir d;
    d.controllers = line.substr(c1 + 1, c2 - c1 - 1);
    d.path = line.substr(c2 + 1);
    for (const auto& m : mounts) {
      bool match = d.controllers.empty() ? m.v2 : (!m.v2 && HasAll(m.options, d.controllers));
      if (!match) continue;
      std::string dir = MapPath(m, d.path);
      if (dir.empty() || access(dir.c_str(), F_OK) != 0) continue;
      d.dir = dir;
      d.mount_point = m.mount_point;
      break;
    }
    if (!d.dir.empty()) out.push_back(std::move(d));
  }
  return out;
}

sbx::StatusOr<MemoryCgroup> MemoryCgroupOf(pid_t pid) {
  ASSIGN_OR_RETURN(auto dirs, CgroupDirsOf(pid));
  for (const auto& d : dirs) {
    if (!d.controllers.empty() && HasAll(Split(d.controllers, ','), "memory")) {
      return MemoryCgroup{d.dir, false};
    }
  }
  for (const auto& d : dirs) {
    if (!d.controllers.empty()) continue;
    auto ctrl = ReadFile(d.dir + "/cgroup.controllers");
    if (ctrl.ok() && (" " + *ctrl).find(" memory") != std::string::npos) {
      return MemoryCgroup{d.dir, true};
    }
  }
  return sbx::Unsupported(fmt::format("pid {} has no memory cgroup mounted here", pid));
}

std::string ControllerDir(const std::vector<CgroupDir>& dirs, const std::string& controller) {
  for (const auto& d : dirs) {
    if (!d.controllers.empty() && HasAll(Split(d.controllers, ','), controller)) return d.dir;
  }
  for (const auto& d : dirs) {
    if (!d.controllers.empty()) continue;
    auto ctrl = ReadFile(d.dir + "/cgroup.controllers");
    if (ctrl.ok() && (" " + *ctrl).find(" " + controller) != std::string::npos) return d.dir;
  }
  return "";
}

sbx::StatusOr<uint64_t> PidsLimitHits(const std::string& pids_dir) {
  return ReadKey(pids_dir + "/pids.events", "max");
}

sbx::StatusOr<uint64_t> OomKillCount(const MemoryCgroup& cg) {
  if (cg.v2) return ReadKey(cg.dir + "/memory.events", "oom_kill");
  return ReadKey(cg.dir + "/memory.oom_control", "oom_kill");
}

sbx::StatusOr<OomWatch> OomWatch::Start(const MemoryCgroup& cg) {
  if (cg.v2) {
    UniqueFd in(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    if (!in.valid()) return sbx::ErrnoStatus("inotify_init1");
    std::string file = cg.dir + "/memory.events";
    if (inotify_add_watch(in.get(), file.c_str(), IN_MODIFY) < 0) {
      return sbx::ErrnoStatus(fmt::format("inotify_add_watch {}", file));
    }
    return OomWatch(std::move(in), cg);
  }
  UniqueFd efd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!efd.valid()) return sbx::ErrnoStatus("eventfd");
  std::string control = cg.dir + "/memory.oom_control";
  UniqueFd cfd(open(control.c_str(), O_RDONLY | O_CLOEXEC));
  if (!cfd.valid()) return sbx::ErrnoStatus(fmt::format("open {}", control));
  std::string reg = fmt::format("{} {}", efd.get(), cfd.get());
  std::string ev = cg.dir + "/cgroup.event_control";
  UniqueFd evfd(open(ev.c_str(), O_WRONLY | O_CLOEXEC));
  if (!evfd.valid()) return sbx::ErrnoStatus(fmt::format("open {}", ev));
  if (write(evfd.get(), reg.data(), reg.size()) != static_cast<ssize_t>(reg.size())) {
    return sbx::ErrnoStatus(fmt::format("write {}", ev));
  }
  return OomWatch(std::move(efd), cg);
}

bool OomWatch::Fired() {
  if (!cg_.v2) {
    uint64_t n = 0;
    return read(fd_.get(), &n, sizeof n) == static_cast<ssize_t>(sizeof n) && n > 0;
  }
  char buf[4096];
  while (read(fd_.get(), buf, sizeof buf) > 0) {
  }
  auto kills = ReadKey(cg_.dir + "/memory.events", "oom_kill");
  auto ooms = ReadKey(cg_.dir + "/memory.events", "oom");
  return (kills.ok() && *kills > 0) || (ooms.ok() && *ooms > 0);
}

sbx::Status RemoveCgroupDirs(const std::vector<std::string>& dirs, const std::string& name) {
  sbx::Status first;
  for (const auto& dir : dirs) {
    auto slash = dir.rfind('/');
    if (name.empty() || slash == std::string::npos || dir.substr(slash + 1) != name) continue;
    if (rmdir(dir.c_str()) != 0 && errno != ENOENT && first.ok()) {
      first = sbx::ErrnoStatus(fmt::format("rmdir {}", dir));
    }
  }
  return first;
}

}  // namespace sandcheck::adapter
