#include "runtime/reaper.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>

#include "host/cgroup.h"
#include "host/process_stamp.h"
#include "host/state_dir.h"

namespace sbx {

namespace fs = std::filesystem;

StatusOr<ReapReport> ReapOrphans(const std::string& state_root, const std::string& snapshot_root,
                                 const std::string& self_id) {
  ReapReport report;
  std::error_code ec;
  if (!fs::exists(state_root, ec)) return report;
  for (const auto& entry : fs::directory_iterator(state_root, ec)) {
    std::string rtid = entry.path().filename();
    if (rtid == self_id || !entry.is_directory(ec)) continue;
    const std::string stamp = host::ReadOwnerRecord(entry.path());
    if (stamp.empty()) {
      // Not a runtime's directory (e.g. the image cache), or one whose runtime died between its
      // mkdir and the rename of its owner record (host/state_dir.h): that one is named
      // "<pid>-<6 hex>", holds nothing but perhaps owner.tmp, and its pid is gone.
      if (host::IsStillbornRuntimeDir(entry.path())) {
        fs::remove_all(entry.path(), ec);
        ++report.runtimes;
      }
      continue;
    }
    pid_t owner_pid;
    std::string owner_start;
    // The owner file is renamed into place whole (host/state_dir.h): one that does not parse is
    // nobody's record to act on.
    if (!host::ParseStamp(stamp, &owner_pid, &owner_start)) continue;
    if (host::StampAlive(stamp)) continue;
    // A dead runtime: its inits first (normally already gone), then cgroups, then files.
    for (const std::string& s : host::ReadInitRecords(entry.path())) {
      pid_t pid;
      std::string start;
      if (host::StampAlive(s) && host::ParseStamp(s, &pid, &start)) {
        kill(pid, SIGKILL);  // PID 1 of the sandbox: its death ends the whole PID namespace
        ++report.processes;
      }
    }
    bool done = true;
    host::CgroupOptions where;
    where.adopt_own_dirs = host::ReadOwnCgroups(entry.path());  // written by the runtime at start
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
