// The one leak census of the runtime's tests (every backend's itests and the reaper's): what the
// runtimes of one process may leave on the host, counted from outside the runtime: never from
// what it says it holds. Tests only.
//
// Everything a runtime of process P makes carries P in its name: its state directories
// (/run/sandcheck/<P>-<hex>), its cgroups ("sandcheck-<P>-<hex>" below the process's own cgroup
// in each hierarchy; "sbx-<P>-…" made by runc in hierarchies the runtime does not use), every
// OCI container and runtime process ("sbx-<P>-…" on their command lines), every QEMU (its
// command line names its state directory). So the census of P counts only P's objects and stays
// exact while other runtimes run on the machine; a census of a process that has died (the
// reaper's tests) counts what it left.
//
// Two censuses compare with ==; wait for equality with a bound where the kernel ends things
// asynchronously (namespace teardown, a cgroup's last task leaving): a leak never returns.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace sbx::backendtest {

struct CensusOf {
  pid_t owner = getpid();   // whose runtimes
  std::string marker;       // also count processes whose command line contains it ("" = not)
  bool namespaces = false;  // also count every namespace of every process on the machine: a
                            // machine-wide figure, for tests where nothing else starts sandboxes
};

struct Census {
  size_t state_dirs = 0;     // /run/sandcheck/<owner>-* themselves
  size_t state_entries = 0;  // directories below them
  size_t mounts = 0;         // lines of this process's mountinfo naming the owner's state or
                             // snapshot directories (…sandcheck…/<owner>-<hex>…)
  size_t cgroups = 0;        // directories named for the owner's runtimes, every hierarchy
  size_t children = 0;       // processes whose parent is the owner
  size_t processes = 0;      // processes whose command line contains the marker
  size_t qemus = 0;          // QEMU processes whose command line names an owner's state dir
  size_t namespaces = 0;     // only with CensusOf::namespaces
  bool operator==(const Census&) const = default;
};

// A whole file, or what could be read of it ("" when it cannot be opened). For /proc files of
// processes that may end while they are read: libstdc++'s stream iterators throw on that read
// error (ESRCH, "basic_filebuf::underflow"), which ended a census once.
inline std::string ReadQuietly(const std::filesystem::path& p) {
  std::string out;
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

namespace census_detail {

inline size_t DirsBelow(const std::filesystem::path& root) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) ++n;
  }
  return n;
}

inline size_t DirsNaming(const std::filesystem::path& root, const std::vector<std::string>& names) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    const std::string p = it->path().string();
    for (const auto& name : names) {
      if (p.find(name) != std::string::npos) {
        ++n;
        break;
      }
    }
  }
  return n;
}

}  // namespace census_detail

// The state directories of `owner`'s runtimes (/run/sandcheck/<owner>-<hex>).
inline std::vector<std::string> StateDirsOf(pid_t owner) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/run/sandcheck", ec)) {
    if (e.path().filename().string().rfind(std::to_string(owner) + "-", 0) == 0)
      out.push_back(e.path());
  }
  return out;
}

inline Census TakeCensus(const CensusOf& of = {}) {
  namespace fs = std::filesystem;
  Census c;
  const std::string pid = std::to_string(of.owner);
  const std::string state = "/run/sandcheck/" + pid + "-";
  for (const std::string& d : StateDirsOf(of.owner)) {
    ++c.state_dirs;
    c.state_entries += census_detail::DirsBelow(d);
  }
  std::istringstream mi(ReadQuietly("/proc/self/mountinfo"));
  for (std::string line; std::getline(mi, line);)
    c.mounts += line.find("sandcheck") != std::string::npos &&
                line.find("/" + pid + "-") != std::string::npos;
  std::set<std::string> ns;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = ReadQuietly(e.path() / "stat");
    if (size_t rp = stat.rfind(')'); rp != std::string::npos && rp + 2 < stat.size()) {
      std::istringstream is(stat.substr(rp + 2));
      char st = 0;
      pid_t ppid = 0;
      is >> st >> ppid;
      c.children += ppid == of.owner;
    }
    const std::string cmd = ReadQuietly(e.path() / "cmdline");
    if (!of.marker.empty()) c.processes += cmd.find(of.marker) != std::string::npos;
    c.qemus += cmd.find("qemu-system") != std::string::npos && cmd.find(state) != std::string::npos;
    if (of.namespaces) {
      for (const char* kind : {"mnt", "pid", "net", "uts", "ipc", "cgroup"}) {
        std::error_code lec;
        auto target = fs::read_symlink(e.path() / "ns" / kind, lec);
        if (!lec) ns.insert(target.string());
      }
    }
  }
  c.namespaces = ns.size();
  const std::vector<std::string> names = {"sandcheck-" + pid + "-", "sbx-" + pid + "-"};
  for (const auto& h : fs::directory_iterator("/sys/fs/cgroup", ec)) {
    if (h.is_directory(ec) && !h.is_symlink(ec))
      c.cgroups += census_detail::DirsNaming(h.path(), names);
  }
  return c;
}

inline std::ostream& operator<<(std::ostream& os, const Census& c) {
  os << "{state dirs " << c.state_dirs << " (" << c.state_entries << " below), mounts " << c.mounts
     << ", cgroups " << c.cgroups << ", children " << c.children << ", processes " << c.processes
     << ", qemus " << c.qemus;
  if (c.namespaces) os << ", namespaces " << c.namespaces;
  return os << "}";
}

}  // namespace sbx::backendtest
