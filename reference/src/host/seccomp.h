// Seccomp: a deny-list of what a tool never needs, compiled ONCE in the supervisor with
// libseccomp and exported to raw BPF; a child only loads it (prctl), which is async-signal-safe
// and far cheaper than building the filter per child (figures in docs/seccomp.md).
//
// Thread-safety: a compiled SeccompFilter is immutable; LoadInChild may be called from any
// number of children at once.
#pragma once

#include <linux/filter.h>

#include <string>
#include <vector>

#include "sbx/status.h"

namespace sbx::host {

class SeccompFilter {
 public:
  // Builds the filter (rules and their reasons in seccomp.cc). Denied calls fail with EPERM
  // (so tools see a clean error); clone3 fails with ENOSYS so that libc falls back to clone,
  // whose flags the filter can inspect. A system call through any ABI other than native
  // x86_64 (i386 `int 0x80`, x32) kills the process (SIGSYS): those ABIs would otherwise reach
  // the denied calls under other numbers.
  static StatusOr<SeccompFilter> Compile();

  // Installs the filter in the calling thread (PR_SET_NO_NEW_PRIVS + PR_SET_SECCOMP); it is
  // inherited by children and kept across execve. Precondition: a compiled filter, and the
  // caller has done every privileged step (mounts, pivot_root, setns) it needs.
  // Async-signal-safe: callable between fork/clone and exec. Returns -errno or 0.
  int LoadInChild() const noexcept;

  // Raw program bytes (for passing the filter to a process that loads it later).
  const std::vector<sock_filter>& program() const { return program_; }
  // Names of the denied syscalls (for docs, tests and `sandboxctl info`).
  const std::vector<std::string>& denied() const { return denied_; }

 private:
  std::vector<sock_filter> program_;
  std::vector<std::string> denied_;
};

}  // namespace sbx::host
