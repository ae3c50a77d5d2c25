// The state directory's format: what a runtime records on the host so that a reaper (its own or
// another runtime's, after a kill -9) can tell a live runtime from a dead one and reclaim what
// the dead one left (FAIL-6, NFR-5; runtime/reaper.h). One file, read and written only through
// these functions, by the runtime, its backends and the reaper:
//
//   <state root>/
//     <runtime id>/           "<pid>-<6 hex digits>" (NewRuntimeId)
//       owner                 the runtime's process stamp, renamed into place whole
//       cgroups               the runtime's own cgroup in each hierarchy, one per line
//       sb/<instance>/        one sandbox instance's files (SandboxDir)
//         init                the stamp of its init (sbx-init, the container's init, ...)
//
// A process stamp is "<pid> <start time>" (host/process_stamp.h).
//
// Thread-safety: the functions share no state.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "sbx/status.h"

namespace sbx::host {

// A fresh runtime id, "<our pid>-<6 random hex digits>".
std::string NewRuntimeId();
// Whether `name` has the form of a runtime id; if so, its pid.
bool ParseRuntimeId(const std::string& name, pid_t* pid);

// <runtime dir>/owner: our stamp, written to owner.tmp and renamed, so that no reaper ever reads
// a half-written record and takes a live runtime for a dead one.
Status WriteOwnerRecord(const std::string& runtime_dir);
// The owner record's stamp; "" when there is none.
std::string ReadOwnerRecord(const std::string& runtime_dir);
// A runtime's directory whose runtime died between its mkdir and the owner record's rename: it
// is named as a runtime id whose pid is gone and holds nothing but perhaps owner.tmp.
bool IsStillbornRuntimeDir(const std::string& dir);

// <runtime dir>/cgroups: the runtime's own cgroup per hierarchy (a reaper adopts exactly these).
Status WriteOwnCgroups(const std::string& runtime_dir, const std::vector<std::string>& dirs);
std::vector<std::string> ReadOwnCgroups(const std::string& runtime_dir);

// <state dir>/sb/<instance>: one instance's directory (the state dir is <root>/<runtime id>).
std::string SandboxDir(const std::string& state_dir, const std::string& instance);
// <sandbox dir>/init: the stamp of the instance's init. A failure to write is reported; the
// instance then has no record for a reaper (the caller decides).
Status WriteInitRecord(const std::string& sandbox_dir, pid_t init_pid);
void RemoveInitRecord(const std::string& sandbox_dir);
// The init stamps of every instance of a runtime's directory ("" for one without a record).
std::vector<std::string> ReadInitRecords(const std::string& runtime_dir);

}  // namespace sbx::host
