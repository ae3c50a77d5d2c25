// The backend registry: each backend is one file; this list is the only place that names them.
#include "backend/backend.h"

namespace sbx::backend {

std::unique_ptr<Backend> MakeNativeBackend(const BackendContext& ctx);
std::unique_ptr<Backend> MakeOciBackend(const BackendContext& ctx);     // oci_backend.cc
std::unique_ptr<Backend> MakeGvisorBackend(const BackendContext& ctx);  // gvisor_backend.cc
std::unique_ptr<Backend> MakeWasmBackend(const BackendContext& ctx);    // wasm_backend.cc
std::unique_ptr<Backend> MakeRemoteBackend(const BackendContext& ctx);  // remote_backend.cc
std::unique_ptr<Backend> MakeMicrovmBackend(const BackendContext& ctx); // microvm_backend.cc

std::vector<std::unique_ptr<Backend>> MakeBackends(const BackendContext& ctx) {
  std::vector<std::unique_ptr<Backend>> out;
  out.push_back(MakeNativeBackend(ctx));
  out.push_back(MakeOciBackend(ctx));
  out.push_back(MakeGvisorBackend(ctx));
  out.push_back(MakeWasmBackend(ctx));
  out.push_back(MakeRemoteBackend(ctx));
  out.push_back(MakeMicrovmBackend(ctx));
  return out;
}

}  // namespace sbx::backend
