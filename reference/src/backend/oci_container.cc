// Over 600 lines (issue 15, open): its exec loop (inject, execute, watch output/exit/OOM/disk)
// has the shape of native_instance.cc's; one shared loop is the split that would bring both
// under the limit, not a cut by line count.
#include "backend/oci_container.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "backend/fs_layer.h"
#include "backend/oci_bundle.h"
#include "host/process_stamp.h"
#include "host/seccomp.h"

namespace sbx::backend {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The container's PID 1: blocks reading a FIFO nobody writes (it holds both ends), reaps every
// orphan re-parented to it (the CHLD trap runs `wait`), and starts no process of its own, so
// nothing of the baseline looks like something a command left behind. It runs as uid 0 with no
// capabilities: a tool (uid 1000) can neither signal it nor open its FIFO (0600, root). If the
// FIFO cannot be made, a sleeping child does the blocking instead.
constexpr const char* kInitScript =
    "trap 'exit 0' TERM INT; trap wait CHLD; "
    "if mkfifo -m 600 /dev/.sbx-init 2>/dev/null && exec 3<>/dev/.sbx-init; then "
    "while :; do read -u 3 x || sleep 1; done; fi; "
    "while :; do sleep 2147483647 & wait; done";

constexpr double kVerbTimeoutS = 30;

Status MkdirP(const std::string& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) == 0 || errno == EEXIST) return Status::Ok();
  return ErrnoStatus("mkdir " + path);
}

std::string ReadSmallFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void AppendTail(std::string* tail, int64_t* total, const char* data, size_t n) {
  *total += static_cast<int64_t>(n);
  tail->append(data, n);
  if (tail->size() > kOutputTailBytes) tail->erase(0, tail->size() - kOutputTailBytes);
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

// Times pids.max refused a fork in this cgroup (v1 and v2 pids.events "max N").
int64_t PidsMaxEvents(host::Cgroup* cg) {
  for (const std::string& p : cg->Paths()) {
    std::string text = ReadSmallFile(p + "/pids.events");
    auto pos = text.find("max ");
    if (pos != std::string::npos) return std::atoll(text.c_str() + pos + 4);
  }
  return 0;
}

}  // namespace

std::string OciRuntime::name() const {
  switch (flavor) {
    case OciFlavor::kCrun:
      return "crun";
    case OciFlavor::kRunc:
      return "runc";
    case OciFlavor::kRunsc:
      return "runsc";
  }
  return "?";
}

std::vector<std::string> OciRuntime::Argv(const std::vector<std::string>& verb_and_args) const {
  std::vector<std::string> argv = {binary, "--root", root};
  argv.insert(argv.end(), global.begin(), global.end());
  argv.insert(argv.end(), verb_and_args.begin(), verb_and_args.end());
  return argv;
}

SpawnPlan Container::Plan(const std::vector<std::string>& verb, bool join_cgroup,
                          bool overlay) const {
  SpawnPlan plan;
  plan.argv = rt_.Argv(verb);
  plan.hide_dirs = rt_.hide_dirs;
  if (overlay) plan.overlays.push_back(overlay_);
  plan.private_mounts = !plan.hide_dirs.empty() || !plan.overlays.empty();
  if (join_cgroup) plan.cgroup_procs_fds = cgroup_->ProcsFds();
  return plan;
}

Status Container::RunVerb(const std::vector<std::string>& verb, double timeout_s, bool join_cgroup,
                          bool overlay) {
  SpawnPlan plan = Plan(verb, join_cgroup, overlay);
  // create/restore hand their stdio to the container's init (or gVisor's sandbox), which keeps
  // it: they write to a log file; other verbs to pipes.
  host::UniqueFd log;
  bool starts = verb[0] == "create" || verb[0] == "restore" || verb[0] == "start";
  std::string log_path = dir_ + "/runtime.log";
  if (starts) {
    log.Reset(open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!log.valid()) return ErrnoStatus("open " + log_path);
    plan.stdout_fd = plan.stderr_fd = log.get();
  }
  // create/restore leave the container's host processes behind: they run under a shim that
  // reaps them (oci_spawn.h) and lives as long as they do.
  plan.shim = verb[0] == "create" || verb[0] == "restore";
  ASSIGN_OR_RETURN(RunOutput out, RunCommand(std::move(plan), timeout_s, &shim_));
  if (starts) out.err = ReadSmallFile(log_path).substr(0, 4000);
  if (!out.ok()) {
    return Status(Code::kSandboxUnavailable,
                  fmt::format("{} {}: {}", rt_.name(), verb[0], out.Describe()));
  }
  return Status::Ok();
}

Status Container::WriteBundle(const BackendContext& ctx, const ContainerConfig& c) {
  const bool runsc = rt_.flavor == OciFlavor::kRunsc;
  OciBundleSpec spec;
  spec.limits = limits_;
  if (runsc) {
    // gVisor: the Gofer serves the image read-only; every writable directory is a tmpfs inside
    // the Sentry (so a checkpoint holds it) of the quota's size (RES-3, per mount).
    spec.root_path = c.image_dir;
    for (const char* w : kWritableDirs) {
      std::string d = std::string("/") + w;
      bool owned = d == "/work" || d == "/home/sandbox";
      spec.mounts.push_back({d,
                             "tmpfs",
                             "tmpfs",
                             {"nosuid", "nodev", owned ? "mode=0755" : "mode=1777",
                              fmt::format("size={}", limits_.disk_bytes)}});
      if (owned) {
        spec.mounts.back().options.push_back(fmt::format("uid={}", kOciSandboxUid));
        spec.mounts.back().options.push_back(fmt::format("gid={}", kOciSandboxGid));
      }
    }
    spec.cgroup_namespace = false;
  } else {
    // crun/runc: the root is the overlay mounted in the runtime command's private namespace;
    // the writable directories are binds of the overlay's own (so one tmpfs holds every write).
    spec.root_path = dir_ + "/rootfs";
    for (const char* w : kWritableDirs) {
      spec.mounts.push_back({std::string("/") + w,
                             "bind",
                             dir_ + "/rootfs/" + w,
                             {"rbind", "rw", "nosuid", "nodev"}});
    }
    // runc has no "leave cgroups alone" mode: it nests its own cgroup below ours (it runs in
    // ours), where our limits hold over it. crun runs with --cgroup-manager=disabled.
    if (rt_.flavor == OciFlavor::kRunc) {
      spec.cgroups_path = c.container_id;
      // runc's cgroup carries no limit of its own (the devices rule only): ours alone limits,
      // as for crun. With the quota on both levels the kernel throttled either one, at random,
      // and v1 counts throttled_time, OOM events and pids.max refusals per level, so the usage
      // read from ours said "throttled 0 s" of a capped run (a CI run's six tasks failed on
      // it, issue 11); a raised limit (SetLimits) would also have stayed capped below.
      spec.limits.cpu_millicores = 0;
      spec.limits.memory_bytes = 0;
      spec.limits.pids = 0;
    }
  }
  if (net_) spec.netns_path = fmt::format("/proc/{}/fd/{}", getpid(), net_->netns_fd());
  ASSIGN_OR_RETURN(spec.seccomp, OciSeccompFromDenyList(ctx.seccomp->denied()));
  spec.init.args = {"/bin/sh", "-c", kInitScript};
  spec.init.uid = 0;
  spec.init.gid = 0;
  spec.init.cwd = "/";
  spec.init.env = OciBaseEnv();
  spec.init.nofile = limits_.fds;
  std::string text = OciConfig(spec).dump(1);
  std::string path = dir_ + "/config.json";
  std::ofstream f(path, std::ios::trunc);
  f << text;
  f.close();
  if (!f) return Internal("writing " + path);
  return Status::Ok();
}

StatusOr<std::unique_ptr<Container>> Container::Start(const BackendContext& ctx,
                                                      const OciRuntime& rt, ContainerConfig config,
                                                      StageTimings* timings) {
  auto t0 = Clock::now();
  std::unique_ptr<Container> c(new Container());
  c->rt_ = rt;
  c->id_ = config.id;
  c->cid_ = config.container_id;
  c->limits_ = config.limits;
  c->env_ = config.env;
  c->net_ = std::move(config.net);
  c->dir_ = ctx.state_dir + "/sb/" + config.id;
  const bool runsc = rt.flavor == OciFlavor::kRunsc;

  // LC-2 allocate: directories (mount points only), the cgroup with the limits (LC-3).
  RETURN_IF_ERROR(MkdirP(ctx.state_dir, 0700));
  RETURN_IF_ERROR(MkdirP(ctx.state_dir + "/sb", 0700));
  if (mkdir(c->dir_.c_str(), 0700) != 0) return ErrnoStatus("mkdir " + c->dir_);
  if (!runsc) {
    RETURN_IF_ERROR(MkdirP(c->dir_ + "/rootfs", 0755));
    RETURN_IF_ERROR(MkdirP(c->dir_ + "/scratch", 0755));
    c->overlay_.lower =
        config.layer_dir.empty() ? config.image_dir : config.layer_dir + ":" + config.image_dir;
    c->overlay_.scratch = c->dir_ + "/scratch";
    c->overlay_.target = c->dir_ + "/rootfs";
    c->overlay_.scratch_bytes = config.limits.disk_bytes;
  }
  ASSIGN_OR_RETURN(c->cgroup_, ctx.cgroups->Create("sb-" + config.id));
  const Limits& l = c->limits_;
  if (l.cpu_millicores > 0) RETURN_IF_ERROR(c->cgroup_->SetCpuMillicores(l.cpu_millicores));
  RETURN_IF_ERROR(c->cgroup_->SetMemoryBytes(l.memory_bytes));
  RETURN_IF_ERROR(c->cgroup_->SetPidsMax(l.pids));
  c->oom_kills_seen_ = c->cgroup_->Usage().oom_kills;
  RETURN_IF_ERROR(c->WriteBundle(ctx, config));
  if (timings) timings->allocate = Since(t0);

  // LC-3 initialize: the runtime creates (or restores) the container inside our cgroup.
  auto t1 = Clock::now();
  const std::string pid_file = c->dir_ + "/pid";
  Status st;
  c->created_ = true;  // from here on, a failure must still delete whatever the runtime made
  if (config.restore_image.empty()) {
    st = c->RunVerb({"create", "--bundle", c->dir_, "--pid-file", pid_file, c->cid_},
                    config.start_timeout_s, /*join_cgroup=*/true, /*overlay=*/!runsc);
    if (st.ok()) st = c->RunVerb({"start", c->cid_}, config.start_timeout_s, false, false);
  } else {
    st = c->RunVerb({"restore", "--detach", "--bundle", c->dir_, "--image-path",
                     config.restore_image, "--pid-file", pid_file, c->cid_},
                    config.start_timeout_s, true, false);
  }
  if (st.ok()) {
    c->init_pid_ = static_cast<pid_t>(std::atol(ReadSmallFile(pid_file).c_str()));
    if (c->init_pid_ <= 1) st = Internal("bad pid file " + pid_file);
  }
  if (st.ok()) {
    c->init_pidfd_.Reset(static_cast<int>(syscall(SYS_pidfd_open, c->init_pid_, 0)));
    if (!c->init_pidfd_.valid()) st = ErrnoStatus("pidfd_open container init");
  }
  if (!st.ok()) {
    c->Teardown(nullptr);
    return st;
  }
  {
    // For the reaper: the container's init (crun/runc) or gVisor's sandbox process. Killing it
    // ends the whole container; the cgroup holds the rest.
    std::ofstream stamp(c->dir_ + "/init");
    stamp << host::ProcessStamp(c->init_pid_) << "\n";
  }
  if (timings) timings->initialize = Since(t1);
  return c;
}

bool Container::InitAlive() const {
  if (!init_pidfd_.valid()) return false;
  struct pollfd p = {init_pidfd_.get(), POLLIN, 0};
  return poll(&p, 1, 0) == 0;
}

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
  const bool runsc = rt_.flavor == OciFlavor::kRunsc;
  ExecResult r;
  auto t_inject = Clock::now();
  (void)cgroup_->ResetPeak();
  // Usage is reported per command: the cgroup also holds the container's init (gVisor: the
  // Sentry) and every earlier command.
  const host::CgroupUsage before = cgroup_->Usage();
  const int64_t pids_refusals_before = PidsMaxEvents(cgroup_.get());

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
  std::string status_text;
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
  auto deadline = t_exec + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(exec.timeout_s));
  Clock::time_point kill_at = Clock::time_point::max();
  bool exited = false, timed_out = false, oom = false, disk_full = false, init_died = false;
  bool tools_killed = false;
  int wait_status = 0;
  size_t stdin_off = 0;
  if (exec.stdin_data.empty())
    in_w.Reset();
  else
    fcntl(in_w.get(), F_SETFL, O_NONBLOCK);
  int oom_fd = cgroup_->OomEventFd();
  (void)cgroup_->TakeOomEvent();  // a wake-up left from an earlier command is not this one's
  auto last_disk_check = t_exec;
  const std::string work_path = fmt::format("/proc/{}/root/work", init_pid_);
  char buf[65536];
  auto read_some = [&](host::UniqueFd& fd, std::string* tail, int64_t* total) {
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n > 0)
      AppendTail(tail, total, buf, static_cast<size_t>(n));
    else if (n == 0 || (errno != EAGAIN && errno != EINTR))
      fd.Reset();
  };
  auto disk_free = [&](int64_t* used) -> int64_t {
    struct statfs st;
    if (runsc || statfs(work_path.c_str(), &st) != 0) return -1;
    if (used) *used = static_cast<int64_t>((st.f_blocks - st.f_bfree) * st.f_bsize);
    return static_cast<int64_t>(st.f_bavail * st.f_bsize);
  };

  bool client_exited = false;
  int client_status = 0;
  while (!exited) {
    auto now = Clock::now();
    if (!timed_out && now >= deadline) {
      // RES-5: SIGTERM to every process the command started, SIGKILL after the grace period.
      timed_out = true;
      SignalTools(SIGTERM);
      kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(exec.grace_s));
    }
    if (now >= kill_at) {
      if (!tools_killed) {
        SignalTools(SIGKILL);
        tools_killed = true;
        kill_at = Clock::now() + std::chrono::seconds(5);
      } else {
        child.Kill(SIGKILL);  // the runtime's client outlived its command: end it too
        kill_at = Clock::time_point::max();
      }
    }
    if (!runsc && now - last_disk_check > std::chrono::milliseconds(50)) {
      last_disk_check = now;
      int64_t free_bytes = disk_free(nullptr);
      if (free_bytes >= 0 && free_bytes < 64 * 1024 && !disk_full) {
        disk_full = true;  // RES-3, RES-8: the scratch quota is exhausted: end the container.
        KillNow();
      }
    }
    auto until = std::min(timed_out ? kill_at : deadline, now + std::chrono::milliseconds(50));
    int wait_ms = static_cast<int>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1));
    struct pollfd p[7];
    int np = 0;
    p[np++] = {client_exited ? -1 : child.pidfd(), POLLIN, 0};
    int i_status = status_r.valid() ? np : -1;
    if (status_r.valid()) p[np++] = {status_r.get(), POLLIN, 0};
    int i_init = -1;
    if (!init_died && init_pidfd_.valid()) {
      i_init = np;
      p[np++] = {init_pidfd_.get(), POLLIN, 0};
    }
    int i_out = out_r.valid() ? np : -1;
    if (out_r.valid()) p[np++] = {out_r.get(), POLLIN, 0};
    int i_err = err_r.valid() ? np : -1;
    if (err_r.valid()) p[np++] = {err_r.get(), POLLIN, 0};
    int i_oom = (oom_fd >= 0 && !oom) ? np : -1;
    if (i_oom >= 0) p[np++] = {oom_fd, POLLIN, 0};
    int i_in = in_w.valid() ? np : -1;
    if (in_w.valid()) p[np++] = {in_w.get(), POLLOUT, 0};
    int rc = poll(p, static_cast<nfds_t>(np), wait_ms);
    if (rc < 0 && errno != EINTR) {
      Status failed = ErrnoStatus("poll");
      SignalTools(SIGKILL);  // nothing of a command we stopped watching keeps running
      ZeroMemFile(memfd.get(), text_size);
      return failed;
    }
    if (rc <= 0) continue;
    if (i_out >= 0 && (p[i_out].revents & (POLLIN | POLLHUP)))
      read_some(out_r, &r.stdout_tail, &r.stdout_bytes);
    if (i_err >= 0 && (p[i_err].revents & (POLLIN | POLLHUP)))
      read_some(err_r, &r.stderr_tail, &r.stderr_bytes);
    if (i_in >= 0 && (p[i_in].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t n =
          write(in_w.get(), exec.stdin_data.data() + stdin_off, exec.stdin_data.size() - stdin_off);
      if (n > 0) stdin_off += static_cast<size_t>(n);
      if (n < 0 || stdin_off >= exec.stdin_data.size()) in_w.Reset();
    }
    if (i_oom >= 0 && (p[i_oom].revents & POLLIN)) {
      (void)cgroup_->TakeOomEvent();
      // RES-2, RES-8, FAIL-3: v1 (OOM killer disabled for the cgroup): the breaching task
      // (under gVisor: the Sentry) waits in the kernel; v2: the kernel killed the group. The
      // container ends whole either way.
      if (cgroup_->UnderOom() || cgroup_->OomKills() > oom_kills_seen_ ||
          cgroup_->Usage().memory_peak_bytes >= limits_.memory_bytes * 95 / 100) {
        oom = true;
        KillNow();
      }
    }
    if (i_init >= 0 && (p[i_init].revents & POLLIN)) {
      // The container's init (gVisor: the whole sandbox) died: nothing can run in it any more.
      init_died = true;
      crashed_ = true;
      KillNow();
    }
    if (i_status >= 0 && (p[i_status].revents & (POLLIN | POLLHUP))) {
      char sb[64];
      ssize_t n = read(status_r.get(), sb, sizeof sb);
      if (n > 0)
        status_text.append(sb, static_cast<size_t>(n));
      else if (n == 0 || (errno != EAGAIN && errno != EINTR))
        status_r.Reset();
    }
    if (!client_exited && (p[0].revents & POLLIN)) client_exited = child.TryReap(&client_status);
    // Done when the runtime's client has exited and, for a detached command, the shell around
    // it has reported (or died: EOF).
    exited = client_exited && !status_r.valid();
  }
  wait_status = client_status;
  if (detached && WIFEXITED(client_status) && WEXITSTATUS(client_status) == 0) {
    // The client only started the command; its status came through the pipe ("" = killed).
    wait_status = status_text.empty() ? W_EXITCODE(137, 0)
                                      : W_EXITCODE(std::atoi(status_text.c_str()) & 0xff, 0);
  }
  if (timed_out) {
    // RES-5: what the command left behind got SIGTERM only: SIGKILL it now.
    SignalTools(SIGKILL);
  }
  r.seconds = Since(t_exec);
  r.stages.execute = r.seconds;
  ZeroMemFile(memfd.get(), text_size);

  // LC-6 collect: what the pipes still hold (wait a little for EOF, not for background
  // processes), then usage from the cgroup, never from inside.
  auto t_collect = Clock::now();
  auto drain_until = Clock::now() + std::chrono::milliseconds(20);
  for (auto* fdp : {&out_r, &err_r}) {
    if (fdp->valid()) fcntl(fdp->get(), F_SETFL, O_NONBLOCK);
  }
  while ((out_r.valid() || err_r.valid()) && Clock::now() < drain_until) {
    struct pollfd p[2];
    int np = 0;
    if (out_r.valid()) p[np++] = {out_r.get(), POLLIN, 0};
    if (err_r.valid()) p[np++] = {err_r.get(), POLLIN, 0};
    if (poll(p, static_cast<nfds_t>(np), 5) <= 0) continue;
    if (out_r.valid()) read_some(out_r, &r.stdout_tail, &r.stdout_bytes);
    if (err_r.valid()) read_some(err_r, &r.stderr_tail, &r.stderr_bytes);
  }
  if (!init_died && !InitAlive()) {
    init_died = true;
    crashed_ = true;
  }
  // gVisor at pids.max: the Sentry cannot make a thread and dies, but the `runsc exec` client
  // may return (its connection gone) a moment before the Sentry is gone. Wait for that moment
  // rather than report a contained fork bomb as a normal exit (RES-4).
  const bool pids_refused = PidsMaxEvents(cgroup_.get()) > pids_refusals_before;
  const bool gvisor = rt_.flavor == OciFlavor::kRunsc;
  if (!init_died && gvisor && pids_refused && !timed_out) {
    for (int i = 0; i < 100 && !init_died; ++i) {
      usleep(10000);
      if (!InitAlive()) {
        init_died = true;
        crashed_ = true;
      }
    }
  }
  host::CgroupUsage u = cgroup_->Usage();
  r.usage.cpu_seconds = u.cpu_seconds - before.cpu_seconds;
  r.usage.memory_peak_bytes = u.memory_peak_bytes;
  r.usage.oom_kills = u.oom_kills - oom_kills_seen_;
  r.usage.pids_peak = u.pids_peak;
  r.usage.throttled_seconds = u.throttled_seconds - before.throttled_seconds;
  int64_t used = 0;
  int64_t free_bytes = init_died ? -1 : disk_free(&used);
  r.usage.disk_used_bytes = used;
  if (free_bytes >= 0 && free_bytes < 64 * 1024) disk_full = true;
  if (r.usage.oom_kills > 0) oom = true;  // the eventfd can lose the race with the exit
  // A process the command left behind waits in OOM (v1): the limit was breached all the same.
  if (cgroup_->UnderOom()) oom = true;
  oom_kills_seen_ = u.oom_kills;
  // Contained and reported (RES-4, RES-8): the sandbox died at pids.max, or (gVisor) pids.max
  // refused gVisor a thread during the command, which it cannot serve normally after that.
  bool pids_breach = pids_refused && (init_died || (gvisor && !timed_out));

  if (WIFEXITED(wait_status)) {
    r.exit_code = WEXITSTATUS(wait_status);
  } else if (WIFSIGNALED(wait_status)) {
    r.signal = WTERMSIG(wait_status);
    r.exit_code = 128 + r.signal;
  }
  if (oom) {
    KillNow();
    crashed_ = true;
    r.status = ExecStatus::kResourceExceeded;
    r.reason =
        fmt::format("memory limit {} bytes exceeded: OOM kill (RES-2)", limits_.memory_bytes);
    r.error_code = "memory_limit";
  } else if (disk_full) {
    KillNow();
    crashed_ = true;
    r.status = ExecStatus::kResourceExceeded;
    r.reason = fmt::format("disk quota {} bytes exhausted (RES-3)", limits_.disk_bytes);
    r.error_code = "disk_limit";
  } else if (pids_breach) {
    // gVisor: its own host threads count against pids.max; when a fork bomb exhausts it, the
    // Sentry cannot make a thread and the sandbox dies. Contained, and reported so (RES-4).
    r.status = ExecStatus::kResourceExceeded;
    r.reason = fmt::format(
        "pids limit reached: pids.max {} (which counts gVisor's own host threads too) refused "
        "a thread{} (RES-4)",
        limits_.pids, init_died ? ", and the sandbox was ended" : " during the command");
    r.error_code = "pids_limit";
  } else if (timed_out) {
    r.status = ExecStatus::kTimeout;
    r.reason = fmt::format("timeout after {:.3g} s: SIGTERM, then SIGKILL after {:.3g} s (RES-5)",
                           exec.timeout_s, exec.grace_s);
    r.error_code = "timeout";
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

Status Container::ApplyLimits(const Limits& l) {
  if (torn_down_ || !cgroup_) return FailedPrecondition("container is gone");
  RETURN_IF_ERROR(cgroup_->SetCpuMillicores(l.cpu_millicores));
  RETURN_IF_ERROR(cgroup_->SetMemoryBytes(l.memory_bytes));
  RETURN_IF_ERROR(cgroup_->SetPidsMax(l.pids));
  limits_.cpu_millicores = l.cpu_millicores;
  limits_.memory_bytes = l.memory_bytes;
  limits_.pids = l.pids;
  limits_.fds = l.fds;  // RLIMIT_NOFILE is set per command
  return Status::Ok();
}

Status Container::Checkpoint(const std::string& image_dir) {
  if (rt_.flavor != OciFlavor::kRunsc) return Unsupported("checkpoint needs runsc");
  if (torn_down_ || crashed_) return FailedPrecondition("container is not running");
  RETURN_IF_ERROR(MkdirP(image_dir, 0700));
  Status st = RunVerb({"checkpoint", "--image-path", image_dir, cid_}, 120, false, false);
  crashed_ = true;  // the container stops after a checkpoint, whatever happened
  return st;
}

void Container::KillNow() {
  if (torn_down_ || !cgroup_) return;
  (void)cgroup_->SignalAll(SIGKILL);
}

void Container::Teardown(StageTimings* timings) {
  if (torn_down_) return;
  torn_down_ = true;
  auto t0 = Clock::now();
  // LC-7 destroy: every process of the container, the runtime's own included.
  if (cgroup_) (void)cgroup_->KillAll(2.0);
  if (created_) {
    auto out = RunCommand(Plan({"delete", "--force", cid_}, false, false), kVerbTimeoutS);
    if (!out.ok() || (!out->ok() && out->Describe().find("not exist") == std::string::npos &&
                      out->Describe().find("not found") == std::string::npos)) {
      fmt::print(stderr, "sandcheck: {} delete {}: {}\n", rt_.name(), cid_,
                 out.ok() ? out->Describe() : out.status().ToString());
    }
    created_ = false;
  }
  init_pidfd_.Reset();
  init_pid_ = -1;
  // The shim exits once it has reaped the container's last host process.
  int st = 0;
  if (shim_.running() && !shim_.Wait(2.0, &st)) {
    fmt::print(stderr, "sandcheck: the shim of {} did not exit; killing it\n", cid_);
  }
  shim_ = Child();
  if (timings) timings->destroy = Since(t0);
  // LC-8 cleanup: cgroup, network namespace, directories (the mounts died with their
  // namespaces: on the host, rootfs/ and scratch/ are empty directories).
  auto t1 = Clock::now();
  cgroup_.reset();
  net_.reset();
  if (!dir_.empty()) {
    for (const char* f : {"config.json", "pid", "init", "runtime.log"})
      unlink((dir_ + "/" + f).c_str());
    rmdir((dir_ + "/rootfs").c_str());
    rmdir((dir_ + "/scratch").c_str());
    if (rmdir(dir_.c_str()) != 0 && errno != ENOENT) {
      fmt::print(stderr, "sandcheck: cannot remove {}: {}\n", dir_, std::strerror(errno));
    }
  }
  if (timings) timings->cleanup = Since(t1);
}

Container::~Container() { Teardown(nullptr); }

std::string InstanceId(const std::string& sandbox_id, int generation) {
  return fmt::format("{}-{}", sandbox_id, generation);
}

StatusOr<std::unique_ptr<Container>> StartInstance(const BackendContext& ctx, const OciRuntime& rt,
                                                   const InstanceRequest& req,
                                                   StageTimings* timings) {
  auto t0 = Clock::now();
  ContainerConfig cfg;
  cfg.id = InstanceId(req.sandbox_id, req.generation);
  // The OCI runtime's name for it: unique on the host (gVisor names its control socket after
  // it, in an abstract namespace shared by every runtime of the network namespace).
  cfg.container_id = fmt::format("sbx-{}-{}", ctx.runtime_id, cfg.id);
  cfg.image_dir = req.image_dir;
  cfg.layer_dir = req.layer_dir;
  cfg.restore_image = req.restore_image;
  cfg.limits = req.limits;
  cfg.env = req.env;
  if (!req.egress.empty()) {
    if (!ctx.egress)
      return Status(Code::kSandboxUnavailable, "egress is not available in this runtime");
    ASSIGN_OR_RETURN(net::EgressService * svc, ctx.egress());
    ASSIGN_OR_RETURN(cfg.net, svc->Attach(cfg.id, req.egress, req.hosts));
  }
  double attach_s = Since(t0);
  auto c = Container::Start(ctx, rt, std::move(cfg), timings);
  if (c.ok() && timings && timings->allocate >= 0) timings->allocate += attach_s;
  return c;
}

}  // namespace sbx::backend
