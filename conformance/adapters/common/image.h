// The sandbox image: the project's content-addressed busybox tar (fixtures/rootfs), found next
// to the adapter binary, verified by digest and unpacked into each sandbox's own rootfs.
//
// Layout (built by fixtures/CMakeLists.txt):  <store>/<hex>.tar, <store>/refs/<template>
// holding "sha256:<hex>". <store> is $SANDCHECK_IMAGE_STORE, else <dir of the adapter>/../images.
//
// Thread-safety: stateless functions.
#pragma once

#include <string>

#include "common/process.h"
#include "sbx/status.h"

namespace sandcheck::adapter {

struct ImageRef {
  std::string digest;    // "sha256:<hex>"
  std::string tar_path;  // <store>/<hex>.tar
};

// The image store directory (see above).
sbx::StatusOr<std::string> ImageStoreDir();

// Resolves a template name ([a-z0-9_.-]+) through <store>/refs/<name>.
sbx::StatusOr<ImageRef> ResolveTemplate(const std::string& template_name);

// IMG-1: checks the tar's SHA-256 against its name and unpacks that same open file into
// `dest` (which must exist), keeping numeric owners and modes.
sbx::Status UnpackVerified(Supervisor& sup, const ImageRef& image, const std::string& dest);

}  // namespace sandcheck::adapter
