// File-system helpers that are safe against a hostile sandbox: /work is written by untrusted
// commands, so nothing here follows a symlink or crosses into another mount.
//
// Thread-safety: stateless functions.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "sbx/status.h"

namespace sandcheck::adapter {

sbx::StatusOr<std::string> ReadFile(const std::string& path);

// Writes `content` to `path` through a temporary file and rename(2).
sbx::Status WriteFileAtomic(const std::string& path, std::string_view content, mode_t mode = 0644);

// Deletes `path` and everything below it. Never follows symlinks; refuses (kFailedPrecondition)
// to descend into another file system, so a mount left under `path` is reported, not emptied.
// A missing `path` is OK.
sbx::Status RemoveTree(const std::string& path);

// Deletes everything inside the directory `path`, keeping the directory. Same guarantees.
sbx::Status EmptyDirectory(const std::string& path);

// Counts the entries directly inside `path`.
sbx::StatusOr<int> CountEntries(const std::string& path);

// Writes a file at `relative` below the directory `root` (components separated by '/', no "."
// or "..", no symlinks anywhere on the way; missing directories are created 0755). The file and
// created directories are owned by uid:gid.
sbx::Status WriteFileBeneath(const std::string& root, std::string_view relative,
                             std::string_view content, mode_t mode, uid_t uid, gid_t gid);

}  // namespace sandcheck::adapter
