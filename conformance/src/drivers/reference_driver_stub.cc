// Built instead of reference_driver.cc while the library sbx_runtime has no implementation of
// sbx::Runtime (see conformance/CMakeLists.txt: SANDCHECK_REFERENCE).
#include <cstdio>

#include "drivers/target.h"

namespace sandcheck {

sbx::StatusOr<std::unique_ptr<Target>> MakeReferenceTarget(const TargetOptions& /*options*/) {
  return sbx::Unsupported(
      "this sandcheck was built without the in-process reference runtime (the library sbx_runtime "
      "had no implementation of sbx::Runtime at configure time; reconfigure once it has, or use "
      "--target adapter:PATH or --target http://HOST:PORT)");
}

int RunSandboxHolder(const std::vector<std::string>& /*args*/) {
  std::fprintf(stderr, "sandcheck __hold-sandboxes: built without the reference runtime\n");
  return 3;
}

}  // namespace sandcheck
