// backend/oci_exec: a command in a running OCI container (crun, runc, runsc): LC-4 through
// the in-sandbox agent (init_client.h: environment and secrets in memory only), the shared
// watch loop (command_watch.h) for LC-5 and LC-6; SignalTools for RES-5. The container's life
// (bundle, create/restore, limits, checkpoint, teardown) is oci_container.cc.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backend/common/command_watch.h"
#include "backend/oci/oci_bundle.h"
#include "backend/oci/oci_container.h"

namespace sbx::backend {
namespace {

using Clock = std::chrono::steady_clock;

// A memfd holding `text` (LC-4: a command's environment and secrets never touch a disk).
StatusOr<host::UniqueFd> MemFile(const std::string& name, const std::string& text) {
  host::UniqueFd fd(static_cast<int>(syscall(SYS_memfd_create, name.c_str(), MFD_CLOEXEC)));
  if (!fd.valid()) return ErrnoStatus("memfd_create");
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = write(fd.get(), text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus("write memfd");
    off += static_cast<size_t>(n);
  }
  if (lseek(fd.get(), 0, SEEK_SET) != 0) return ErrnoStatus("lseek memfd");
  return fd;
}

}  // namespace

void Container::SignalTools(int sig) {
  if (rt_.flavor == OciFlavor::kRunsc) {
    // gVisor's processes are not host processes: a killer runs inside, as the tools' user.
    // kill(-1) reaches every process that user may signal except itself, and the agent (PID 1)
    // is uid 0 (RES-5).
    OciProcess killer;
    killer.args = {"/bin/kill", "-s", sig == SIGKILL ? "KILL" : "TERM", "-1"};
    killer.env = OciBaseEnv();
    killer.cwd = "/";
    auto mem = MemFile("sbx-killer", OciProcessJson(killer).dump());
    if (mem.ok()) {
      SpawnPlan plan = Plan({"exec", "--process", "/proc/self/fd/3", cid_}, false, false);
      plan.extra_fds = {{mem->get(), 3}};
      auto out = RunCommand(std::move(plan), 10);
      if (out.ok() && (out->ok() || (WIFEXITED(out->status) && WEXITSTATUS(out->status) == 1)))
        return;
    }
    // The Sentry cannot run the killer (e.g. it is out of host threads): end the container.
    if (sig == SIGKILL) {
      crashed_ = true;
      KillNow();
    }
    return;
  }
  // crun/runc: from the host. Frozen, nothing can fork or exit (so no pid is reused) while we
  // pick the targets: every process of the cgroup but the container's init, the agent (a
  // command it is still starting, uid 0 until its setresuid, is a target too).
  for (int round = 0; round < (sig == SIGKILL ? 40 : 1); ++round) {
    bool frozen = cgroup_->Freeze().ok();
    int targets = 0;
    for (pid_t pid : cgroup_->Pids()) {
      if (pid == init_pid_) continue;
      if (frozen) {
        kill(pid, sig);
      } else {
        // SECURITY: not frozen, so the pid may have been reused by a host process since we read
        // it: pin the process with a pidfd, check it is still in the sandbox's cgroup, and
        // signal through the pidfd only.
        int pfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
        if (pfd < 0) continue;
        std::vector<pid_t> now = cgroup_->Pids();
        if (std::find(now.begin(), now.end(), pid) != now.end()) {
          syscall(SYS_pidfd_send_signal, pfd, sig, nullptr, 0);
        }
        close(pfd);
      }
      ++targets;
    }
    if (frozen) (void)cgroup_->Thaw();
    if (targets == 0) return;
    usleep(5000);
  }
}

// The agent (sbx-init, the container's PID 1) forks the command: no runtime CLI process per
// command (issue 16). Limits and usage stay the host's business: crun/runc: the command is a
// host process in the sandbox's cgroup; runsc: the cgroup holds the Sentry that runs it.
StatusOr<ExecResult> Container::Exec(const ExecSpec& exec,
                                     const std::map<std::string, std::string>& secrets) {
  if (torn_down_) return FailedPrecondition("container is gone");
  const bool runsc = rt_.flavor == OciFlavor::kRunsc;
  ExecResult r;
  if (!agent_.valid()) {
    crashed_ = true;
    return Status(Code::kToolError, fmt::format("the {} container's agent is gone", rt_.name()));
  }
  auto t_inject = Clock::now();
  (void)cgroup_->ResetPeak();
  const host::CgroupUsage before = cgroup_->Usage();
  const int64_t pids_refusals_before = cgroup_->PidsMaxRefusals();

  // LC-4 inject context: argv, environment and secrets reach the agent in memory only.
  std::map<std::string, std::string> env = OciBaseEnv();
  for (const auto& [k, v] : env_) env[k] = v;
  for (const auto& [k, v] : exec.env) env[k] = v;
  for (const auto& [k, v] : secrets) env[k] = v;
  for (const auto& [k, v] : exec.secrets) env[k] = v;
  agent_.set_nofile(limits_.fds);
  agent_.set_nproc(guest_nproc_);
  auto started = agent_.Start(exec, std::move(env));
  if (!started.ok()) {
    if (agent_.broken()) crashed_ = true;
    return started.status();
  }
  if (started->exec_errno != 0) {
    SetExecFailed(exec, started->exec_errno, &r);
    r.stages.inject_context = SecondsSince(t_inject);
    return r;
  }
  const uint32_t id = started->id;
  r.stages.inject_context = SecondsSince(t_inject);

  // LC-5 execute with the timeout armed: output, the exit, OOM, the init, the disk quota.
  auto t_exec = Clock::now();
  WatchHooks hooks;
  hooks.terminate = [this] { SignalTools(SIGTERM); };
  hooks.kill = [this]() -> std::optional<std::chrono::milliseconds> {
    SignalTools(SIGKILL);
    return std::nullopt;
  };
  hooks.end_sandbox = [this] { KillNow(); };
  hooks.disk_free = [this, runsc](int64_t* used) -> int64_t {
    return runsc ? -1 : WorkDiskFree(init_pid_, used);  // gVisor's /work is inside the Sentry
  };
  hooks.oom_breached = [this, runsc] {
    // Under gVisor the Sentry is what breaches, and it may die before the counters say so.
    return cgroup_->UnderOom() || cgroup_->OomKills() > oom_kills_seen_ ||
           (runsc && cgroup_->Usage().memory_peak_bytes >= limits_.memory_bytes * 95 / 100);
  };
  CommandWatch watch(exec, cgroup_.get(), std::move(hooks), std::move(started->pipes), &r);
  bool exited = false, init_died = false;
  int wait_status = 0;
  auto sources = [&] {
    std::vector<WatchSource> s;
    if (!init_died && init_pidfd_.valid()) {
      s.push_back({init_pidfd_.get(), POLLIN, [&](short revents) {
                     if (revents & POLLIN) {
                       init_died = true;  // the agent died: nothing can run in the container
                       crashed_ = true;
                       KillNow();
                     }
                     return Status::Ok();
                   }});
    }
    if (!init_died) {
      WatchSource exit = agent_.ExitSource(id, &exited, &wait_status);
      // The agent's socket closing is the container ending (OOM, the disk quota, a crash):
      // the verdict comes from the cgroup below, not from this error.
      exit.on_ready = [&, inner = std::move(exit.on_ready)](short revents) {
        if (!inner(revents).ok()) {
          init_died = true;
          crashed_ = true;
          KillNow();
        }
        return Status::Ok();
      };
      s.push_back(std::move(exit));
    }
    return s;
  };
  RETURN_IF_ERROR(watch.Run(sources, [&] { return exited || init_died; }));
  if (watch.timed_out()) {
    // RES-5: what the command left behind got SIGTERM only: SIGKILL it now.
    SignalTools(SIGKILL);
  }
  r.seconds = SecondsSince(t_exec);
  r.stages.execute = r.seconds;

  // LC-6 collect: what the pipes still hold, then usage from the cgroup, never from inside.
  auto t_collect = Clock::now();
  watch.Drain();
  if (!init_died && !InitAlive()) {
    init_died = true;
    crashed_ = true;
  }
  // gVisor at pids.max: the Sentry cannot make a thread and dies, but the agent's answer may
  // come a moment before the Sentry is gone. Wait for that moment rather than report a
  // contained fork bomb as a normal exit (RES-4).
  const bool pids_refused = cgroup_->PidsMaxRefusals() > pids_refusals_before;
  if (!init_died && runsc && pids_refused && !watch.timed_out()) {
    for (int i = 0; i < 100 && !init_died; ++i) {
      usleep(10000);
      if (!InitAlive()) {
        init_died = true;
        crashed_ = true;
      }
    }
  }
  // Contained and reported (RES-4, RES-8): the sandbox died at pids.max, or (gVisor) pids.max
  // refused gVisor a thread during the command, which it cannot serve normally after that.
  const bool pids_breach = pids_refused && (init_died || (runsc && !watch.timed_out()));
  watch.CollectUsage(before, &oom_kills_seen_, !init_died);
  // gVisor: the cgroup's pids.peak (v2) counts gVisor's host tasks, not the guest's processes
  // (about 12 per process on ptrace): no figure rather than a wrong one.
  if (runsc) r.usage.pids_peak = -1;
  SetExit(init_died && !exited ? W_EXITCODE(0, SIGKILL) : wait_status, &r);
  if (watch.oom()) {
    KillNow();
    crashed_ = true;
    SetMemoryExceeded(limits_.memory_bytes, &r);
  } else if (watch.disk_full()) {
    KillNow();
    crashed_ = true;
    SetDiskExceeded(limits_.disk_bytes, &r);
  } else if (pids_breach) {
    r.status = ExecStatus::kResourceExceeded;
    r.reason = fmt::format("pids limit reached: pids.max {}{} refused a {}{} (RES-4)", limits_.pids,
                           runsc ? " (which counts gVisor's own host threads too)" : "",
                           runsc ? "thread" : "process",
                           init_died ? ", and the sandbox was ended" : " during the command");
    r.error_code = "pids_limit";
    if (runsc) {
      crashed_ = true;  // gVisor cannot serve normally after a refused thread
      KillNow();
    }
  } else if (watch.timed_out()) {
    SetTimedOut(exec, &r);
  } else if (init_died) {
    // FAIL-2: the container died under the command.
    r.status = ExecStatus::kToolError;
    r.reason = fmt::format("the {} container died during the command", rt_.name());
    r.error_code = "sandbox_crashed";
  }
  if (crashed_) r.state = SandboxState::kCrashed;
  if (!crashed_) agent_.Prespawn();  // the next command's shell, off this command's clock
  r.stages.collect = SecondsSince(t_collect);
  return r;
}

}  // namespace sbx::backend
