// The wasm backend (BK-2; docs/wasm.md): a WASI module, compiled ahead of time by wasm2c into a
// static host executable (reference/src/backend/wasm/host/), run inside the SAME OS isolation as
// native (namespaces, cgroups, seccomp, sbx-init, the overlay /work): the WASM runtime is a second
// wall, not the only one.
//
//  * A template is a module's image: /wasm/host (the module, the wasm2c runtime and WASI
//    preview 1 imports, statically linked), /wasm/module.wasm (what it was compiled from).
//    The default template is the fixture tools' module, `wasm-tools`; any image holding a
//    /wasm/host serves (fixtures/wasm/build-wasm-image.sh makes one).
//  * A command is a fresh instance: the sandbox's pre-spawned process is the module host,
//    already instantiated (POOL-8), waiting for its command line on fd 3; the command runs
//    _start with that argv (no shell: pipes and redirections are refused). Revert = a fresh
//    instance on the untouched /work (the native revert: a new overlay, a new process).
//  * Capabilities: /work is the only preopened directory, resolved beneath by the kernel
//    (openat2 RESOLVE_BENEATH): no `..`, absolute path or symlink out of it. No sockets: WASI
//    preview 1 cannot open one and the host offers none, so egress is denied by construction
//    and a create that asks for egress rules is refused (unsupported), never silently ignored.
//  * Limits: memory = the linear memory's maximum (the limit less kHostReserveBytes, in 64 KiB
//    pages) AND the cgroup: a memory.grow past it ends the run as resource_exceeded; CPU = the
//    cgroup's quota AND an in-engine CPU budget; time = an in-engine deadline AND the sandbox's
//    SIGTERM/SIGKILL (wasm2c 1.0.32 has no fuel or epoch counter: the host traps the instance
//    from a timer signal, deferred while a WASI import runs; CommandPrefix); pids, disk, fds as
//    native.
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>

#include "backend/backend.h"
#include "backend/native/native_instance.h"
#include "host/image.h"

namespace sbx::backend {
namespace {

constexpr const char* kDefaultModule = "wasm-tools";
constexpr const char* kHost = "/wasm/host";
// The host process's own memory inside the sandbox's limit (its code, stacks, the WASI
// tables): the rest is the module's linear memory.
constexpr int64_t kHostReserveBytes = 16ll << 20;
constexpr int64_t kPageBytes = 64ll << 10;
constexpr int64_t kMinPages = 16;

// The module's linear-memory cap for a memory limit (RES-2).
int64_t MaxPages(const Limits& l) {
  return std::max(kMinPages, (l.memory_bytes - kHostReserveBytes) / kPageBytes);
}

// The host's per-command settings (wasm_host_main.c): the in-engine deadline is the command's
// timeout; the in-engine CPU budget is the CPU time the quota allows within that timeout, with
// a margin (10 % + 100 ms), so that under a working cgroup quota the deadline always comes first
// and the budget is a second wall, biting only where the quota does not (RES-1).
std::string CommandPrefix(const ExecSpec& exec, const Limits& l) {
  if (!(exec.timeout_s > 0)) return "#sbx-wasm deadline_ms=0 cpu_ms=0\n";
  const double cores = l.cpu_millicores > 0 ? l.cpu_millicores / 1000.0
                                            : static_cast<double>(sysconf(_SC_NPROCESSORS_ONLN));
  const auto deadline_ms = static_cast<uint64_t>(std::ceil(exec.timeout_s * 1000));
  const auto cpu_ms = static_cast<uint64_t>(std::ceil(exec.timeout_s * 1000 * cores * 1.1)) + 100;
  return fmt::format("#sbx-wasm deadline_ms={} cpu_ms={}\n", deadline_ms, cpu_ms);
}

Entrypoint HostEntrypoint(const Limits& l) {
  std::string pages = std::to_string(MaxPages(l));
  return {.run = {kHost, "--max-pages", pages, "-c"},
          .waiting = {kHost, "--max-pages", pages, "--script-fd", "3"},
          .serving = {kHost, "--max-pages", pages, "--serve-fd", "3"}};
}

class WasmBackend final : public Backend {
 public:
  explicit WasmBackend(const BackendContext& ctx) : ctx_(ctx) {}
  std::string name() const override { return "wasm"; }

  Status Probe() override {
    if (geteuid() != 0) {
      return Status(Code::kPermissionDenied,
                    "the wasm backend needs root (it runs inside the native isolation)");
    }
    if (!ctx_.cgroups) return Unsupported("no usable cgroup hierarchy");
    if (!ctx_.images) return Unsupported("no image store");
    if (access(ctx_.init_path.c_str(), X_OK) != 0)
      return ErrnoStatus("sbx-init at " + ctx_.init_path);
    // A module to run: the fixture module's image, built with wabt's wasm2c and wasi-libc.
    auto image = ctx_.images->Get(kDefaultModule);
    if (!image.ok()) {
      return Unsupported(fmt::format(
          "no wasm module image '{}' ({}): it is built with wabt (wasm2c), wasi-libc and "
          "clang's wasm32-wasi target",
          kDefaultModule, image.status().message()));
    }
    return Status::Ok();
  }

  std::string Implementation() const override {
    return "wasm2c ahead-of-time (wabt 1.0.32) with WASI preview 1 (sbx-wasm-host), inside the "
           "native isolation; no sockets (egress denied by construction); CPU and time by the "
           "cgroup "
           "quota and the timeout AND in-engine interruption (a deadline and a CPU budget trap "
           "the instance)";
  }

  std::vector<std::string> Features() const override {
    return {"revert",     "destroy", "limits.cpu", "limits.memory", "limits.pids", "limits.disk",
            "limits.fds", "timeout", "tenants",    "trust",         "secrets",     "files"};
  }

  StatusOr<std::unique_ptr<Sandbox>> Create(const std::string& id, const SandboxSpec& spec,
                                            StageTimings* timings, CreateMode mode) override {
    if (!spec.egress.empty()) {
      return Unsupported(
          "the wasm backend has no network: a WASI module cannot open a socket, so egress "
          "rules cannot be granted (BK-2; choose another backend for network access)");
    }
    SandboxSpec s = spec;
    if (s.template_name == SandboxSpec{}.template_name) s.template_name = kDefaultModule;
    ASSIGN_OR_RETURN(host::Image image, ctx_.images->Get(s.template_name));
    if (access((image.rootfs_dir + kHost).c_str(), X_OK) != 0) {
      return InvalidArgument(
          fmt::format("template '{}' is not a wasm module's image (no {}): build one with "
                      "fixtures/wasm/build-wasm-image.sh",
                      s.template_name, kHost));
    }
    NativeFlavor flavor{.backend = "wasm",
                        .entrypoint = HostEntrypoint,
                        .quote_argv = true,
                        .wasm_host_signals = true,
                        .command_prefix = CommandPrefix};
    return CreateNativeSandbox(ctx_, id, s, image.rootfs_dir, std::move(flavor), timings, mode);
  }

 private:
  const BackendContext& ctx_;
};

}  // namespace

std::unique_ptr<Backend> MakeWasmBackend(const BackendContext& ctx) {
  return std::make_unique<WasmBackend>(ctx);
}

}  // namespace sbx::backend
