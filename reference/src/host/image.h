// Content-addressed images (IMG-1, IMG-2). An image is a deterministic tar of a root file
// system; its name is the SHA-256 of that tar. The build makes the default image from Debian's
// busybox-static (fixtures/rootfs/). Before first use on a node the tar's digest is verified and
// it is unpacked into the node cache; later uses find it there.
#pragma once

#include <string>

#include "sbx/status.h"

namespace sbx::host {

struct Image {
  std::string digest;      // "sha256:<64 hex>"
  std::string rootfs_dir;  // unpacked, read-only lower layer
};

class ImageStore {
 public:
  // `store_dir` holds "<hex>.tar" files and "refs/<name>" files holding a digest.
  // `cache_dir` holds unpacked trees "<hex>/rootfs".
  ImageStore(std::string store_dir, std::string cache_dir);

  // Resolves a template name or "sha256:<hex>" to an image, verifying the digest on first use
  // (kInvalidArgument "digest mismatch" if the tar was tampered with) and unpacking it.
  StatusOr<Image> Get(const std::string& ref);

  // SHA-256 of a file, lower-case hex.
  static StatusOr<std::string> Sha256File(const std::string& path);

 private:
  std::string store_dir_, cache_dir_;
};

}  // namespace sbx::host
