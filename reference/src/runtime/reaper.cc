#include "runtime/reaper.h"

#include <signal.h>
#include <unistd.h>

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
    if (!fs::exists(owner, ec)) continue;  // not a runtime's directory (e.g. the image cache)
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
