// The reference runtime as a loadable module (libsbx-runtime.so, docs/sandboxctl.md, "Start-up
// cost"): sandboxctl loads it only for a command that runs in process, so a command sent to a
// sandboxd (--server) never maps the runtime's libraries (nftables, ldns, OpenSSL, seccomp,
// libcgroup: about 5 ms of a process start here).
//
// The ABI is this one C symbol; the objects it returns are the public C++ interface of
// sbx/runtime.h, built by the same compiler in the same build (the module is never loaded by
// anything else). The module exports nothing else (-Wl,--exclude-libs,ALL) and is never
// unloaded.
#pragma once

#include "sbx/runtime.h"
#include "sbx/status.h"

namespace sbx::module {

inline constexpr const char* kOpenSymbol = "sbx_runtime_open_v1";
inline constexpr const char* kFileName = "libsbx-runtime.so";

// Opens a runtime with `options`; the caller owns the result. On failure returns null and
// sets *error.
using OpenFn = sbx::Runtime* (*)(const sbx::RuntimeOptions* options, sbx::Status* error);

}  // namespace sbx::module
