// Discovery of the cgroup layout (v1 hybrid or v2) from /proc/self/cgroup and
// /proc/self/mountinfo, the CPU quota arithmetic (RES-1), and parsing of cgroupfs file
// contents. Pure functions: no I/O here, so all of it is unit-tested on sample texts.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include "host/cgroup_internal.h"

namespace sbx::host::cgroup_internal {
namespace {

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> out;
  for (std::string_view line : Split(text, '\n')) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t start = i;
    while (i < line.size() && line[i] != ' ') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

bool ParseInt(std::string_view s, int64_t* out) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out.push_back(
          static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

bool Contains(const std::vector<std::string>& v, std::string_view x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// True if the cgroup `path` lies in the subtree `root` (component-wise prefix).
bool UnderRoot(std::string_view path, std::string_view root) {
  if (root == "/") return true;
  if (path == root) return true;
  return path.size() > root.size() && path.substr(0, root.size()) == root &&
         path[root.size()] == '/';
}

bool HasDotDot(std::string_view path) {
  for (std::string_view c : Split(path, '/')) {
    if (c == "..") return true;
  }
  return false;
}

// The absolute directory of cgroup `path` given the mount of `m`.
std::string DirOf(const CgroupMount& m, std::string_view path) {
  std::string_view rel;
  if (m.root == "/") {
    rel = path == "/" ? std::string_view() : path;
  } else {
    rel = path.substr(m.root.size());
  }
  std::string dir = m.mount_point;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  dir += rel;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

// Finds a mount that shows `entry`'s cgroup. nullptr if none.
const CgroupMount* MountFor(const std::vector<CgroupMount>& mounts, const ProcCgroupEntry& e,
                            bool v2) {
  for (const CgroupMount& m : mounts) {
    if (m.v2 != v2) continue;
    if (!v2) {
      bool all = !e.controllers.empty();
      for (const std::string& c : e.controllers) all = all && Contains(m.controllers, c);
      if (!all) continue;
    }
    if (UnderRoot(e.path, m.root)) return &m;
  }
  return nullptr;
}

struct V1Result {
  std::vector<Hierarchy> hierarchies;
  std::vector<std::string> missing;  // "memory (not mounted)" ...
};

V1Result ResolveV1(const std::vector<ProcCgroupEntry>& entries,
                   const std::vector<CgroupMount>& mounts) {
  V1Result r;
  std::vector<int> ids;  // hierarchy id per r.hierarchies entry
  for (std::string_view c : kV1Controllers) {
    const ProcCgroupEntry* entry = nullptr;
    for (const ProcCgroupEntry& e : entries) {
      if (e.hierarchy_id != 0 && Contains(e.controllers, c)) entry = &e;
    }
    if (entry == nullptr) {
      r.missing.push_back(fmt::format("{} (no v1 hierarchy in /proc/self/cgroup)", c));
      continue;
    }
    if (HasDotDot(entry->path)) {
      r.missing.push_back(
          fmt::format("{} (own cgroup {} is outside our cgroup namespace)", c, entry->path));
      continue;
    }
    const CgroupMount* m = MountFor(mounts, *entry, /*v2=*/false);
    if (m == nullptr) {
      r.missing.push_back(
          fmt::format("{} (own cgroup {} not visible in any mount)", c, entry->path));
      continue;
    }
    auto it = std::find(ids.begin(), ids.end(), entry->hierarchy_id);
    if (it != ids.end()) {
      r.hierarchies[it - ids.begin()].controllers.emplace_back(c);
      continue;
    }
    ids.push_back(entry->hierarchy_id);
    r.hierarchies.push_back(Hierarchy{{std::string(c)}, m->mount_point, DirOf(*m, entry->path)});
  }
  return r;
}

StatusOr<Hierarchy> ResolveV2(const std::vector<ProcCgroupEntry>& entries,
                              const std::vector<CgroupMount>& mounts) {
  for (const ProcCgroupEntry& e : entries) {
    if (e.hierarchy_id != 0 || !e.controllers.empty()) continue;
    if (HasDotDot(e.path)) {
      return Unsupported(
          fmt::format("cgroup v2: own cgroup {} is outside our cgroup namespace", e.path));
    }
    const CgroupMount* m = MountFor(mounts, e, /*v2=*/true);
    if (m == nullptr) {
      return Unsupported(
          fmt::format("cgroup v2: own cgroup {} is not visible in any cgroup2 mount", e.path));
    }
    return Hierarchy{{}, m->mount_point, DirOf(*m, e.path)};
  }
  return Unsupported("cgroup v2: no unified hierarchy (no \"0::\" line in /proc/self/cgroup)");
}

}  // namespace

StatusOr<std::vector<ProcCgroupEntry>> ParseProcCgroup(std::string_view text) {
  std::vector<ProcCgroupEntry> out;
  for (std::string_view line : Lines(text)) {
    size_t c1 = line.find(':');
    size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) {
      return InvalidArgument(fmt::format("/proc/self/cgroup: malformed line \"{}\"", line));
    }
    ProcCgroupEntry e;
    int64_t id = 0;
    if (!ParseInt(line.substr(0, c1), &id) || id < 0) {
      return InvalidArgument(fmt::format("/proc/self/cgroup: bad hierarchy id in \"{}\"", line));
    }
    e.hierarchy_id = static_cast<int>(id);
    std::string_view ctrls = line.substr(c1 + 1, c2 - c1 - 1);
    if (!ctrls.empty()) {
      for (std::string_view c : Split(ctrls, ',')) e.controllers.emplace_back(c);
    }
    e.path = std::string(line.substr(c2 + 1));  // may itself contain ':'
    if (e.path.empty() || e.path[0] != '/') {
      return InvalidArgument(fmt::format("/proc/self/cgroup: bad path in \"{}\"", line));
    }
    out.push_back(std::move(e));
  }
  return out;
}

StatusOr<std::vector<CgroupMount>> ParseCgroupMounts(std::string_view mountinfo) {
  std::vector<CgroupMount> out;
  for (std::string_view line : Lines(mountinfo)) {
    std::vector<std::string_view> f = Fields(line);
    // id parent maj:min root mount-point options [optional...] - fstype source super-options
    size_t sep = 0;
    for (size_t i = 6; i < f.size(); ++i) {
      if (f[i] == "-") {
        sep = i;
        break;
      }
    }
    if (f.size() < 7 || sep == 0 || sep + 3 > f.size()) {
      return InvalidArgument(fmt::format("/proc/self/mountinfo: malformed line \"{}\"", line));
    }
    std::string_view fstype = f[sep + 1];
    if (fstype != "cgroup" && fstype != "cgroup2") continue;
    CgroupMount m;
    m.v2 = fstype == "cgroup2";
    m.root = Unescape(f[3]);
    m.mount_point = Unescape(f[4]);
    if (!m.v2 && sep + 3 < f.size()) {
      for (std::string_view o : Split(f[sep + 3], ',')) {
        if (o != "rw" && o != "ro" && !o.empty()) m.controllers.emplace_back(o);
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

int CgroupLayout::IndexOf(std::string_view controller) const {
  if (version == CgroupVersion::kV2) return hierarchies.empty() ? -1 : 0;
  for (size_t i = 0; i < hierarchies.size(); ++i) {
    if (Contains(hierarchies[i].controllers, controller)) return static_cast<int>(i);
  }
  return -1;
}

StatusOr<CgroupLayout> ResolveLayout(std::string_view proc_self_cgroup, std::string_view mountinfo,
                                     const CgroupOptions& options) {
  ASSIGN_OR_RETURN(std::vector<ProcCgroupEntry> entries, ParseProcCgroup(proc_self_cgroup));
  ASSIGN_OR_RETURN(std::vector<CgroupMount> mounts, ParseCgroupMounts(mountinfo));
  V1Result v1 = ResolveV1(entries, mounts);
  StatusOr<Hierarchy> v2 = ResolveV2(entries, mounts);

  using Mode = CgroupOptions::Mode;
  bool use_v1 = false;
  switch (options.mode) {
    case Mode::kV1:
      use_v1 = true;
      break;
    case Mode::kV2:
      use_v1 = false;
      break;
    case Mode::kAuto:
      // Hybrid hosts mount the v1 controllers and an (often empty) unified hierarchy: v1 wins
      // when it has everything; pure v2 hosts have no v1 controller at all.
      use_v1 = v1.missing.empty() || (!v2.ok() && !v1.hierarchies.empty());
      break;
  }
  CgroupLayout layout;
  if (use_v1) {
    if (v1.hierarchies.empty() || (options.require_controllers && !v1.missing.empty())) {
      std::string missing;
      for (const std::string& m : v1.missing) missing += (missing.empty() ? "" : ", ") + m;
      return Unsupported(fmt::format("cgroup v1: controllers missing: {}", missing));
    }
    layout.version = CgroupVersion::kV1;
    layout.hierarchies = std::move(v1.hierarchies);
    return layout;
  }
  if (!v2.ok()) return v2.status();
  layout.version = CgroupVersion::kV2;
  layout.hierarchies.push_back(std::move(v2).value());
  return layout;
}

Status AdoptOwnDirs(const std::vector<std::string>& dirs, CgroupLayout* layout) {
  for (const std::string& dir : dirs) {
    // SECURITY: the path comes from a file in the state directory; it must name a directory
    // inside a cgroup hierarchy we would use anyway, never anything else on the host.
    bool clean = !dir.empty() && dir[0] == '/';
    for (size_t at = 1; clean && at <= dir.size();) {
      size_t end = dir.find('/', at);
      if (end == std::string::npos) end = dir.size();
      std::string_view part(dir.data() + at, end - at);
      clean = !part.empty() && part != "." && part != "..";
      at = end + 1;
    }
    if (!clean) return InvalidArgument(fmt::format("recorded cgroup \"{}\": not a clean absolute path", dir));
    Hierarchy* match = nullptr;
    for (Hierarchy& h : layout->hierarchies) {
      if (dir == h.mount_point || dir.rfind(h.mount_point + "/", 0) == 0) match = &h;
    }
    if (match == nullptr) {
      return InvalidArgument(fmt::format("recorded cgroup \"{}\" lies in no cgroup hierarchy we use", dir));
    }
    match->own_dir = dir;
  }
  return Status::Ok();
}

Status ValidateName(std::string_view name, std::string_view what) {
  bool ok = !name.empty() && name.size() <= 64 && name != "." && name != "..";
  for (char c : name) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '-' || c == '.');
  }
  if (ok) return Status::Ok();
  return InvalidArgument(
      fmt::format("{} \"{}\": must be 1-64 characters of [A-Za-z0-9_.-], not . or ..", what, name));
}

StatusOr<CpuQuota> CpuQuotaFor(int64_t millicores) {
  constexpr int64_t kMaxMillicores = 1024 * 1000;  // sbx::ParseMillicores' range
  if (millicores < 0 || millicores > kMaxMillicores) {
    return InvalidArgument(
        fmt::format("cpu millicores {} out of range 0..{}", millicores, kMaxMillicores));
  }
  if (millicores == 0) return CpuQuota{-1, kCfsPeriodUs};
  int64_t quota = millicores * kCfsPeriodUs / 1000;
  if (quota >= kCfsMinQuotaUs) return CpuQuota{quota, kCfsPeriodUs};
  // Under 10 millicores: the 100 ms period would need a quota below the kernel's 1 ms minimum.
  return CpuQuota{millicores * kCfsMaxPeriodUs / 1000, kCfsMaxPeriodUs};
}

std::string CpuMaxValue(const CpuQuota& q) {
  if (q.quota_us < 0) return fmt::format("max {}", q.period_us);
  return fmt::format("{} {}", q.quota_us, q.period_us);
}

std::optional<int64_t> KeyedValue(std::string_view text, std::string_view key) {
  for (std::string_view line : Lines(text)) {
    std::vector<std::string_view> f = Fields(line);
    int64_t v = 0;
    if (f.size() == 2 && f[0] == key && ParseInt(f[1], &v)) return v;
  }
  return std::nullopt;
}

std::vector<pid_t> ParsePidList(std::string_view text) {
  std::vector<pid_t> out;
  for (std::string_view line : Lines(text)) {
    int64_t v = 0;
    if (ParseInt(line, &v) && v > 0) out.push_back(static_cast<pid_t>(v));
  }
  return out;
}

}  // namespace sbx::host::cgroup_internal
