// QEMU's spawner (microvm_spawn.cc): every QEMU of the process is forked by one long-lived
// thread, so that PR_SET_PDEATHSIG (which follows the forking thread) ties QEMU to the process.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "sbx/status.h"

namespace sbx::microvm {

// Starts QEMU (or any program: `args`) on the spawner thread with: 0 /dev/null, 1+2 `logfd`,
// src[i] at fd 3+i. Before the exec the child joins `cgroup_procs`; a failure there or in the
// exec comes back through a close-on-exec pipe as the child's own report, and the child is
// reaped. Declared here for QemuVm and for its stress test (microvm_vm_itest.cc).
//
// `keeper`: the child is the init of a new PID namespace (clone(CLONE_NEWPID)) and QEMU its only
// child. A confined QEMU changes its uid (-runas), and the kernel clears PR_SET_PDEATHSIG at
// any change of the effective uid, so QEMU itself would survive the runtime; the keeper keeps
// root's (unchanged) credentials and its PDEATHSIG, and when it dies (the runtime died, or
// Destroy killed it) the kernel kills everything in its namespace: QEMU. It exits with QEMU's
// status when QEMU ends. QEMU also sees no host process. The returned pid is the keeper's.
//
// A child that neither execs nor reports within 30 s is killed and the start fails, naming
// what it waited in.
StatusOr<pid_t> SpawnQemu(const std::vector<std::string>& args, std::vector<int> src, int logfd,
                          const std::vector<std::string>& cgroup_procs, bool keeper);

}  // namespace sbx::microvm
