// libsbx-runtime.so: its one entry point (runtime_module.h).
#include "runtime_module.h"

extern "C" __attribute__((visibility("default"))) sbx::Runtime* sbx_runtime_open_v1(
    const sbx::RuntimeOptions* options, sbx::Status* error) {
  auto rt = sbx::Runtime::Open(*options);
  if (!rt.ok()) {
    *error = rt.status();
    return nullptr;
  }
  return rt->release();
}

// The loader names the symbol through kOpenSymbol: keep the two in step.
static_assert(sizeof(&sbx_runtime_open_v1) == sizeof(sbx::module::OpenFn));
