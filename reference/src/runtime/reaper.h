// The reaper (FAIL-6, NFR-5): finds sandboxes whose runtime is gone and reclaims what they
// left on the host. Each runtime records what it owns under <state_root>/<runtime id>/ (its
// owner's stamp, its own cgroups, each instance's init): the format is host/state_dir.h.
// What a dead runtime can leave: cgroups (sandcheck-<runtime id>/...), sbx-init processes (they
// exit by themselves on EOF of their control socket; killed here if not), state directories
// and durable snapshots. Mounts and network namespaces die with their namespaces, and secrets
// never touch the disk, so there is nothing of theirs to zero on the host.
#pragma once

#include <string>

#include "sbx/status.h"

namespace sbx {

struct ReapReport {
  int runtimes = 0;   // dead runtimes reclaimed
  int cgroups = 0;    // sandbox cgroups removed
  int processes = 0;  // leftover sbx-init processes killed
  int pending = 0;    // dead runtimes not fully reclaimed yet (retry soon)
};

// Reclaims every runtime under state_root whose owner is dead (never `self_id`).
StatusOr<ReapReport> ReapOrphans(const std::string& state_root, const std::string& snapshot_root,
                                 const std::string& self_id);

}  // namespace sbx
