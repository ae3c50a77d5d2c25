// The backend registry: the one list of the backends, and of which this build compiled in
// (SBX_BACKENDS, cmake/SbxBackends.cmake). Each backend is a folder and a library of its own.
#include "backend/backend.h"

namespace sbx::backend {

std::unique_ptr<Backend> MakeNativeBackend(const BackendContext& ctx);   // native/
std::unique_ptr<Backend> MakeOciBackend(const BackendContext& ctx);      // oci/
std::unique_ptr<Backend> MakeGvisorBackend(const BackendContext& ctx);   // gvisor/
std::unique_ptr<Backend> MakeWasmBackend(const BackendContext& ctx);     // wasm/
std::unique_ptr<Backend> MakeRemoteBackend(const BackendContext& ctx);   // remote/
std::unique_ptr<Backend> MakeMicrovmBackend(const BackendContext& ctx);  // microvm/

namespace {

// A backend this build left out: still named, so that the runtime's info and a request for it
// say why it cannot run, as for a backend whose probe failed.
class NotCompiledBackend final : public Backend {
 public:
  explicit NotCompiledBackend(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  Status Probe() override { return Unsupported(Reason()); }
  std::vector<std::string> Features() const override { return {}; }
  StatusOr<std::unique_ptr<Sandbox>> Create(const std::string&, const SandboxSpec&, StageTimings*,
                                            CreateMode) override {
    return Unsupported(Reason());
  }

 private:
  std::string Reason() const {
    return "the " + name_ + " backend is not compiled into this build (SBX_BACKENDS)";
  }
  std::string name_;
};

}  // namespace

std::vector<std::unique_ptr<Backend>> MakeBackends([[maybe_unused]] const BackendContext& ctx) {
  // Strength order, weakest first (backend.h).
  std::vector<std::unique_ptr<Backend>> out;
#ifdef SBX_BACKEND_NATIVE
  out.push_back(MakeNativeBackend(ctx));
#else
  out.push_back(std::make_unique<NotCompiledBackend>("native"));
#endif
#ifdef SBX_BACKEND_OCI
  out.push_back(MakeOciBackend(ctx));
#else
  out.push_back(std::make_unique<NotCompiledBackend>("oci"));
#endif
#ifdef SBX_BACKEND_GVISOR
  out.push_back(MakeGvisorBackend(ctx));
#else
  out.push_back(std::make_unique<NotCompiledBackend>("gvisor"));
#endif
#ifdef SBX_BACKEND_WASM
  out.push_back(MakeWasmBackend(ctx));
#else
  out.push_back(std::make_unique<NotCompiledBackend>("wasm"));
#endif
#ifdef SBX_BACKEND_REMOTE
  out.push_back(MakeRemoteBackend(ctx));
#else
  out.push_back(std::make_unique<NotCompiledBackend>("remote"));
#endif
#ifdef SBX_BACKEND_MICROVM
  out.push_back(MakeMicrovmBackend(ctx));
#else
  out.push_back(std::make_unique<NotCompiledBackend>("microvm"));
#endif
  return out;
}

}  // namespace sbx::backend
