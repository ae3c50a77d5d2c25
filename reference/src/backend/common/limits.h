// The limits a sandbox gets where its spec leaves one at zero (docs/limits.md): one rule for
// every backend.
#pragma once

#include "sbx/model.h"

namespace sbx::backend {

// Defaults for zero limits: 512 MiB memory, 256 pids, 256 MiB disk, 1024 descriptors. A zero
// CPU limit stays zero: no cap.
Limits DefaultedLimits(const Limits& in);

}  // namespace sbx::backend
