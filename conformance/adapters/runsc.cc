// sandcheck-adapter-runsc: adapter protocol v1 for gVisor's runsc (BK-4), one sandbox per exec.
//
// Probed on this machine (docs/adapters.md): --platform=kvm hangs (no usable KVM for it here),
// --platform=ptrace works; the default --network=sandbox refuses to start without a prepared
// network namespace, so --network=none (loopback only). cgroups work as is (no
// --ignore-cgroups): runsc applies the spec's cpu/memory/pids to the sandbox's cgroup, and a
// memory breach OOM-kills the sandbox process, which the kernel counts in that cgroup.
// --panic-log: gVisor's own crashes (Go fatal errors, sentry panics) are told apart from the
// command's exit status. pids.max counts the sandbox's HOST threads (Sentry, Gofer, ptrace
// stubs), about 50 before any guest process: below ~64 gVisor itself cannot start.
// SANDCHECK_RUNSC_PLATFORM overrides the platform.
#include <cstdlib>
#include <string>

#include "common/oci.h"

namespace sandcheck::adapter {
namespace {

std::string Platform() {
  const char* p = std::getenv("SANDCHECK_RUNSC_PLATFORM");
  return p && *p ? p : "ptrace";
}

class Runsc : public OciRuntime {
 public:
  Runsc()
      : OciRuntime(OciOptions{.binary = "runsc",
                              .global_args = {"--platform=" + Platform(), "--network=none"},
                              .init_is_sandbox = true,
                              .panic_log = "runsc-panic.log",
                              .namespaces = {"pid", "network", "ipc", "uts", "mount"}}) {}

  Description Describe() const override {
    return {.name = "runsc",
            .backends = {"gvisor"},
            .features = {"revert", "destroy", "timeout", "limits.cpu", "limits.memory",
                         "limits.pids", "limits.fds", "files"},
            .unsupported = OciUnsupported()};
  }

  sbx::StatusOr<std::string> Version(Supervisor& sup) override {
    ASSIGN_OR_RETURN(std::string v, OciRuntime::Version(sup));
    return v + " (platform " + Platform() + ")";
  }
};

}  // namespace
}  // namespace sandcheck::adapter

int main(int argc, char** argv) {
  sandcheck::adapter::Runsc runtime;
  return sandcheck::adapter::AdapterMain(argc, argv, runtime);
}
