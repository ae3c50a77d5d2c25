// newc ("070701") archives for the microVM guest's initramfs: the tool image's rootfs appended
// to the guest image's own initramfs (the kernel unpacks concatenated archives in order), and
// the guest image's initramfs itself (fixtures/microvm/build-guest.sh runs `sbx-newc`, a thin
// command line over WriteNewcTree: one newc writer in the project).
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

// A node the tree cannot hold without privileges (the guest's /dev/console, 5:1), written
// after the tree's entries, before the trailer.
struct NewcNode {
  std::string name;  // in the archive ("dev/console")
  uint32_t mode;     // with its type: S_IFCHR | 0600
  uint32_t rdev_major = 0, rdev_minor = 0;
};

struct NewcOptions {
  bool root_owned = false;      // every entry uid 0, gid 0 (a guest's own files)
  std::vector<NewcNode> nodes;  // written after the tree, uid 0, gid 0
};

Status WriteNewcTree(const std::string& rootfs_dir, const std::string& prefix,
                     const std::string& out_path, const NewcOptions& options);

// Concatenates files into `out_path` (temporary name + rename), padding each to a multiple of
// 4 bytes with zeros (newc archives concatenated for the kernel must each be 4-byte aligned).
Status ConcatFiles(const std::vector<std::string>& in, const std::string& out_path);

}  // namespace sbx::microvm
