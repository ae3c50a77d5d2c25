// The filesystem layer of a sandbox (SNAP-2, FS-2), shared by the backends that snapshot it
// from the host (native, oci): the directories a tool can write, and copying them out of a
// frozen sandbox into a directory that becomes the layer above the image of later instances.
#pragma once

#include <sys/types.h>

#include <string>

#include "sbx/status.h"

namespace sbx::backend {

// The directories a tool can write (everything else of the root is read-only, FS-2): the whole
// filesystem layer of a sandbox lives in them. Relative to the sandbox's root.
inline constexpr const char* kWritableDirs[] = {"work", "tmp", "var/tmp", "home/sandbox"};

// Copies kWritableDirs of the sandbox whose PID 1 is `init_pid` (read as root through
// /proc/<init_pid>/root with GNU tar: symlinks stored, never followed; owners and modes kept
// numerically) into `dir` (created), through the archive `tar_path` (removed afterwards).
// The sandbox should be frozen. Runs host processes: off the hot path only.
Status CopyWritableLayer(pid_t init_pid, const std::string& tar_path, const std::string& dir);

}  // namespace sbx::backend
