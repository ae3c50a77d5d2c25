// backend/oci_exec: a command in a running OCI container (crun, runc, runsc): LC-4 (the
// process spec in a memfd, never on disk), the `exec` verb, and the shared watch loop
// (command_watch.h) for LC-5 and LC-6; SignalTools for RES-5. The container's life (bundle,
// create/restore, limits, checkpoint, teardown) is oci_container.cc.
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
#include <fstream>

#include "backend/command_watch.h"
#include "backend/oci_bundle.h"
#include "backend/oci_container.h"

namespace sbx::backend {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

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

// LC-8: overwrite a memfd's content before it is closed.
void ZeroMemFile(int fd, size_t size) {
  std::string zeros(std::min<size_t>(size, 1 << 20), '\0');
  for (size_t off = 0; off < size; off += zeros.size()) {
    if (pwrite(fd, zeros.data(), std::min(zeros.size(), size - off), static_cast<off_t>(off)) < 0)
      break;
  }
  if (ftruncate(fd, 0) != 0) {
  }
}

// PPid and real uid of a host process ("" fields if it is gone).
bool ProcParentAndUid(pid_t pid, pid_t* ppid, uid_t* uid) {
  std::ifstream f(fmt::format("/proc/{}/status", pid));
  std::string line;
  bool got_ppid = false, got_uid = false;
  while (std::getline(f, line)) {
    if (line.rfind("PPid:", 0) == 0) {
      *ppid = static_cast<pid_t>(std::atol(line.c_str() + 5));
      got_ppid = true;
    } else if (line.rfind("Uid:", 0) == 0) {
      *uid = static_cast<uid_t>(std::atol(line.c_str() + 4));
      got_uid = true;
    }
  }
  return got_ppid && got_uid;
}

}  // namespace

void Container::SignalTools(int sig) {
  if (rt_.flavor == OciFlavor::kRunsc) {
    // gVisor's processes are not host processes: a killer runs inside, as the tools' user.
    // kill(-1) reaches every process that user may signal except itself and PID 1, and the
    // init (and the sleep of its fallback) are uid 0 (RES-5).
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
  // pick the targets: every process of the cgroup but the container's init (and the sleep of
  // its fallback, a uid-0 child: a tool cannot make one).
  for (int round = 0; round < (sig == SIGKILL ? 40 : 1); ++round) {
    bool frozen = cgroup_->Freeze().ok();
    int targets = 0;
    for (pid_t pid : cgroup_->Pids()) {
      if (pid == init_pid_) continue;
      pid_t ppid = 0;
      uid_t uid = 0;
      if (!ProcParentAndUid(pid, &ppid, &uid)) continue;
      if (ppid == init_pid_ && uid == 0) continue;  // the init's fallback sleep
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

StatusOr<ExecResult> Container::Exec(const ExecSpec& exec,
                                     const std::map<std::string, std::string>& secrets) {
  if (torn_down_) return FailedPrecondition("container is gone");
  if (use_agent_) return ExecByAgent(exec, secrets);
  return ExecByRuntime(exec, secrets);
}

// crun/runc: the agent (sbx-init, the container's PID 1) forks the command: no runtime CLI
// process per command (issue 16). Limits, signals and usage stay the host's business, as for
// `exec`: the command is a host process in the sandbox's cgroup.
StatusOr<ExecResult> Container::ExecByAgent(const ExecSpec& exec,
                                            const std::map<std::string, std::string>& secrets) {
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
  auto started = agent_.Start(exec, std::move(env));
  if (!started.ok()) {
    if (agent_.broken()) crashed_ = true;
    return started.status();
  }
  if (started->exec_errno != 0) {
    std::string arg0 = exec.argv.empty() ? "/bin/sh" : exec.argv[0];
    r.status = ExecStatus::kToolError;
    r.exit_code = 127;
    r.reason = fmt::format("cannot execute '{}': {}", arg0, std::strerror(started->exec_errno));
    r.error_code = "exec_failed";
    r.stderr_tail = r.reason + "\n";
    r.stages.inject_context = Since(t_inject);
    return r;
  }
  const uint32_t id = started->id;
  r.stages.inject_context = Since(t_inject);

  // LC-5 execute with the timeout armed: output, the exit, OOM, the init, the disk quota.
  auto t_exec = Clock::now();
  WatchHooks hooks;
  hooks.terminate = [this] { SignalTools(SIGTERM); };
  hooks.kill = [this]() -> std::optional<std::chrono::milliseconds> {
    SignalTools(SIGKILL);
    return std::nullopt;
  };
  hooks.end_sandbox = [this] { KillNow(); };
  hooks.disk_free = [this](int64_t* used) { return WorkDiskFree(init_pid_, used); };
  hooks.oom_breached = [this] {
    return cgroup_->UnderOom() || cgroup_->OomKills() > oom_kills_seen_;
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
  r.seconds = Since(t_exec);
  r.stages.execute = r.seconds;

  // LC-6 collect: what the pipes still hold, then usage from the cgroup, never from inside.
  auto t_collect = Clock::now();
  watch.Drain();
  if (!init_died && !InitAlive()) {
    init_died = true;
    crashed_ = true;
  }
  const bool pids_breach = init_died && cgroup_->PidsMaxRefusals() > pids_refusals_before;
  watch.CollectUsage(before, &oom_kills_seen_, !init_died);
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
    r.reason = fmt::format(
        "pids limit reached: pids.max {} refused a process, and the sandbox was ended (RES-4)",
        limits_.pids);
    r.error_code = "pids_limit";
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
  r.stages.collect = Since(t_collect);
  return r;
}

// runsc: each command is `runsc exec` (its LC-4..LC-6 through the runtime's client).
StatusOr<ExecResult> Container::ExecByRuntime(const ExecSpec& exec,
                                              const std::map<std::string, std::string>& secrets) {
  const bool runsc = rt_.flavor == OciFlavor::kRunsc;
  ExecResult r;
  auto t_inject = Clock::now();
  (void)cgroup_->ResetPeak();
  // Usage is reported per command: the cgroup also holds the container's init (gVisor: the
  // Sentry) and every earlier command.
  const host::CgroupUsage before = cgroup_->Usage();
  const int64_t pids_refusals_before = cgroup_->PidsMaxRefusals();

  // LC-4 inject context: argv, environment and secrets reach the runtime through a memfd.
  OciProcess proc;
  proc.args =
      exec.argv.empty() ? std::vector<std::string>{"/bin/sh", "-c", exec.command} : exec.argv;
  // runc, unlike crun and runsc, copies a command's output through pipes of its own and waits
  // for their EOF, so a background process would hold the command open until the timeout.
  // runc therefore starts it detached (the command inherits our pipes directly), and a shell
  // around it reports the exit status on fd 3 (closed for the command itself).
  const bool detached = rt_.flavor == OciFlavor::kRunc;
  if (detached) {
    std::vector<std::string> wrapped = {"/bin/sh", "-c", "\"$@\" 3>&-; echo $? >&3", "sbx-exec"};
    wrapped.insert(wrapped.end(), proc.args.begin(), proc.args.end());
    proc.args = std::move(wrapped);
  }
  proc.env = OciBaseEnv();
  for (const auto& [k, v] : env_) proc.env[k] = v;
  for (const auto& [k, v] : exec.env) proc.env[k] = v;
  for (const auto& [k, v] : secrets) proc.env[k] = v;
  for (const auto& [k, v] : exec.secrets) proc.env[k] = v;
  proc.nofile = limits_.fds;
  std::string text = OciProcessJson(proc).dump();
  for (auto& [k, v] : proc.env) explicit_bzero(v.data(), v.size());
  auto mem = MemFile("sbx-process", text);
  size_t text_size = text.size();
  explicit_bzero(text.data(), text.size());
  if (!mem.ok()) return mem.status();
  host::UniqueFd memfd = std::move(mem).value();

  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0) return ErrnoStatus("pipe");
  host::UniqueFd in_r(in_pipe[0]), in_w(in_pipe[1]);
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoStatus("pipe");
  host::UniqueFd out_r(out_pipe[0]), out_w(out_pipe[1]);
  if (pipe2(err_pipe, O_CLOEXEC) != 0) return ErrnoStatus("pipe");
  host::UniqueFd err_r(err_pipe[0]), err_w(err_pipe[1]);
  // crun/runc: the command is a host process forked by `exec`, which must therefore start in
  // the sandbox's cgroup. runsc: the command lives in the Sentry; the client stays outside
  // (so it can run even when the sandbox is at its pids limit).
  host::UniqueFd status_r, status_w;
  if (detached) {
    int sp[2];
    if (pipe2(sp, O_CLOEXEC) != 0) return ErrnoStatus("pipe");
    status_r.Reset(sp[0]);
    status_w.Reset(sp[1]);
  }
  SpawnPlan plan =
      detached
          ? Plan({"exec", "--detach", "--preserve-fds", "1", "--process", "/proc/self/fd/4", cid_},
                 true, false)
          : Plan({"exec", "--process", "/proc/self/fd/3", cid_}, !runsc, false);
  plan.stdin_fd = in_r.get();
  plan.stdout_fd = out_w.get();
  plan.stderr_fd = err_w.get();
  if (detached) {
    plan.extra_fds = {{status_w.get(), 3}, {memfd.get(), 4}};
  } else {
    plan.extra_fds = {{memfd.get(), 3}};
  }
  auto spawned = Spawn(plan);
  in_r.Reset();
  out_w.Reset();
  err_w.Reset();
  status_w.Reset();
  if (!spawned.ok()) {
    ZeroMemFile(memfd.get(), text_size);
    r.status = ExecStatus::kToolError;
    r.exit_code = 127;
    r.reason = spawned.status().message();
    r.error_code = "exec_failed";
    r.stages.inject_context = Since(t_inject);
    return r;
  }
  Child child = std::move(spawned).value();
  r.stages.inject_context = Since(t_inject);

  // LC-5 execute with the timeout armed: output, the exit, OOM, the init, the disk quota.
  auto t_exec = Clock::now();
  bool tools_killed = false;
  WatchHooks hooks;
  hooks.terminate = [this] { SignalTools(SIGTERM); };
  hooks.kill = [&]() -> std::optional<std::chrono::milliseconds> {
    if (!tools_killed) {
      SignalTools(SIGKILL);
      tools_killed = true;
      return std::chrono::seconds(5);
    }
    child.Kill(SIGKILL);  // the runtime's client outlived its command: end it too
    return std::nullopt;
  };
  hooks.end_sandbox = [this] { KillNow(); };
  hooks.disk_free = [this, runsc](int64_t* used) -> int64_t {
    return runsc ? -1 : WorkDiskFree(init_pid_, used);  // gVisor's /work is inside the Sentry
  };
  hooks.oom_breached = [this] {
    // Under gVisor the Sentry is what breaches, and it may die before the counters say so.
    return cgroup_->UnderOom() || cgroup_->OomKills() > oom_kills_seen_ ||
           cgroup_->Usage().memory_peak_bytes >= limits_.memory_bytes * 95 / 100;
  };
  CommandWatch watch(exec, cgroup_.get(), std::move(hooks),
                     {std::move(in_w), std::move(out_r), std::move(err_r)}, &r);
  bool init_died = false, client_exited = false;
  int client_status = 0;
  std::string status_text;
  auto sources = [&] {
    std::vector<WatchSource> s;
    if (!init_died && init_pidfd_.valid()) {
      s.push_back({init_pidfd_.get(), POLLIN, [&](short revents) {
                     if (revents & POLLIN) {
                       // The container's init (gVisor: the whole sandbox) died: nothing can run
                       // in it any more.
                       init_died = true;
                       crashed_ = true;
                       KillNow();
                     }
                     return Status::Ok();
                   }});
    }
    if (status_r.valid()) {
      s.push_back({status_r.get(), POLLIN, [&](short revents) {
                     if (revents & (POLLIN | POLLHUP)) {
                       char sb[64];
                       ssize_t n = read(status_r.get(), sb, sizeof sb);
                       if (n > 0)
                         status_text.append(sb, static_cast<size_t>(n));
                       else if (n == 0 || (errno != EAGAIN && errno != EINTR))
                         status_r.Reset();
                     }
                     return Status::Ok();
                   }});
    }
    if (!client_exited) {
      s.push_back({child.pidfd(), POLLIN, [&](short revents) {
                     if (revents & POLLIN) client_exited = child.TryReap(&client_status);
                     return Status::Ok();
                   }});
    }
    return s;
  };
  // Done when the runtime's client has exited and, for a detached command, the shell around it
  // has reported (or died: EOF).
  Status watched = watch.Run(sources, [&] { return client_exited && !status_r.valid(); });
  if (!watched.ok()) {
    ZeroMemFile(memfd.get(), text_size);
    return watched;
  }
  int wait_status = client_status;
  if (detached && WIFEXITED(client_status) && WEXITSTATUS(client_status) == 0) {
    // The client only started the command; its status came through the pipe ("" = killed).
    wait_status = status_text.empty() ? W_EXITCODE(137, 0)
                                      : W_EXITCODE(std::atoi(status_text.c_str()) & 0xff, 0);
  }
  if (watch.timed_out()) {
    // RES-5: what the command left behind got SIGTERM only: SIGKILL it now.
    SignalTools(SIGKILL);
  }
  r.seconds = Since(t_exec);
  r.stages.execute = r.seconds;
  ZeroMemFile(memfd.get(), text_size);

  // LC-6 collect: what the pipes still hold, then usage from the cgroup, never from inside.
  auto t_collect = Clock::now();
  watch.Drain();
  if (!init_died && !InitAlive()) {
    init_died = true;
    crashed_ = true;
  }
  // gVisor at pids.max: the Sentry cannot make a thread and dies, but the `runsc exec` client
  // may return (its connection gone) a moment before the Sentry is gone. Wait for that moment
  // rather than report a contained fork bomb as a normal exit (RES-4).
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
  watch.CollectUsage(before, &oom_kills_seen_, !init_died);
  // Contained and reported (RES-4, RES-8): the sandbox died at pids.max, or (gVisor) pids.max
  // refused gVisor a thread during the command, which it cannot serve normally after that.
  bool pids_breach = pids_refused && (init_died || (runsc && !watch.timed_out()));

  SetExit(wait_status, &r);
  if (watch.oom()) {
    KillNow();
    crashed_ = true;
    SetMemoryExceeded(limits_.memory_bytes, &r);
  } else if (watch.disk_full()) {
    KillNow();
    crashed_ = true;
    SetDiskExceeded(limits_.disk_bytes, &r);
  } else if (pids_breach) {
    // gVisor: its own host threads count against pids.max; when a fork bomb exhausts it, the
    // Sentry cannot make a thread and the sandbox dies. Contained, and reported so (RES-4).
    r.status = ExecStatus::kResourceExceeded;
    r.reason = fmt::format(
        "pids limit reached: pids.max {} (which counts gVisor's own host threads too) refused "
        "a thread{} (RES-4)",
        limits_.pids, init_died ? ", and the sandbox was ended" : " during the command");
    r.error_code = "pids_limit";
  } else if (watch.timed_out()) {
    SetTimedOut(exec, &r);
  } else if (init_died) {
    // FAIL-2: the container (gVisor: its Sentry) died under the command.
    r.status = ExecStatus::kToolError;
    r.reason = fmt::format("the {} container died during the command", rt_.name());
    r.error_code = "sandbox_crashed";
  }
  if (crashed_) r.state = SandboxState::kCrashed;
  r.stages.collect = Since(t_collect);
  return r;
}

}  // namespace sbx::backend
