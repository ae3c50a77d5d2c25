#include "backend/native_instance.h"

#include <fcntl.h>
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
#include <fstream>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "../../init/init_protocol.h"
#include "backend/command_watch.h"
#include "host/process_stamp.h"
#include "host/seccomp.h"

namespace sbx::backend {
namespace {

using Clock = std::chrono::steady_clock;
namespace ip = sbx::initproto;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

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

// Receives one packet from init (header + optional text), waiting up to timeout_ms.
// Returns false on timeout, EOF or error.
bool RecvPacket(int fd, int timeout_ms, ip::Header* h, std::string* text) {
  struct pollfd p = {fd, POLLIN, 0};
  int rc = poll(&p, 1, timeout_ms);
  if (rc <= 0) return false;
  char buf[4096];
  ssize_t n = recv(fd, buf, sizeof buf, 0);
  if (n < static_cast<ssize_t>(sizeof(ip::Header))) return false;
  std::memcpy(h, buf, sizeof *h);
  if (text) text->assign(buf + sizeof *h, static_cast<size_t>(n) - sizeof *h);
  return true;
}

}  // namespace

Limits DefaultedLimits(const Limits& in) {
  Limits l = in;
  if (l.memory_bytes <= 0) l.memory_bytes = int64_t{512} << 20;
  if (l.pids <= 0) l.pids = 256;
  if (l.disk_bytes <= 0) l.disk_bytes = int64_t{256} << 20;
  if (l.fds <= 0) l.fds = 1024;
  return l;
}

StatusOr<std::unique_ptr<Instance>> Instance::Spawn(const BackendContext& ctx, InstanceConfig config,
                                                    StageTimings* timings) {
  auto t0 = Clock::now();
  std::unique_ptr<Instance> in(new Instance());
  in->id_ = config.id;
  in->limits_ = config.limits;
  in->net_ = std::move(config.net);
  in->sbdir_ = ctx.state_dir + "/sb/" + config.id;

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
  if (timings) timings->allocate = Since(t0);

  // LC-3 initialize: clone into new namespaces; sbx-init builds the root and reports ready.
  auto t1 = Clock::now();
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return ErrnoStatus("socketpair");
  in->ctl_.Reset(sv[0]);
  host::UniqueFd child_ctl(sv[1]);
  host::UniqueFd filter(static_cast<int>(syscall(SYS_memfd_create, "sbx-seccomp", MFD_CLOEXEC)));
  if (!filter.valid()) return ErrnoStatus("memfd_create");
  const auto& prog = ctx.seccomp->program();
  size_t bytes = prog.size() * sizeof(prog[0]);
  if (write(filter.get(), prog.data(), bytes) != static_cast<ssize_t>(bytes)) {
    return ErrnoStatus("write seccomp program");
  }

  std::vector<std::string> args = {ctx.init_path, config.lower_dir, std::to_string(l.disk_bytes),
                                   in->net_ ? "joined" : "new", "sandbox", in->sbdir_};
  for (const std::string& p : in->cgroup_->Paths()) args.push_back(p + "/cgroup.procs");
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
  void* stack = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
                     -1, 0);
  if (stack == MAP_FAILED) return ErrnoStatus("mmap clone stack");
  int pidfd = -1;
  pid_t pid = clone(ChildMain, static_cast<char*>(stack) + kStack, flags, &ca, &pidfd);
  int clone_err = errno;
  munmap(stack, kStack);
  if (pid < 0) return ErrnoStatus("clone sandbox", clone_err);
  in->init_pid_ = pid;
  in->pidfd_.Reset(pidfd);
  {
    // For the reaper: which process is this instance's init (pid + start time).
    std::ofstream stamp(in->sbdir_ + "/init");
    stamp << host::ProcessStamp(pid) << "\n";
  }
  child_ctl.Reset();
  filter.Reset();
  Status ready = in->WaitReady(10.0);
  if (!ready.ok()) {
    in->Teardown(nullptr);
    return ready;
  }
  if (timings) timings->initialize = Since(t1);
  in->prespawn_ = config.prespawn;
  in->Prespawn();
  return in;
}

Status Instance::WaitReady(double timeout_s) {
  ip::Header h{};
  std::string text;
  if (!RecvPacket(ctl_.get(), static_cast<int>(timeout_s * 1000), &h, &text)) {
    int status = 0;
    siginfo_t si{};
    if (waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &si, WEXITED | WNOHANG) == 0 && si.si_pid != 0) {
      status = si.si_status;
      init_pid_ = -1;
    }
    return Status(Code::kSandboxUnavailable,
                  fmt::format("sandbox init did not come up (exit {}): {}", status,
                              status == 120   ? "cannot join the network namespace"
                              : status == 122 ? "cannot execute sbx-init"
                                              : "no ready message"));
  }
  if (h.type != ip::kReady || h.a != 0) {
    return Status(Code::kSandboxUnavailable, text.empty() ? "sandbox init failed" : text);
  }
  return Status::Ok();
}

void Instance::SignalAll(int sig) {
  if (ctl_.valid()) {
    ip::Header h{ip::kSignalAll, 0, sig, 0};
    send(ctl_.get(), &h, sizeof h, MSG_NOSIGNAL);
  }
  if (cgroup_) (void)cgroup_->SignalAll(sig);
}

namespace {

constexpr const char* kBaseEnv[][2] = {
    {"PATH", "/usr/bin:/bin:/usr/sbin:/sbin"}, {"HOME", "/home/sandbox"}, {"USER", "sandbox"}, {"PWD", "/work"}};

// The pre-spawned shell: reads its whole script from fd 3 (up to EOF), closes it, runs it.
constexpr const char* kPrelude = "IFS= read -r -d '' __sbx_cmd <&3; exec 3<&-; eval \"$__sbx_cmd\"";

bool ShellIdentifier(const std::string& k) {
  if (k.empty() || std::isdigit(static_cast<unsigned char>(k[0]))) return false;
  return std::all_of(k.begin(), k.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

std::string ShellQuote(const std::string& v) {
  std::string q = "'";
  for (char c : v) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

}  // namespace

bool Instance::NextMessage(int timeout_ms, ip::Header* h) {
  if (!inbox_.empty()) {
    *h = inbox_.front();
    inbox_.pop_front();
    return true;
  }
  return RecvPacket(ctl_.get(), timeout_ms, h, nullptr);
}

void Instance::Dispatch(const ip::Header& h) {
  if (!pre_ || h.id != pre_->id) return;
  if (h.type == ip::kStarted) {
    pre_->started = true;
    if (h.b != 0) pre_->dead = true;
  } else if (h.type == ip::kExited) {
    pre_->dead = true;  // killed before it was used (e.g. by a background process of a task)
  }
}

Status Instance::SendExec(uint32_t id, const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env, const std::vector<int>& fds) {
  std::string packet(sizeof(ip::Header) + sizeof(ip::ExecParams), '\0');
  ip::Header h{ip::kExec, id, static_cast<int32_t>(argv.size()), static_cast<int32_t>(env.size())};
  ip::ExecParams params{kSandboxUid, kSandboxGid, limits_.fds};
  std::memcpy(packet.data(), &h, sizeof h);
  std::memcpy(packet.data() + sizeof h, &params, sizeof params);
  for (const auto& a : argv) packet.append(a).push_back('\0');
  for (const auto& [k, v] : env) packet.append(k).append("=").append(v).push_back('\0');
  if (packet.size() > ip::kMaxPacket) {
    explicit_bzero(packet.data(), packet.size());
    return InvalidArgument(fmt::format("command and environment too large ({} bytes, max {})",
                                       packet.size(), ip::kMaxPacket));
  }
  char cbuf[CMSG_SPACE(sizeof(int) * 4)] = {};
  struct iovec iov = {packet.data(), packet.size()};
  struct msghdr m {};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = cbuf;
  m.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
  struct cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  ssize_t sent = sendmsg(ctl_.get(), &m, MSG_NOSIGNAL);
  int err = errno;
  // LC-8: the packet may carry secrets: zero it once sent.
  explicit_bzero(packet.data(), packet.size());
  if (sent < 0) {
    crashed_ = true;
    return Status(Code::kToolError, fmt::format("sandbox init is gone: {}", std::strerror(err)));
  }
  return Status::Ok();
}

// Forks and execs the next command's shell ahead of time; it blocks reading fd 3. Nothing waits
// for init's answer here: it is picked up by the next Exec (or Dispatch) from the inbox.
void Instance::Prespawn() {
  if (!prespawn_ || crashed_ || torn_down_ || pre_) return;
  int in[2], out[2], err[2], script[2];
  if (pipe2(in, O_CLOEXEC) != 0) return;
  host::UniqueFd in_r(in[0]), in_w(in[1]);
  if (pipe2(out, O_CLOEXEC) != 0) return;
  host::UniqueFd out_r(out[0]), out_w(out[1]);
  if (pipe2(err, O_CLOEXEC) != 0) return;
  host::UniqueFd err_r(err[0]), err_w(err[1]);
  if (pipe2(script, O_CLOEXEC) != 0) return;
  host::UniqueFd script_r(script[0]), script_w(script[1]);
  std::map<std::string, std::string> env;
  for (const auto& kv : kBaseEnv) env[kv[0]] = kv[1];
  uint32_t id = next_exec_++;
  if (!SendExec(id, {"/bin/sh", "-c", kPrelude}, env, {in_r.get(), out_w.get(), err_w.get(), script_r.get()}).ok()) {
    return;
  }
  pre_.emplace();
  pre_->id = id;
  pre_->script_w = std::move(script_w);
  pre_->in_w = std::move(in_w);
  pre_->out_r = std::move(out_r);
  pre_->err_r = std::move(err_r);
}

StatusOr<ExecResult> Instance::Exec(const ExecSpec& exec, const std::map<std::string, std::string>& env,
                                    const std::map<std::string, std::string>& secrets) {
  ExecResult r;
  if (torn_down_ || !ctl_.valid()) return FailedPrecondition("sandbox instance is gone");
  auto t_inject = Clock::now();
  (void)cgroup_->ResetPeak();
  // Usage is reported per command: CPU and throttled time as the difference from here (the
  // cgroup counts from its creation; a pooled sandbox ran earlier commands in it).
  const host::CgroupUsage before = cgroup_->Usage();

  // LC-4 inject context: argv, environment and secrets go to the sandbox in memory only.
  std::map<std::string, std::string> full;
  for (const auto& kv : kBaseEnv) full[kv[0]] = kv[1];
  for (const auto& [k, v] : env) full[k] = v;
  for (const auto& [k, v] : exec.env) full[k] = v;
  for (const auto& [k, v] : secrets) full[k] = v;
  for (const auto& [k, v] : exec.secrets) full[k] = v;
  auto zero_env = [&] {
    for (auto& [k, v] : full) explicit_bzero(v.data(), v.size());
  };

  bool use_pre = pre_ && exec.argv.empty() && exec.stdin_data.empty() &&
                 std::all_of(full.begin(), full.end(), [](const auto& kv) { return ShellIdentifier(kv.first); });
  while (use_pre && !pre_->started && !pre_->dead) {
    ip::Header h{};
    if (!NextMessage(10000, &h)) {
      crashed_ = true;
      zero_env();
      return Status(Code::kToolError, "sandbox init did not start the pre-spawned shell");
    }
    Dispatch(h);
  }
  if (pre_ && pre_->dead) pre_.reset();
  use_pre = use_pre && pre_;

  host::UniqueFd in_w, out_r, err_r;
  uint32_t exec_id = 0;
  std::vector<std::string> argv = exec.argv;
  if (argv.empty()) argv = {"/bin/sh", "-c", exec.command};
  if (use_pre) {
    // The shell is already running: hand it its script (environment first) and let it go.
    std::string script;
    for (const auto& [k, v] : full) {
      bool base = std::any_of(std::begin(kBaseEnv), std::end(kBaseEnv),
                              [&](const auto& kv) { return k == kv[0] && v == kv[1]; });
      if (!base) script += "export " + k + "=" + ShellQuote(v) + "\n";  // the shell has the base
    }
    script += exec.command;
    const char* p = script.data();
    size_t left = script.size();
    while (left > 0) {
      ssize_t n = write(pre_->script_w.get(), p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      p += n;
      left -= static_cast<size_t>(n);
    }
    explicit_bzero(script.data(), script.size());
    zero_env();
    pre_->script_w.Reset();
    exec_id = pre_->id;
    in_w = std::move(pre_->in_w);
    out_r = std::move(pre_->out_r);
    err_r = std::move(pre_->err_r);
    pre_.reset();
  } else {
    int in_pipe[2], out_pipe[2], err_pipe[2];
    if (pipe2(in_pipe, O_CLOEXEC) != 0) return ErrnoStatus("pipe");
    host::UniqueFd in_r(in_pipe[0]);
    in_w.Reset(in_pipe[1]);
    if (pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoStatus("pipe");
    out_r.Reset(out_pipe[0]);
    host::UniqueFd out_w(out_pipe[1]);
    if (pipe2(err_pipe, O_CLOEXEC) != 0) return ErrnoStatus("pipe");
    err_r.Reset(err_pipe[0]);
    host::UniqueFd err_w(err_pipe[1]);
    exec_id = next_exec_++;
    Status sent = SendExec(exec_id, argv, full, {in_r.get(), out_w.get(), err_w.get()});
    zero_env();
    RETURN_IF_ERROR(sent);
    in_r.Reset();
    out_w.Reset();
    err_w.Reset();
    ip::Header started{};
    for (;;) {
      if (!NextMessage(10000, &started)) {
        crashed_ = true;
        return Status(Code::kToolError, "sandbox init did not start the command");
      }
      if (started.id == exec_id && started.type == ip::kStarted) break;
      Dispatch(started);
    }
    if (started.b != 0) {
      r.status = ExecStatus::kToolError;
      r.exit_code = 127;
      r.reason = fmt::format("cannot execute '{}': {}", argv[0], std::strerror(started.b));
      r.error_code = "exec_failed";
      r.stderr_tail = r.reason + "\n";
      r.stages.inject_context = Since(t_inject);
      return r;
    }
  }
  r.stages.inject_context = Since(t_inject);

  // LC-5 execute with the timeout armed; watch output, the exit, OOM and the disk quota.
  auto t_exec = Clock::now();
  WatchHooks hooks;
  hooks.terminate = [this] { SignalAll(SIGTERM); };
  hooks.kill = [this]() -> std::optional<std::chrono::milliseconds> {
    SignalAll(SIGKILL);
    return std::nullopt;
  };
  hooks.end_sandbox = [this] { SignalAll(SIGKILL); };
  hooks.disk_free = [this](int64_t* used) { return WorkDiskFree(init_pid_, used); };
  hooks.oom_breached = [this] { return cgroup_->UnderOom() || cgroup_->OomKills() > oom_kills_seen_; };
  CommandWatch watch(exec, cgroup_.get(), std::move(hooks),
                     {std::move(in_w), std::move(out_r), std::move(err_r)}, &r);
  bool exited = false;
  int wait_status = 0;
  // The exit comes from sbx-init, as a message on the control socket.
  auto on_control = [&](short revents) -> Status {
    if (revents & POLLIN) {
      ip::Header eh{};
      if (!NextMessage(0, &eh)) {
        crashed_ = true;
        return Status(Code::kToolError, "sandbox init exited during the command");
      }
      if (eh.type == ip::kExited && eh.id == exec_id) {
        exited = true;
        wait_status = eh.a;
      } else {
        Dispatch(eh);
      }
    } else if (revents & (POLLHUP | POLLERR)) {
      crashed_ = true;
      return Status(Code::kToolError, "sandbox init exited during the command");
    }
    return Status::Ok();
  };
  RETURN_IF_ERROR(watch.Run([&] { return std::vector<WatchSource>{{ctl_.get(), POLLIN, on_control}}; },
                            [&] { return exited; }));
  if (watch.timed_out()) {
    // RES-5: the main process is gone, but what it started got only SIGTERM. Give it the rest
    // of the grace period, then SIGKILL everything, and wait until the cgroup is empty.
    while (Clock::now() < watch.grace_end() && !cgroup_->Empty()) usleep(2000);
    SignalAll(SIGKILL);
    (void)cgroup_->KillAll(2.0);
  }
  r.seconds = Since(t_exec);
  r.stages.execute = r.seconds;

  // LC-6 collect: what the pipes still hold, then usage read from the cgroup, never from inside.
  auto t_collect = Clock::now();
  watch.Drain();
  watch.CollectUsage(before, &oom_kills_seen_, true);
  SetExit(wait_status, &r);
  if (watch.oom()) {
    SignalAll(SIGKILL);
    crashed_ = true;
    SetMemoryExceeded(limits_.memory_bytes, &r);
  } else if (watch.disk_full()) {
    SignalAll(SIGKILL);
    crashed_ = true;
    SetDiskExceeded(limits_.disk_bytes, &r);
  } else if (watch.timed_out()) {
    SetTimedOut(exec, &r);
  }
  if (crashed_) r.state = SandboxState::kCrashed;
  r.stages.collect = Since(t_collect);
  Prespawn();  // the next command's shell, off this command's clock
  return r;
}

Status Instance::Reset() {
  if (torn_down_ || crashed_ || !ctl_.valid()) return FailedPrecondition("instance cannot be reset");
  pre_.reset();
  (void)cgroup_->Thaw();  // frozen tasks cannot die
  ip::Header h{ip::kReset, next_exec_++, 0, 0};
  if (send(ctl_.get(), &h, sizeof h, MSG_NOSIGNAL) < 0) {
    crashed_ = true;
    return ErrnoStatus("reset");
  }
  for (;;) {
    ip::Header reply{};
    if (!NextMessage(10000, &reply)) {
      crashed_ = true;
      return Status(Code::kToolError, "sandbox init did not reset");
    }
    if (reply.type == ip::kResetDone && reply.id == h.id) {
      if (reply.a != 0) return ErrnoStatus("reset: emptying scratch", reply.a);
      break;
    }
  }
  inbox_.clear();  // answers about processes that no longer exist
  (void)cgroup_->ResetPeak();
  oom_kills_seen_ = cgroup_->Usage().oom_kills;
  Prespawn();
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
  bool respawn = l.fds != limits_.fds;  // the pre-spawned shell has the old RLIMIT_NOFILE
  limits_ = l;
  if (respawn && pre_) {
    pre_.reset();  // its script pipe closes: it reads EOF, runs nothing and exits
    Prespawn();
  }
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
  ctl_.Reset();
  if (pidfd_.valid()) {
    struct pollfd p = {pidfd_.get(), POLLIN, 0};
    if (poll(&p, 1, 2000) <= 0) syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
    siginfo_t si{};
    waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &si, WEXITED);
    pidfd_.Reset();
  }
  init_pid_ = -1;
  if (timings) timings->destroy = Since(t0);
  // LC-8 cleanup: cgroup, network namespace, directories (the mounts died with the namespace).
  auto t1 = Clock::now();
  cgroup_.reset();
  net_.reset();
  if (!sbdir_.empty()) {
    unlink((sbdir_ + "/init").c_str());
    rmdir((sbdir_ + "/scratch").c_str());
    rmdir((sbdir_ + "/root").c_str());
    rmdir(sbdir_.c_str());
  }
  if (timings) timings->cleanup = Since(t1);
}

Instance::~Instance() { Teardown(nullptr); }

}  // namespace sbx::backend
