// sandcheck-adapter-runc: adapter protocol v1 for runc (BK-3), one container per exec.
// Everything but the runtime's name and what it enforces is in common/oci.cc.
#include "common/oci.h"

namespace sandcheck::adapter {
namespace {

class Runc : public OciRuntime {
 public:
  Runc() : OciRuntime(OciOptions{.binary = "runc"}) {}

  Description Describe() const override {
    return {.name = "runc",
            .backends = {"oci"},
            .features = {"revert", "destroy", "timeout", "limits.cpu", "limits.memory",
                         "limits.pids", "limits.fds", "files"},
            .unsupported = OciUnsupported()};
  }
};

}  // namespace
}  // namespace sandcheck::adapter

int main(int argc, char** argv) {
  sandcheck::adapter::Runc runtime;
  return sandcheck::adapter::AdapterMain(argc, argv, runtime);
}
