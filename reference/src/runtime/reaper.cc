#include "runtime/reaper.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "host/cgroup.h"
#include "host/process_stamp.h"

namespace sbx {
namespace {

namespace fs = std::filesystem;

std::string ReadFirstLine(const fs::path& p) {
  std::ifstream f(p);
  std::string line;
  std::getline(f, line);
  return line;
}

// A runtime's directory made by mkdir whose owner record never landed: named by the runtime's
// id (runtime.cc: "<pid>-<6 hex digits>"), nothing in it but perhaps the half-written
// owner.tmp, and no process with that pid (a live one may be between the two steps).
bool IsStillbornRuntimeDir(const fs::path& dir) {
  const std::string name = dir.filename();
  const size_t dash = name.find('-');
  if (dash == std::string::npos || dash == 0 || name.size() != dash + 7) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (i < dash ? !std::isdigit(static_cast<unsigned char>(c))
                 : i > dash && !std::isxdigit(static_cast<unsigned char>(c)))
      return false;
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename() != "owner.tmp") return false;
  }
  if (ec) return false;
  const long pid = std::strtol(name.substr(0, dash).c_str(), nullptr, 10);
  return pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

}  // namespace

StatusOr<ReapReport> ReapOrphans(const std::string& state_root, const std::string& snapshot_root,
                                 const std::string& self_id) {
  ReapReport report;
  std::error_code ec;
  if (!fs::exists(state_root, ec)) return report;
  for (const auto& entry : fs::directory_iterator(state_root, ec)) {
    std::string rtid = entry.path().filename();
    if (rtid == self_id || !entry.is_directory(ec)) continue;
    fs::path owner = entry.path() / "owner";
    if (!fs::exists(owner, ec)) {
      // Not a runtime's directory (e.g. the image cache), or one whose runtime died between its
      // mkdir and the rename of its owner record (runtime.cc): that one is named
      // "<pid>-<6 hex>", holds nothing but perhaps owner.tmp, and its pid is gone.
      if (IsStillbornRuntimeDir(entry.path())) {
        fs::remove_all(entry.path(), ec);
        ++report.runtimes;
      }
      continue;
    }
    std::string stamp = ReadFirstLine(owner);
    pid_t owner_pid;
    std::string owner_start;
    // The owner file is renamed into place whole (runtime.cc): one that does not parse is
    // nobody's record to act on.
    if (!host::ParseStamp(stamp, &owner_pid, &owner_start)) continue;
    if (host::StampAlive(stamp)) continue;
    // A dead runtime: its inits first (normally already gone), then cgroups, then files.
    for (const auto& sb : fs::directory_iterator(entry.path() / "sb", ec)) {
      pid_t pid;
      std::string start;
      std::string s = ReadFirstLine(sb.path() / "init");
      if (host::StampAlive(s) && host::ParseStamp(s, &pid, &start)) {
        kill(pid, SIGKILL);  // PID 1 of the sandbox: its death ends the whole PID namespace
        ++report.processes;
      }
    }
    bool done = true;
    host::CgroupOptions where;
    {
      std::ifstream f(entry.path() / "cgroups");  // written by the runtime at start
      for (std::string dir; std::getline(f, dir);) {
        if (!dir.empty()) where.adopt_own_dirs.push_back(dir);
      }
    }
    auto mgr = host::CgroupManager::Open(rtid, where);
    if (!mgr.ok() && !where.adopt_own_dirs.empty()) {
      // A damaged record, or a recorded own cgroup that is gone: sweep below ours instead.
      mgr = host::CgroupManager::Open(rtid);
    }
    if (mgr.ok()) {
      for (const std::string& name : (*mgr)->List()) {
        if ((*mgr)->Reap(name).ok()) ++report.cgroups;
      }
      done = (*mgr)->List().empty();
      mgr->reset();  // removes the dead runtime's parent cgroups (if empty)
    }
    if (!done) {
      // Processes still dying with their namespaces: keep the record, the next sweep retries.
      ++report.pending;
      continue;
    }
    fs::remove_all(entry.path(), ec);
    if (!snapshot_root.empty()) fs::remove_all(fs::path(snapshot_root) / rtid, ec);
    ++report.runtimes;
  }
  return report;
}

}  // namespace sbx
