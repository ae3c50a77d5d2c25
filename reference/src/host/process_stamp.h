// Process stamps: "<pid> <start time>", which names one process for good (a pid alone can be
// reused). The reaper uses them to tell a live owner from a dead one.
#pragma once

#include <sys/types.h>

#include <string>

namespace sbx::host {

// Stamp of a live process ("" if it does not exist).
std::string ProcessStamp(pid_t pid);
// True if the process named by the stamp is still alive (same pid, same start time).
bool StampAlive(const std::string& stamp);
// Parses a stamp; false if malformed.
bool ParseStamp(const std::string& stamp, pid_t* pid, std::string* start_time);

}  // namespace sbx::host
