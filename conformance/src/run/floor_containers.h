// The runtime-CLI floors of the command-line rows (issue 16, NFR-1; docs/performance.md, "One
// command from the command line"): a container of crun and of runsc that the harness starts
// itself (busybox-static rootfs, no network, no cgroups), so that a bare `crun exec ID
// /bin/true` and `runsc exec ID /bin/true` can be timed beside the backends that would run them.
//
// Ownership: the bundle and the runtimes' state roots are below a scratch directory of the
// caller's; StopContainer kills, waits for and deletes a container. What a failed start or probe
// left running is found by the directory its command line names (KillProcessesNaming).
//
// Thread-safety: one thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace sandcheck {

// `<runtime> run` in the foreground (it stays the parent of the container's processes), started
// once its init printed "ready".
struct FloorContainer {
  std::string id;
  std::vector<std::string> runtime;  // runtime argv prefix (with its global options)
  bool private_view = false;         // crun: a private mount view, unified hierarchy hidden
  pid_t pid = -1;                    // the foreground `run`
  std::string error;                 // why it did not start ("" when it did)
};

// An OCI bundle in `dir`: busybox-static as /bin/{busybox,sh,true,sleep,echo}, a read-only root,
// pid/mount/ipc/uts/network namespaces; init prints "ready" and sleeps. "" or the reason.
std::string MakeBundle(const std::string& dir);

// Starts `fc` on `bundle` (bounded wait for "ready"); on failure fc.error says why.
void StartContainer(FloorContainer& fc, const std::string& bundle, bool hide_unified);

// kill KILL, wait for the foreground run (bounded), delete; idempotent.
void StopContainer(FloorContainer& fc, bool hide_unified);

// The first platform of systrap, kvm, ptrace (the reference's order of preference, faster
// first; SBX_GVISOR_PLATFORM, the reference's override, goes first) with which `runsc do
// /bin/true` works, each probe with a state root of its own below `work`; "" and the reasons in
// `why` when none does.
std::string RunscPlatform(const std::string& runsc, const std::string& work, std::string* why);

}  // namespace sandcheck
