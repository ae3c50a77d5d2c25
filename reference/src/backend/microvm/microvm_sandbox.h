// The microvm backend's sandbox and the spare clones it is made from (docs/microvm.md). Internal
// to backend/microvm/: microvm_backend.cc is the Backend (probe, golden templates) and hands each
// sandbox its template's SpareClones; microvm_spares.cc makes and keeps the clones;
// microvm_sandbox.cc is the Sandbox (lifecycle stages, commands, limits, revert, suspend).
//
// Thread-safety: SpareClones is thread-safe; a sandbox is called under the runtime's
// per-sandbox serialisation (backend.h).
#pragma once

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "backend/backend.h"
#include "backend/microvm/microvm_net.h"
#include "backend/microvm/microvm_vm.h"
#include "host/cgroup.h"

namespace sbx::backend {

inline constexpr const char* kRoot = "/sandbox";
inline constexpr uint32_t kSandboxUid = 1000;
// Guest RAM. Clones map the golden RAM privately, so pages a guest never touches cost nothing;
// the size only bounds what a request may ask (the guest's kernel, agent and the image in
// RAM need the rest).
inline constexpr uint32_t kGuestMemoryMb = 1024;
inline constexpr int64_t kGuestReserveBytes = 160ll << 20;
inline constexpr int64_t kMaxMemoryRequest = (int64_t{kGuestMemoryMb} << 20) - kGuestReserveBytes;
// QEMU's own memory beside the guest's RAM (the TCG code buffer, its heap, libraries: about
// 70 MiB per clone measured). The host cgroup's limit is the whole guest's RAM plus this: a
// clone's RAM is a private copy-on-write mapping without a balloon, so every guest page ever
// written stays resident in QEMU even after the guest frees it; a limit of the request alone
// would end a sandbox whose commands each stayed within it. RES-2 is the guest cgroup's.
inline constexpr int64_t kHostOverheadBytes = 320ll << 20;
inline constexpr int64_t kHostMemoryBytes = (int64_t{kGuestMemoryMb} << 20) + kHostOverheadBytes;
inline constexpr int64_t kQemuPids = 64;  // QEMU's threads (main, RCU, vCPU, I/O workers)
inline constexpr uint32_t kOutputLimit = 1u << 20;
inline constexpr int kSpareFloor = 1;

// A short unique suffix for the names of a clone's host cgroup and files (this process's pid,
// then a sequence number).
inline std::string Hex6() {
  static std::atomic<uint32_t> seq{0};
  return fmt::format("{:x}{:04x}", getpid() & 0xfff, seq.fetch_add(1) & 0xffff);
}

// One clone with what it lives in: its host cgroup and its tap.
struct Clone {
  std::unique_ptr<microvm::Vm> vm;
  std::unique_ptr<host::Cgroup> cgroup;
  Tap tap;
  void Kill() {
    if (vm && vm->pid() > 0) ::kill(vm->pid(), SIGKILL);
  }
  void Destroy() {
    if (vm) (void)vm->Destroy();
    vm.reset();
    cgroup.reset();  // kills what is left, removes the directories
    tap.fd.Reset();
  }
};

// A clone started by `start` (a clone of the template, or a restore from a state file) inside
// what it lives in: a fresh host cgroup with the whole guest's ceiling (a sandbox sets its own
// limits when it takes the clone) and a tap in the holding namespace. On failure nothing is left.
StatusOr<Clone> StartClone(
    const BackendContext& ctx, TapHolder* taps,
    const std::function<StatusOr<std::unique_ptr<microvm::Vm>>(const microvm::PrepareOptions&)>&
        start);

// The request every command of a sandbox shares (its limits), from an ExecSpec.
microvm::ExecRequest GuestRequest(const ExecSpec& exec, const SandboxSpec& spec);

// Spares of one template: restored clones waiting for a sandbox (create, revert), kSpareFloor
// of them kept ready in the background. One per template, shared by all its sandboxes: not a
// SpareSlot (backend/common/spare_slot.h), which is one sandbox's spare of its own snapshot.
class SpareClones : public std::enable_shared_from_this<SpareClones> {
 public:
  SpareClones(const BackendContext& ctx, std::unique_ptr<microvm::Template> t, TapHolder* taps)
      : ctx_(ctx), template_(std::move(t)), taps_(taps) {}
  ~SpareClones();
  const microvm::Template& tmpl() const { return *template_; }

  // A spare if one is ready, else a clone made now; `warm_up` then: warmed up too (for a
  // sandbox made ahead of its first command: a warm pool's, POOL-2), else not (for a command
  // that waits: its own first run does the translating).
  StatusOr<Clone> Take(bool warm_up);

  // Clones the template (QEMU inside a host cgroup of its own, its tap in the holding
  // namespace); `warm_up`: and runs one command in it.
  StatusOr<Clone> Make(bool warm_up);

  // Keeps kSpareFloor spares ready, in the background (the runtime drains it: Settle).
  void Refill();

 private:
  const BackendContext& ctx_;
  std::unique_ptr<microvm::Template> template_;
  TapHolder* taps_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Clone> ready_;
  static inline thread_local bool posting_ = false;
  int filling_ = 0;  // refills scheduled or running
  int making_ = 0;   // refills running
  std::string last_error_;
};

// A sandbox of `spec` (limits already defaulted) on a clone from `spares`, started (create's
// stages, in `timings`).
StatusOr<std::unique_ptr<Sandbox>> StartMicrovmSandbox(const BackendContext& ctx, TapHolder* taps,
                                                       std::shared_ptr<SpareClones> spares,
                                                       const std::string& id,
                                                       const SandboxSpec& spec,
                                                       StageTimings* timings, CreateMode mode);

}  // namespace sbx::backend
