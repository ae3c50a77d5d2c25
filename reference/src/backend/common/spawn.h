// Starting an OCI runtime's command line (crun, runc, runsc) from the multi-threaded runtime:
// fork, then — in the child, with async-signal-safe system calls only — a private mount
// namespace with the tweaks this host needs, the sandbox's cgroup, the descriptors, and exec.
//
// Why a private mount namespace per runtime command (docs/backends.md, "host quirks"):
//  * crun 1.8.1 refuses this hybrid cgroup layout (v1 controllers plus an empty cgroup2 at
//    /sys/fs/cgroup/unified), even with --cgroup-manager=disabled: an empty tmpfs over the v2
//    mount point makes it see a plain v1 host;
//  * runsc 2022-12 decides that it runs in the root network namespace when
//    /proc/sys/net/core/rmem_default exists, which on this kernel (6.18) it does in every
//    namespace: an empty tmpfs over /proc/sys/net makes --network=sandbox work;
//  * the container's root is an overlay (image read-only below, a size-limited tmpfs above)
//    mounted here, so that it exists only in this namespace and in the container's copy of it
//    — nothing is ever mounted in the host's mount table, and nothing is left when the
//    container dies.
//
// A command that starts a container (create, restore) runs under a *shim*, as containerd's
// shim does: the forked child becomes a child subreaper, forks the runtime command, reports
// its exit status, and then reaps every process re-parented to it (the container's init,
// gVisor's Sentry and Gofer) until none is left. Without it they would be re-parented to the
// host's PID 1 and stay zombies until it reaps them — `runsc delete` waits for that (here 1-2 s).
// The shim runs only async-signal-safe system calls; it exits when the container's last host
// process is gone.
//
// Thread-safety: Spawn() may be called from any thread; a Child is owned by one caller.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "host/fd.h"
#include "sbx/status.h"

namespace sbx::backend {

struct OverlayRoot {
  std::string lower;          // image dir (read-only), possibly "layer:image"
  std::string scratch;        // tmpfs mount point; holds upper/ and work/
  std::string target;         // where the overlay is mounted (the bundle's rootfs)
  int64_t scratch_bytes = 0;  // RES-3: the tmpfs size
};

struct SpawnPlan {
  std::vector<std::string> argv;  // argv[0] is an absolute path
  int exec_fd = -1;               // >= 0: exec this descriptor (a SealedBinary), argv[0] as named
  bool private_mounts = false;
  std::vector<std::string> hide_dirs;  // empty tmpfs mounted over each (needs private_mounts)
  std::vector<OverlayRoot> overlays;   // needs private_mounts
  std::vector<int> cgroup_procs_fds;   // "0" written to each: the child joins that cgroup
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1;  // -1 = /dev/null
  std::vector<std::pair<int, int>> extra_fds;         // (fd in the parent, fd in the child)
  bool shim = false;  // run the command under a subreaping shim (see above)
};

// A spawned runtime command. The destructor kills (SIGKILL) and reaps it if still running.
class Child {
 public:
  Child() = default;
  Child(pid_t pid, int pidfd) : pid_(pid), pidfd_(pidfd) {}
  Child(Child&& o) noexcept;
  Child& operator=(Child&& o) noexcept;
  ~Child();

  pid_t pid() const { return pid_; }
  // Shim mode: the runtime command's pid and exit status arrive here (two ints).
  int status_fd() const { return status_fd_.get(); }
  void set_status_fd(int fd) { status_fd_.Reset(fd); }
  int pidfd() const { return pidfd_.get(); }
  bool running() const { return pid_ > 0; }
  // Reaps the child if it has exited; true (and the wait status) once it has.
  bool TryReap(int* status);
  // Waits up to timeout_s; false on timeout (the child keeps running).
  bool Wait(double timeout_s, int* status);
  void Kill(int sig);

 private:
  pid_t pid_ = -1;
  host::UniqueFd pidfd_;
  host::UniqueFd status_fd_;
};

// Forks and execs (in shim mode: forks the shim, which forks and execs). Returns once the
// command has exec'd, or the failed step with its errno.
StatusOr<Child> Spawn(const SpawnPlan& plan);

struct RunOutput {
  int status = 0;        // wait status
  std::string out, err;  // tails (64 KiB)
  bool timed_out = false;
  bool ok() const;               // exited with 0
  std::string Describe() const;  // "exit 1: <stderr>"
};

// Spawns (stdout/stderr captured unless the plan sets them) and waits up to timeout_s for the
// command; on timeout the command is killed with SIGKILL and timed_out is set. In shim mode the
// shim keeps running after the command and is handed to *shim (required then).
StatusOr<RunOutput> RunCommand(SpawnPlan plan, double timeout_s, Child* shim = nullptr);

// A runtime binary copied once into a memfd sealed against every change (F_SEAL_SEAL, SHRINK,
// GROW, WRITE), made on first use. crun and runc copy themselves into such a memfd and re-exec
// from it at every start (CVE-2019-5736: a container must never reach the host's binary
// through /proc/self/exe), unless /proc/self/exe already is a fully sealed memfd: executing
// this copy keeps that protection and skips their copy, a bind mount in the host's mount
// table and a second exec per command (measured: `crun delete` 16-20 ms -> docs/backends.md).
// Not for runsc (it re-execs itself for its own purposes). Thread-safe; fd() is -1 when the
// copy could not be made (the caller then executes the path, as before).
class SealedBinary {
 public:
  explicit SealedBinary(std::string path) : path_(std::move(path)) {}
  int fd() const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  mutable std::once_flag once_;
  mutable host::UniqueFd fd_;
};

// The first executable `name` in the usual system directories, or "".
std::string FindExecutable(const std::string& name);

}  // namespace sbx::backend
