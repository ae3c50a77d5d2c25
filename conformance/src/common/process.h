// Process plumbing for what the harness starts, times or keeps by itself (the command-line rows,
// the floor containers, a local sandboxd; docs/performance.md, "One command from the command
// line"): fork+exec onto the descriptors it is given, a wait bounded by a pidfd, and the reason a
// run failed in words. The harness's own clock times a run from fork() to waitpid().
//
// RunSubprocess (common/subprocess.h) is for helper programs whose output the harness reads;
// this is for programs it only times or keeps running, with their stderr in a memfd.
//
// Thread-safety: every function may be called from several threads; Spawn calls only
// async-signal-safe functions between fork and exec.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace sandcheck {

// An owned file descriptor (closed on destruction).
class OwnedFd {
 public:
  explicit OwnedFd(int fd = -1) : fd_(fd) {}
  OwnedFd(OwnedFd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  OwnedFd& operator=(OwnedFd&& o) noexcept;
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd() { Reset(); }
  int get() const { return fd_; }
  void Reset();

 private:
  int fd_;
};

struct ProcessSpec {
  std::vector<std::string> argv;     // argv[0] absolute (no PATH search)
  bool private_cgroup_view = false;  // a private mount namespace, /sys/fs/cgroup/unified hidden
                                     // under a tmpfs on a hybrid host (crun 1.8 refuses it)
};

// The absolute path of `name` on PATH, or "".
std::string FindOnPath(const std::string& name);

// A hybrid host: v1 controllers plus a cgroup2 at /sys/fs/cgroup/unified.
bool HybridUnified();

// fork; in the child: its own process group, the private mount view if asked (the unified
// hierarchy hidden only when `hide_unified`), stdin /dev/null, stdout `out_fd` (or /dev/null),
// stderr `err_fd` (or /dev/null), the default signal state, and execve. runsc gets no TMPDIR
// (with one set to a pytest temp directory, `runsc do` failed: "cannot read client sync file").
// The pid, or -1 with errno.
pid_t Spawn(const ProcessSpec& spec, int out_fd, int err_fd, bool hide_unified);

// Waits for `pid` (our child) within `timeout_s`; on the bound its group is killed and reaped.
// The wait status, or -1 on the bound.
int WaitChild(pid_t pid, double timeout_s);

// Up to `max` bytes of a memfd from its start, trailing blanks dropped, the last 600 kept.
std::string ReadAll(int fd, size_t max = 4096);

// A wait status in words ("exited 1: <stderr>"), -1 meaning the bound `timeout_s` passed.
std::string DescribeStatus(int status, int err_fd, bool private_view, double timeout_s);

// One run timed by the harness: its seconds from fork to waitpid, or -1 with the reason in `why`
// (a non-zero exit counts as a failure).
double TimedRun(const ProcessSpec& spec, bool hide_unified, std::string* why, double timeout_s);

// Every process whose command line names `text` (never the harness itself): killed, and waited
// for until gone (bounded by `timeout_s` in all).
void KillProcessesNaming(const std::string& text, double timeout_s);

}  // namespace sandcheck
