// The spare clones of one template (microvm_sandbox.h).
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>

#include "backend/common/init_client.h"
#include "backend/common/limits.h"
#include "backend/microvm/microvm_sandbox.h"

namespace sbx::backend {

microvm::ExecRequest GuestRequest(const ExecSpec& exec, const SandboxSpec& spec) {
  microvm::ExecRequest req;
  if (exec.argv.empty()) {
    req.shell = exec.command;
  } else {
    req.argv = exec.argv;
  }
  std::map<std::string, std::string> env = AgentBaseEnv();
  for (const auto* m : {&spec.env, &exec.env, &spec.secrets, &exec.secrets})
    for (const auto& [k, v] : *m) env[k] = v;
  for (auto& [k, v] : env) {
    req.env.push_back(k + "=" + v);
    explicit_bzero(v.data(), v.size());  // LC-8: the request's copy is zeroed after the command
  }
  req.cwd = "/work";
  req.stdin_data = exec.stdin_data;
  req.timeout_ms = exec.timeout_s > 0 ? static_cast<uint32_t>(std::ceil(exec.timeout_s * 1000)) : 0;
  req.term_grace_ms = static_cast<uint32_t>(std::max(0.0, exec.grace_s) * 1000);
  req.memory_limit = static_cast<uint64_t>(spec.limits.memory_bytes);
  req.output_limit = kOutputLimit;
  req.root = kRoot;
  req.uid = req.gid = kSandboxUid;
  req.pids_limit = static_cast<uint32_t>(spec.limits.pids);
  req.nofile = static_cast<uint32_t>(spec.limits.fds);
  return req;
}

SpareClones::~SpareClones() {
  std::lock_guard lock(mu_);
  for (auto& c : ready_) c.Destroy();
}

StatusOr<Clone> SpareClones::Take(bool warm_up) {
  std::optional<Clone> got;
  {
    // A spare on its way is nearer than a new clone (which would still have every code path
    // of its first command to translate): wait for it, boundedly.
    std::unique_lock lock(mu_);
    // Only a refill that is RUNNING counts: one still queued may sit behind this very
    // thread in the runtime's executor.
    changed_.wait_for(lock, std::chrono::seconds(10),
                      [&] { return !ready_.empty() || making_ == 0; });
    if (!ready_.empty()) {
      got = std::move(ready_.front());
      ready_.pop_front();
    }
  }
  Refill();
  if (got) return std::move(*got);
  return Make(warm_up);
}

StatusOr<Clone> StartClone(
    const BackendContext& ctx, TapHolder* taps,
    const std::function<StatusOr<std::unique_ptr<microvm::Vm>>(const microvm::PrepareOptions&)>&
        start) {
  Clone c;
  ASSIGN_OR_RETURN(c.cgroup, ctx.cgroups->Create("sb-vm-" + Hex6()));
  RETURN_IF_ERROR(c.cgroup->SetMemoryBytes(kHostMemoryBytes));
  RETURN_IF_ERROR(c.cgroup->SetPidsMax(kQemuPids));
  ASSIGN_OR_RETURN(c.tap, taps->MakeTap());
  microvm::PrepareOptions po;
  po.tap_fd = c.tap.fd.get();
  po.cgroup_procs = c.cgroup->JoinFiles();
  auto vm = start(po);
  if (!vm.ok()) {
    c.Destroy();
    return vm.status();
  }
  c.vm = std::move(vm).value();
  return c;
}

StatusOr<Clone> SpareClones::Make(bool warm_up) {
  // A spare's ceiling until a sandbox takes it (then the sandbox's limits): the whole guest.
  auto started = StartClone(ctx_, taps_, [&](const microvm::PrepareOptions& po) {
    return microvm::Vm::Clone(*template_, {}, po);
  });
  if (!started.ok()) return started.status().WithContext("microVM clone");
  Clone c = std::move(started).value();
  if (warm_up) {
    // TCG translates guest code per QEMU process: one command through the same path a
    // sandbox's commands take (chroot, namespaces, busybox sh) makes the first real one
    // cost what a second one does. It leaves nothing in /work or /tmp.
    SandboxSpec spec;
    spec.limits = DefaultedLimits({});
    auto r = c.vm->Exec(
        GuestRequest(ExecSpec{.command = "echo warm > /dev/null", .timeout_s = 10}, spec));
    if (!r.ok() || r->exit_code.value_or(-1) != 0) {
      c.Destroy();
      return Status(Code::kInternal, "warm-up command in a new microVM clone failed: " +
                                         (r.ok() ? r->stderr_data : r.status().message()));
    }
  }
  return c;
}

void SpareClones::Refill() {
  {
    std::lock_guard lock(mu_);
    if (static_cast<int>(ready_.size()) + filling_ >= kSpareFloor || !ctx_.background) return;
    ++filling_;
  }
  auto self = shared_from_this();
  posting_ = true;  // thread_local: true only while this thread is inside the post below
  ctx_.background([self] {
    if (posting_) {
      // The runtime ran the task inline (its executor's backlog is full): a caller's create
      // or revert must not pay for a whole spare. The next take schedules one again.
      std::lock_guard lock(self->mu_);
      --self->filling_;
      return;
    }
    {
      std::lock_guard lock(self->mu_);
      ++self->making_;
    }
    auto c = self->Make(true);
    std::lock_guard lock(self->mu_);
    --self->filling_;
    --self->making_;
    if (c.ok()) {
      self->ready_.push_back(std::move(c).value());
    } else {
      self->last_error_ = c.status().message();
    }
    self->changed_.notify_all();
  });
  posting_ = false;
}

}  // namespace sbx::backend
