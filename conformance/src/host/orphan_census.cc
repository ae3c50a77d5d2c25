#include "host/orphan_census.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace sandcheck {
namespace {

struct StatLine {
  bool ok = false;
  char state = '?';
  pid_t ppid = 0;
  unsigned long long start = 0;
};

// /proc/PID/stat: "pid (comm) state ppid ... starttime(22) ..."; comm may hold spaces and ')'.
StatLine ReadStat(pid_t pid) {
  StatLine s;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return s;
  size_t close = line.rfind(')');
  if (close == std::string::npos) return s;
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> f;
  std::string tok;
  while (rest >> tok) f.push_back(tok);
  if (f.size() < 20) return s;
  s.state = f[0].empty() ? '?' : f[0][0];
  s.ppid = static_cast<pid_t>(std::atol(f[1].c_str()));
  s.start = std::strtoull(f[19].c_str(), nullptr, 10);
  s.ok = true;
  return s;
}

bool IsDir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// /proc/PID/cgroup → controllers field → path.
std::map<std::string, std::string> CgroupPaths(pid_t pid) {
  std::map<std::string, std::string> out;
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    size_t a = line.find(':');
    size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    out[line.substr(a + 1, b - a - 1)] = line.substr(b + 1);
  }
  return out;
}

}  // namespace

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

ProcStamp StampOf(pid_t pid) {
  StatLine s = ReadStat(pid);
  return {pid, s.ok ? s.start : 0};
}

bool StampAlive(const ProcStamp& p) {
  StatLine s = ReadStat(p.pid);
  return s.ok && s.start == p.start_ticks && s.state != 'Z' && s.state != 'X';
}

std::vector<ProcStamp> DescendantsOf(pid_t root) {
  std::map<pid_t, std::vector<std::pair<pid_t, unsigned long long>>> children;
  for (const std::string& name : ListDir("/proc")) {
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    pid_t pid = static_cast<pid_t>(std::atol(name.c_str()));
    StatLine s = ReadStat(pid);
    if (s.ok) children[s.ppid].push_back({pid, s.start});
  }
  std::vector<ProcStamp> out;
  std::vector<pid_t> todo = {root};
  std::set<pid_t> seen = {root};
  while (!todo.empty()) {
    pid_t p = todo.back();
    todo.pop_back();
    for (const auto& [c, start] : children[p]) {
      if (!seen.insert(c).second) continue;
      out.push_back({c, start});
      todo.push_back(c);
    }
  }
  return out;
}

std::vector<CgroupMount> CgroupMounts() {
  std::vector<CgroupMount> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash)), tail(line.substr(dash + 3));
    std::string id, parent, devno, root, mount_point, fstype, source, super_opts;
    head >> id >> parent >> devno >> root >> mount_point;
    tail >> fstype >> source >> super_opts;
    if (root != "/") continue;  // a bind mount of a sub-tree: not the hierarchy's root
    if (fstype == "cgroup2") {
      out.push_back({"", mount_point});
    } else if (fstype == "cgroup") {
      // Super options: rw,cpu,cpuacct or rw,name=systemd → the controllers in kernel order,
      // the way /proc/PID/cgroup names them.
      std::vector<std::string> ctl;
      std::istringstream opts(super_opts);
      std::string o;
      while (std::getline(opts, o, ',')) {
        if (o == "rw" || o == "ro" || o.rfind("release_agent", 0) == 0 || o == "clone_children" ||
            o == "noprefix" || o == "xattr" || o == "cpuset_v2_mode" || o == "favordynmods") {
          continue;
        }
        ctl.push_back(o);
      }
      std::string joined;
      for (const auto& c : ctl) joined += (joined.empty() ? "" : ",") + c;
      out.push_back({joined, mount_point});
    }
  }
  return out;
}

std::vector<std::string> CgroupDirsBelow(pid_t pid, pid_t ancestor,
                                         const std::vector<CgroupMount>& mounts) {
  std::vector<std::string> out;
  auto mine = CgroupPaths(pid);
  auto theirs = CgroupPaths(ancestor);
  for (const auto& [ctl, path] : mine) {
    auto it = theirs.find(ctl);
    if (it == theirs.end()) continue;
    std::string base = it->second == "/" ? "" : it->second;
    if (path.size() <= base.size() + 1 || path.compare(0, base.size() + 1, base + "/") != 0)
      continue;  // not below the ancestor's cgroup
    const CgroupMount* m = nullptr;
    for (const auto& cand : mounts) {
      if (cand.controllers == ctl) m = &cand;
    }
    if (!m) continue;
    // Every directory from just below the ancestor's cgroup down to the process's.
    size_t pos = base.size() + 1;
    while (true) {
      size_t slash = path.find('/', pos);
      std::string rel = path.substr(0, slash);
      out.push_back(m->path + rel);
      if (slash == std::string::npos) break;
      pos = slash + 1;
    }
  }
  return out;
}

OrphanCensus OrphanCensus::Capture(pid_t holder, const std::string& state_dir,
                                   const std::vector<std::string>& state_before) {
  OrphanCensus c;
  c.processes_ = DescendantsOf(holder);
  std::vector<CgroupMount> mounts = CgroupMounts();
  std::set<std::string> dirs;
  for (const ProcStamp& p : c.processes_) {
    for (auto& d : CgroupDirsBelow(p.pid, holder, mounts)) dirs.insert(std::move(d));
  }
  c.cgroups_.assign(dirs.begin(), dirs.end());
  std::set<std::string> before(state_before.begin(), state_before.end());
  for (const std::string& n : ListDir(state_dir)) {
    if (!before.count(n)) c.state_dirs_.push_back(state_dir + "/" + n);
  }
  return c;
}

OrphanCensus::Counts OrphanCensus::Count() const {
  Counts n;
  for (const ProcStamp& p : processes_) n.processes += StampAlive(p) ? 1 : 0;
  for (const std::string& d : cgroups_) n.cgroups += IsDir(d) ? 1 : 0;
  for (const std::string& d : state_dirs_) n.state_dirs += IsDir(d) ? 1 : 0;
  return n;
}

nlohmann::json OrphanCensus::ToJson() const {
  return {{"processes", processes_.size()},
          {"cgroup_dirs", cgroups_.size()},
          {"state_dirs", state_dirs_.size()}};
}

}  // namespace sandcheck
