#include "backend/native/native_instance.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <vector>

#include "backend/common/command_watch.h"
#include "host/seccomp.h"
#include "host/state_dir.h"
#include "init/init_protocol.h"

namespace sbx::backend {
namespace {

using Clock = std::chrono::steady_clock;
namespace ip = sbx::initproto;

constexpr uint32_t kSandboxUid = 1000;  // "sandbox" in the image's /etc/passwd
constexpr uint32_t kSandboxGid = 1000;

struct ChildArgs {
  const char* init_path;
  char* const* argv;
  int ctl;
  int seccomp;
  int netns;
};

// The child's side of clone(): only async-signal-safe calls (the runtime is multi-threaded).
int ChildMain(void* p) {
  const auto* a = static_cast<const ChildArgs*>(p);
  // SECURITY: join the egress namespace prepared for this sandbox (its only route leads to the
  // gateway) before anything of the sandbox runs.
  if (a->netns >= 0 && setns(a->netns, CLONE_NEWNET) != 0) _exit(120);
  // sbx-init's own 0, 1, 2 are /dev/null: nothing of the runtime's terminal goes in.
  int devnull = open("/dev/null", O_RDWR);
  if (devnull < 0) _exit(121);
  for (int i = 0; i < 3; ++i) {
    if (devnull != i && dup2(devnull, i) < 0) _exit(121);
  }
  int c = fcntl(a->ctl, F_DUPFD, 10);
  int s = fcntl(a->seccomp, F_DUPFD, 10);
  if (c < 0 || s < 0) _exit(121);
  if (dup2(c, ip::kControlFd) < 0 || dup2(s, ip::kSeccompFd) < 0) _exit(121);
  // SECURITY: no descriptor of the runtime leaks into the sandbox.
  syscall(SYS_close_range, 5U, ~0U, 0U);
  char* const envp[] = {nullptr};
  execve(a->init_path, a->argv, envp);
  _exit(122);
}

Status MkdirP(const std::string& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) == 0 || errno == EEXIST) return Status::Ok();
  return ErrnoStatus("mkdir " + path);
}

}  // namespace

StatusOr<std::unique_ptr<Instance>> Instance::Spawn(const BackendContext& ctx,
                                                    InstanceConfig config, StageTimings* timings) {
  auto t0 = Clock::now();
  std::unique_ptr<Instance> in(new Instance());
  in->id_ = config.id;
  in->limits_ = config.limits;
  in->net_ = std::move(config.net);
  in->sbdir_ = host::SandboxDir(ctx.state_dir, config.id);

  // LC-2 allocate: state directory (mount points only: mounts live in the sandbox's namespace),
  // cgroup with the limits (LC-3).
  RETURN_IF_ERROR(MkdirP(ctx.state_dir, 0700));
  RETURN_IF_ERROR(MkdirP(ctx.state_dir + "/sb", 0700));
  if (mkdir(in->sbdir_.c_str(), 0700) != 0) return ErrnoStatus("mkdir " + in->sbdir_);
  RETURN_IF_ERROR(MkdirP(in->sbdir_ + "/scratch", 0755));
  RETURN_IF_ERROR(MkdirP(in->sbdir_ + "/root", 0755));

  ASSIGN_OR_RETURN(in->cgroup_, ctx.cgroups->Create("sb-" + config.id));
  const Limits& l = in->limits_;
  if (l.cpu_millicores > 0) RETURN_IF_ERROR(in->cgroup_->SetCpuMillicores(l.cpu_millicores));
  RETURN_IF_ERROR(in->cgroup_->SetMemoryBytes(l.memory_bytes));
  RETURN_IF_ERROR(in->cgroup_->SetPidsMax(l.pids));
  in->oom_kills_seen_ = in->cgroup_->Usage().oom_kills;
  if (timings) timings->allocate = SecondsSince(t0);

  // LC-3 initialize: clone into new namespaces; sbx-init builds the root and reports ready.
  auto t1 = Clock::now();
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return ErrnoStatus("socketpair");
  in->client_ = InitClient(host::UniqueFd(sv[0]), kSandboxUid, kSandboxGid);
  host::UniqueFd child_ctl(sv[1]);
  host::UniqueFd filter(static_cast<int>(syscall(SYS_memfd_create, "sbx-seccomp", MFD_CLOEXEC)));
  if (!filter.valid()) return ErrnoStatus("memfd_create");
  const auto& prog = ctx.seccomp->program();
  size_t bytes = prog.size() * sizeof(prog[0]);
  if (write(filter.get(), prog.data(), bytes) != static_cast<ssize_t>(bytes)) {
    return ErrnoStatus("write seccomp program");
  }

  std::vector<std::string> args = {
      ctx.init_path, config.lower_dir, std::to_string(l.disk_bytes), in->net_ ? "joined" : "new",
      "sandbox",     in->sbdir_};
  for (const std::string& p : in->cgroup_->JoinFiles()) args.push_back(p);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  ChildArgs ca{ctx.init_path.c_str(), argv.data(), child_ctl.get(), filter.get(),
               in->net_ ? in->net_->netns_fd() : -1};
  // SECURITY: new PID (FS-3), mount (FS-1), UTS, IPC and cgroup namespaces; a new network
  // namespace with only lo unless an egress attachment provides one (SNAP-5, RES-7).
  int flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWCGROUP |
              CLONE_PIDFD | SIGCHLD;
  if (!in->net_) flags |= CLONE_NEWNET;
  constexpr size_t kStack = 256 * 1024;
  void* stack =
      mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return ErrnoStatus("mmap clone stack");
  int pidfd = -1;
  pid_t pid = clone(ChildMain, static_cast<char*>(stack) + kStack, flags, &ca, &pidfd);
  int clone_err = errno;
  munmap(stack, kStack);
  if (pid < 0) return ErrnoStatus("clone sandbox", clone_err);
  in->init_pid_ = pid;
  in->pidfd_.Reset(pidfd);
  // For the reaper: which process is this instance's init (pid + start time).
  Status recorded = host::WriteInitRecord(in->sbdir_, pid);
  child_ctl.Reset();
  filter.Reset();
  Status ready = recorded.ok() ? in->WaitReady(10.0) : recorded;
  if (!ready.ok()) {
    in->Teardown(nullptr);
    return ready;
  }
  if (timings) timings->initialize = SecondsSince(t1);
  in->client_.set_nofile(in->limits_.fds);  // RES-6, per command
  in->entrypoint_ = config.entrypoint;
  in->wasm_host_signals_ = config.wasm_host_signals;
  if (in->entrypoint_) in->client_.set_entrypoint(in->entrypoint_(in->limits_));
  if (config.prespawn) in->client_.EnablePrespawn(in->limits_.fds);
  return in;
}

Status Instance::WaitReady(double timeout_s) {
  Status ready = client_.WaitReady(timeout_s);
  if (ready.ok() || ready.message().find("no ready message") == std::string::npos) return ready;
  int status = 0;
  siginfo_t si{};
  if (waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &si, WEXITED | WNOHANG) == 0 &&
      si.si_pid != 0) {
    status = si.si_status;
    init_pid_ = -1;
  }
  return Status(Code::kSandboxUnavailable,
                fmt::format("sandbox init did not come up (exit {}): {}", status,
                            status == 120   ? "cannot join the network namespace"
                            : status == 122 ? "cannot execute sbx-init"
                                            : "no ready message"));
}

void Instance::SignalAll(int sig) {
  client_.SignalAll(sig);
  if (cgroup_) (void)cgroup_->SignalAll(sig);
}

StatusOr<ExecResult> Instance::Exec(const ExecSpec& exec,
                                    const std::map<std::string, std::string>& env,
                                    const std::map<std::string, std::string>& secrets) {
  ExecResult r;
  if (torn_down_ || !client_.valid()) return FailedPrecondition("sandbox instance is gone");
  auto t_inject = Clock::now();
  (void)cgroup_->ResetPeak();
  // Usage is reported per command: CPU and throttled time as the difference from here (the
  // cgroup counts from its creation; a pooled sandbox ran earlier commands in it).
  const host::CgroupUsage before = cgroup_->Usage();

  // LC-4 inject context: argv, environment and secrets go to the sandbox in memory only.
  std::map<std::string, std::string> full = AgentBaseEnv();
  for (const auto& [k, v] : env) full[k] = v;
  for (const auto& [k, v] : exec.env) full[k] = v;
  for (const auto& [k, v] : secrets) full[k] = v;
  for (const auto& [k, v] : exec.secrets) full[k] = v;
  auto started = client_.Start(exec, std::move(full));
  if (!started.ok()) {
    if (client_.broken()) crashed_ = true;
    return started.status();
  }
  const uint32_t exec_id = started->id;
  if (started->exec_errno != 0) {
    SetExecFailed(exec, started->exec_errno, &r);
    r.stages.inject_context = SecondsSince(t_inject);
    return r;
  }
  r.stages.inject_context = SecondsSince(t_inject);

  // LC-5 execute with the timeout armed; watch output, the exit, OOM and the disk quota.
  auto t_exec = Clock::now();
  WatchHooks hooks;
  // A served command (the wasm host runs it in a fresh instance; init_client.h) is interrupted
  // in the engine at its deadline by the host itself, which then answers: no SIGTERM is sent.
  // A SIGTERM sent through sbx-init travels apart from the commands (another socket), so it
  // could land in the host after its answer, in the NEXT command. At the end of the grace
  // period the host is killed, and not used again whatever it still sends.
  const bool served = started->served;
  hooks.terminate = [this, served] {
    if (!served) SignalAll(SIGTERM);
  };
  hooks.kill = [this, served]() -> std::optional<std::chrono::milliseconds> {
    SignalAll(SIGKILL);
    if (served) client_.DropPrespawned();
    return std::nullopt;
  };
  hooks.end_sandbox = [this] { SignalAll(SIGKILL); };
  hooks.disk_free = [this](int64_t* used) { return WorkDiskFree(init_pid_, used); };
  hooks.oom_breached = [this] {
    return cgroup_->UnderOom() || cgroup_->OomKills() > oom_kills_seen_;
  };
  CommandWatch watch(exec, cgroup_.get(), std::move(hooks), std::move(started->pipes), &r);
  bool exited = false;
  int wait_status = 0;
  // The exit comes from sbx-init, as a message on the control socket.
  // A served command (the wasm host runs it in a fresh instance): the host's answer, or, if it
  // died, its exit from sbx-init.
  Status watched = watch.Run(
      [&] {
        std::vector<WatchSource> v{client_.ExitSource(exec_id, &exited, &wait_status)};
        if (served && client_.serving_alive())
          v.push_back(client_.ServedSource(&exited, &wait_status));
        return v;
      },
      [&] { return exited; });
  if (!watched.ok()) {
    if (client_.broken()) crashed_ = true;
    return watched;
  }
  if (watch.timed_out() && !(served && client_.serving_alive())) {
    // RES-5: the main process is gone, but what it started got only SIGTERM. Give it the rest
    // of the grace period, then SIGKILL everything, and wait until the cgroup is empty. (A
    // serving host that answered has trapped its instance: a module starts no process, and the
    // host stays for the next command.)
    while (Clock::now() < watch.grace_end() && !cgroup_->Empty()) usleep(2000);
    SignalAll(SIGKILL);
    (void)cgroup_->KillAll(2.0);
  }
  r.seconds = SecondsSince(t_exec);
  r.stages.execute = r.seconds;

  // LC-6 collect: what the pipes still hold, then usage read from the cgroup, never from inside.
  auto t_collect = Clock::now();
  watch.Drain();
  watch.CollectUsage(before, &oom_kills_seen_, true);
  SetExit(wait_status, &r);
  // The wasm host's deaths that say why (InstanceConfig::wasm_host_signals): its memory cap
  // (it killed itself), its in-engine deadline and CPU budget.
  const int host_sig = wasm_host_signals_ && WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : 0;
  bool capped = !watch.timed_out() && host_sig == SIGKILL;
  if (watch.oom() || capped) {
    SignalAll(SIGKILL);
    crashed_ = true;
    SetMemoryExceeded(limits_.memory_bytes, &r);
    if (capped && !watch.oom())
      r.reason = fmt::format(
          "memory limit {} bytes exceeded: the module's linear memory reached "
          "its cap (RES-2)",
          limits_.memory_bytes);
  } else if (watch.disk_full()) {
    SignalAll(SIGKILL);
    crashed_ = true;
    SetDiskExceeded(limits_.disk_bytes, &r);
  } else if (watch.timed_out() || host_sig == SIGALRM) {
    SetTimedOut(exec, &r);
    if (host_sig == SIGALRM) {
      r.reason = fmt::format(
          "timeout after {:.3g} s: the instance was interrupted in the engine "
          "at its deadline (RES-5)",
          exec.timeout_s);
    } else if (host_sig == SIGTERM) {
      r.reason += "; the instance was interrupted in the engine by SIGTERM";
    }
    if (served && !client_.serving_alive())
      r.reason += "; the serving host did not answer within the grace period and was killed";
  } else if (host_sig == SIGXCPU) {
    r.status = ExecStatus::kResourceExceeded;
    r.reason = fmt::format(
        "CPU budget exceeded: the instance was interrupted in the engine after "
        "the CPU time its quota allows within the timeout (RES-1)");
    r.error_code = "cpu_limit";
  }
  if (crashed_) r.state = SandboxState::kCrashed;
  r.stages.collect = SecondsSince(t_collect);
  if (!crashed_) client_.Prespawn();  // the next command's shell, off this command's clock
  return r;
}

Status Instance::Reset() {
  if (torn_down_ || crashed_ || !client_.valid())
    return FailedPrecondition("instance cannot be reset");
  client_.DropPrespawned();
  (void)cgroup_->Thaw();  // frozen tasks cannot die
  Status st = client_.Reset();
  if (client_.broken()) crashed_ = true;
  RETURN_IF_ERROR(st);
  (void)cgroup_->ResetPeak();
  oom_kills_seen_ = cgroup_->Usage().oom_kills;
  return Status::Ok();
}

Status Instance::ApplyLimits(const Limits& in) {
  Limits l = DefaultedLimits(in);
  if (l.disk_bytes != limits_.disk_bytes) {
    return FailedPrecondition("the disk quota of a pooled instance is fixed at creation");
  }
  RETURN_IF_ERROR(cgroup_->SetCpuMillicores(l.cpu_millicores));
  RETURN_IF_ERROR(cgroup_->SetMemoryBytes(l.memory_bytes));
  RETURN_IF_ERROR(cgroup_->SetPidsMax(l.pids));
  limits_ = l;
  client_.set_nofile(l.fds);  // a pre-spawned shell with the old RLIMIT_NOFILE is replaced
  if (entrypoint_) client_.set_entrypoint(entrypoint_(l));  // and one with the old memory cap
  return Status::Ok();
}

void Instance::KillNow() {
  if (torn_down_) return;
  SignalAll(SIGKILL);
}

void Instance::Teardown(StageTimings* timings) {
  if (torn_down_) return;
  torn_down_ = true;
  auto t0 = Clock::now();
  // LC-7 destroy: every process of the sandbox, then init (its exit ends the PID namespace).
  SignalAll(SIGKILL);
  if (cgroup_) (void)cgroup_->KillAll(2.0);
  client_.Close();
  if (pidfd_.valid()) {
    struct pollfd p = {pidfd_.get(), POLLIN, 0};
    if (poll(&p, 1, 2000) <= 0) syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
    siginfo_t si{};
    waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &si, WEXITED);
    pidfd_.Reset();
  }
  init_pid_ = -1;
  if (timings) timings->destroy = SecondsSince(t0);
  // LC-8 cleanup: cgroup, network namespace, directories (the mounts died with the namespace).
  auto t1 = Clock::now();
  cgroup_.reset();
  net_.reset();
  if (!sbdir_.empty()) {
    host::RemoveInitRecord(sbdir_);
    rmdir((sbdir_ + "/scratch").c_str());
    rmdir((sbdir_ + "/root").c_str());
    rmdir(sbdir_.c_str());
  }
  if (timings) timings->cleanup = SecondsSince(t1);
}

Instance::~Instance() { Teardown(nullptr); }

}  // namespace sbx::backend
