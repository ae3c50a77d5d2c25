// newc ("070701") archives for the microVM guest's initramfs: the tool image's rootfs appended
// to the guest image's own initramfs (the kernel unpacks concatenated archives in order).
#pragma once

#include <string>
#include <vector>

#include "sbx/status.h"

namespace sbx::microvm {

// Writes a newc archive of the tree at `rootfs_dir` to `out_path`, every entry named under
// `prefix` ("sandbox" → "sandbox", "sandbox/bin", ...; empty prefix: the tree's own names),
// ending with TRAILER!!!. Keeps modes, uid/gid, symlink targets and file contents; skips
// character and block devices, sockets and FIFOs. Hard links keep one inode: every name of a
// multiply-linked file has the same ino and nlink, the data only on the last one (the newc
// rule). Deterministic: entries in sorted order (a directory before its contents), mtime 0,
// inode numbers assigned in that order, dev 0. The file is written to a temporary name and
// renamed into place.
Status WriteNewcTree(const std::string& rootfs_dir, const std::string& prefix,
                     const std::string& out_path);

// Concatenates files into `out_path` (temporary name + rename), padding each to a multiple of
// 4 bytes with zeros (newc archives concatenated for the kernel must each be 4-byte aligned).
Status ConcatFiles(const std::vector<std::string>& in, const std::string& out_path);

}  // namespace sbx::microvm
