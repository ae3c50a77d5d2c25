// Driving an OCI runtime CLI (runc, crun, runsc) the way a container engine's shim does, one
// container per exec:
//   write config.json -> RUNTIME create --bundle DIR --pid-file DIR/init.pid ID
//   -> RUNTIME start ID -> wait for the init (the adapter is its subreaper) with the timeout
//   and an OOM watch armed -> read the memory cgroup's OOM counter -> RUNTIME delete --force ID
// Limits go into the spec's linux.resources (cpu quota/period, memory limit, pids limit) and
// process.rlimits (RLIMIT_NOFILE): the runtime applies them, the adapter only reads them back.
//
// Thread-safety: single-threaded (see process.h).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/json_io.h"
#include "common/protocol.h"

namespace sandcheck::adapter {

struct OciOptions {
  std::string binary;                    // "runc"
  std::vector<std::string> global_args;  // before the verb: "--platform=ptrace", ...
  // crun resolves a relative cgroupsPath from the hierarchy's root, not from its own cgroup;
  // its adapter binds its own cgroups over the roots and passes an absolute path instead.
  bool absolute_cgroups_path = false;
  // runsc: the pid file names gVisor's sandbox process, whose exit status is the container's;
  // its death by a signal means the sandbox itself crashed.
  bool init_is_sandbox = false;
  // If set, a global `--panic-log=<sandbox dir>/<panic_log>` (runsc): where the runtime's
  // sandbox process writes Go panics and fatal errors; non-empty after an exec = it crashed.
  std::string panic_log;
  // Namespaces requested in the spec.
  std::vector<std::string> namespaces = {"pid", "network", "ipc", "uts", "mount", "cgroup"};
};

// The features no OCI adapter here offers, with the reason (info's "unsupported").
std::map<std::string, std::string> OciUnsupported();

// The spec for one exec: read-only rootfs (the sandbox's own copy), /work bind-mounted
// read-write, /tmp a fresh tmpfs, no capabilities, uid 1000, no network but loopback.
Json BuildOciSpec(const SandboxRecord& rec, const std::string& work_dir, const std::string& cmd,
                  const std::string& cgroups_path, const OciOptions& options);

class OciRuntime : public Runtime {
 public:
  explicit OciRuntime(OciOptions options) : options_(std::move(options)) {}

  bool NeedsSubreaper() const override { return true; }
  sbx::StatusOr<std::string> Version(Supervisor& sup) override;
  sbx::StatusOr<ExecResult> Exec(Supervisor& sup, SandboxContext& sbx,
                                 const ExecRequest& req) override;
  sbx::Status Cleanup(Supervisor& sup, SandboxContext& sbx) override;

 protected:
  const OciOptions& options() const { return options_; }
  // "sandcheck-<name>-<sandbox id>": the container id and the cgroup's name.
  std::string ContainerId(const SandboxContext& sbx) const;

 private:
  std::vector<std::string> Command(const SandboxContext& sbx,
                                   std::initializer_list<std::string> verb_and_args) const;
  // `RUNTIME kill --all ID SIGNAL`; errors are ignored (the container may be gone already).
  void Kill(Supervisor& sup, const SandboxContext& sbx, int signal);
  sbx::Status Delete(Supervisor& sup, SandboxContext& sbx);

  OciOptions options_;
};

}  // namespace sandcheck::adapter
