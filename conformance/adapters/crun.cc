// sandcheck-adapter-crun: adapter protocol v1 for crun (BK-3), one container per exec.
//
// crun 1.8.1 refuses this machine's hybrid cgroup layout (v1 controllers plus a controller-less
// cgroup2 at /sys/fs/cgroup/unified), even with --cgroup-manager=disabled, and resolves a
// relative cgroupsPath from each hierarchy's root rather than from its own cgroup. So every op
// first enters a private mount namespace (SetUpProcess) where the empty v2 mount is hidden and
// each v1 hierarchy's root is the adapter's own cgroup: crun then sees a plain v1 host and its
// cgroups land below the adapter's own, as the project's rules require.
#include <fmt/format.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>

#include "common/cgroup_probe.h"
#include "common/oci.h"

namespace sandcheck::adapter {
namespace {

class Crun : public OciRuntime {
 public:
  Crun()
      : OciRuntime(OciOptions{.binary = "crun",
                              .global_args = {"--cgroup-manager=cgroupfs"},
                              .absolute_cgroups_path = true}) {}

  Description Describe() const override {
    return {.name = "crun",
            .backends = {"oci"},
            .features = {"revert", "destroy", "timeout", "limits.cpu", "limits.memory",
                         "limits.pids", "limits.fds", "files"},
            .unsupported = OciUnsupported()};
  }

  sbx::Status SetUpProcess() override {
    ASSIGN_OR_RETURN(auto own, CgroupDirsOf(getpid()));
    bool hybrid = std::any_of(own.begin(), own.end(),
                              [](const CgroupDir& d) { return !d.controllers.empty(); });
    // SECURITY: a private mount namespace for this adapter process only; slave propagation so
    // nothing done here reaches the host's mount table. Everything vanishes when the op ends.
    if (unshare(CLONE_NEWNS) != 0) return sbx::ErrnoStatus("unshare(CLONE_NEWNS)");
    if (mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) {
      return sbx::ErrnoStatus("mount --make-rslave /");
    }
    for (const auto& d : own) {
      if (d.controllers.empty() && hybrid) {
        // The hybrid layout's cgroup2 has no controllers; hide it so crun takes the v1 path.
        if (mount("tmpfs", d.mount_point.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  "size=4k,mode=755") != 0) {
          return sbx::ErrnoStatus(fmt::format("mount tmpfs on {}", d.mount_point));
        }
      } else if (d.dir != d.mount_point) {
        // The hierarchy's root becomes the adapter's own cgroup, so crun's absolute
        // cgroupsPath lands below it (a pure v2 host too; untested here: this host is hybrid).
        if (mount(d.dir.c_str(), d.mount_point.c_str(), nullptr, MS_BIND, nullptr) != 0) {
          return sbx::ErrnoStatus(fmt::format("bind {} on {}", d.dir, d.mount_point));
        }
      }
    }
    return sbx::Status::Ok();
  }
};

}  // namespace
}  // namespace sandcheck::adapter

int main(int argc, char** argv) {
  sandcheck::adapter::Crun runtime;
  return sandcheck::adapter::AdapterMain(argc, argv, runtime);
}
