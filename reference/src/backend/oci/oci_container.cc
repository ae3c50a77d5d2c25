#include "backend/oci/oci_container.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>

#include "backend/common/fs_layer.h"
#include "backend/oci/oci_bundle.h"
#include "host/seccomp.h"
#include "host/state_dir.h"

namespace sbx::backend {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kVerbTimeoutS = 30;

// Where the agent (sbx-init) is bound into a crun/runc container.
constexpr const char* kAgentPath = "/dev/.sbx-init";

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
  plan.exec_fd = rt_.sealed ? rt_.sealed->fd() : -1;
  plan.hide_dirs = rt_.hide_dirs;
  if (overlay) plan.overlays.push_back(overlay_);
  plan.private_mounts = !plan.hide_dirs.empty() || !plan.overlays.empty();
  if (join_cgroup) plan.cgroup_procs_fds = cgroup_->ProcsFds();
  return plan;
}

Status Container::RunVerb(const std::vector<std::string>& verb, double timeout_s, bool join_cgroup,
                          bool overlay, std::vector<std::pair<int, int>> extra_fds) {
  SpawnPlan plan = Plan(verb, join_cgroup, overlay);
  plan.extra_fds = std::move(extra_fds);
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
  // reaps them (common/spawn.h) and lives as long as they do.
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
  std::vector<std::string> denied = ctx.seccomp->denied();
  if (runsc) {
    // runsc 2022-12 answers every denied call with EPERM, ignoring errnoRet, so clone3's
    // ENOSYS (which makes libc fall back to clone(2), whose flags the filter can see) became
    // EPERM and no thread could start (pthread_create failed). The Sentry itself answers
    // clone3 with ENOSYS, and its namespaces are its own: the rule is left out there.
    denied.erase(std::remove(denied.begin(), denied.end(), "clone3"), denied.end());
  }
  ASSIGN_OR_RETURN(spec.seccomp, OciSeccompFromDenyList(denied));
  spec.init.uid = 0;
  spec.init.gid = 0;
  spec.init.cwd = "/";
  spec.init.env = OciBaseEnv();
  // The agent: sbx-init, bound read-only into the container's own /dev (a tmpfs of the
  // runtime's: nothing is created in the image or its overlay). It keeps the three
  // capabilities it needs to become the tools' user in each command, drops them there, and
  // may raise a command's RLIMIT_NOFILE up to the hard limit (RES-6).
  char abs[PATH_MAX];
  if (!realpath(ctx.init_path.c_str(), abs)) return ErrnoStatus("sbx-init at " + ctx.init_path);
  spec.mounts.push_back({kAgentPath, "bind", abs, {"bind", "ro", "nosuid", "nodev"}});
  spec.init.args = {kAgentPath, runsc ? "--agent-stdin" : "--agent"};
  spec.init.capabilities = {"CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"};
  // The OCI runtime sets rlimits without CAP_SYS_RESOURCE, so the hard limit cannot exceed the
  // runtime's own.
  struct rlimit own {};
  getrlimit(RLIMIT_NOFILE, &own);
  spec.init.nofile = std::min<int64_t>(256, limits_.fds);
  spec.init.nofile_hard = std::max<int64_t>(limits_.fds, static_cast<int64_t>(own.rlim_max));

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
  c->guest_nproc_ = config.guest_nproc;
  c->env_ = config.env;
  c->net_ = std::move(config.net);
  c->dir_ = host::SandboxDir(ctx.state_dir, config.id);
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
  if (timings) timings->allocate = SecondsSince(t0);

  // LC-3 initialize: the runtime creates (or restores) the container inside our cgroup.
  auto t1 = Clock::now();
  const std::string pid_file = c->dir_ + "/pid";
  Status st;
  c->created_ = true;  // from here on, a failure must still delete whatever the runtime made
  // The agent's control socket. crun/runc: its end becomes fd 3 of the container's init
  // (--preserve-fds). runsc has no such flag, but gives the runtime command's stdin to the
  // init, as a host socket through which SCM_RIGHTS works; and on restore it binds the
  // restored init's fd 0 to the new `runsc restore`'s stdin, so a restored agent (blocked
  // reading its socket when the checkpoint was taken) is reached through a fresh socket.
  std::vector<std::pair<int, int>> pass;
  host::UniqueFd agent_end;
  {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
      st = ErrnoStatus("socketpair");
    } else {
      c->agent_ = InitClient(host::UniqueFd(sv[0]), kOciSandboxUid, kOciSandboxGid);
      c->agent_.set_nofile(c->limits_.fds);
      c->agent_.set_nproc(c->guest_nproc_);
      agent_end.Reset(sv[1]);
      pass.push_back({agent_end.get(), runsc ? 0 : 3});
    }
  }
  const bool restore = !config.restore_image.empty();
  if (st.ok() && !restore) {
    std::vector<std::string> create = {"create", "--bundle", c->dir_, "--pid-file", pid_file};
    if (!runsc) create.insert(create.end(), {"--preserve-fds", "1"});
    create.push_back(c->cid_);
    st = c->RunVerb(create, config.start_timeout_s, /*join_cgroup=*/true, /*overlay=*/!runsc, pass);
    agent_end.Reset();
    if (st.ok()) st = c->RunVerb({"start", c->cid_}, config.start_timeout_s, false, false);
    if (st.ok()) {
      st = c->agent_.WaitReady(config.start_timeout_s);
      if (!st.ok()) {
        st =
            Status(Code::kSandboxUnavailable,
                   fmt::format("{} container's agent: {}; runtime log: {}", rt.name(), st.message(),
                               ReadSmallFile(c->dir_ + "/runtime.log").substr(0, 2000)));
      }
    }
  } else if (st.ok()) {
    // The agent was ready when the checkpoint was taken: no second ready message comes.
    st = c->RunVerb({"restore", "--detach", "--bundle", c->dir_, "--image-path",
                     config.restore_image, "--pid-file", pid_file, c->cid_},
                    config.start_timeout_s, true, false, pass);
    agent_end.Reset();
  }
  if (st.ok()) c->agent_.EnablePrespawn(c->limits_.fds);  // POOL-8
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
  // For the reaper: the container's init (crun/runc) or gVisor's sandbox process. Killing it
  // ends the whole container; the cgroup holds the rest.
  if (Status recorded = host::WriteInitRecord(c->dir_, c->init_pid_); !recorded.ok()) {
    c->Teardown(nullptr);
    return recorded;
  }
  if (timings) timings->initialize = SecondsSince(t1);
  return c;
}

bool Container::InitAlive() const {
  if (!init_pidfd_.valid()) return false;
  struct pollfd p = {init_pidfd_.get(), POLLIN, 0};
  return poll(&p, 1, 0) == 0;
}

Status Container::ApplyLimits(const Limits& l, int64_t guest_nproc) {
  if (torn_down_ || !cgroup_) return FailedPrecondition("container is gone");
  RETURN_IF_ERROR(cgroup_->SetCpuMillicores(l.cpu_millicores));
  RETURN_IF_ERROR(cgroup_->SetMemoryBytes(l.memory_bytes));
  RETURN_IF_ERROR(cgroup_->SetPidsMax(l.pids));
  limits_.cpu_millicores = l.cpu_millicores;
  limits_.memory_bytes = l.memory_bytes;
  limits_.pids = l.pids;
  limits_.fds = l.fds;         // RLIMIT_NOFILE is set per command
  guest_nproc_ = guest_nproc;  // so is RLIMIT_NPROC
  return Status::Ok();
}

Status Container::Checkpoint(const std::string& image_dir) {
  if (rt_.flavor != OciFlavor::kRunsc) return Unsupported("checkpoint needs runsc");
  if (torn_down_ || crashed_) return FailedPrecondition("container is not running");
  // gVisor cannot save a descriptor that came from the host other than the init's stdio: the
  // pre-spawned shell holds four (its pipes) and must be gone first. (A tool's background
  // process that kept a command's output open makes the checkpoint fail the same way.)
  RETURN_IF_ERROR(agent_.DropPrespawnedAndWait(10));
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
  agent_.Close();
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
  if (timings) timings->destroy = SecondsSince(t0);
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
  if (timings) timings->cleanup = SecondsSince(t1);
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
  cfg.guest_nproc = req.guest_nproc;
  cfg.env = req.env;
  if (!req.egress.empty()) {
    if (!ctx.egress)
      return Status(Code::kSandboxUnavailable, "egress is not available in this runtime");
    ASSIGN_OR_RETURN(net::EgressService * svc, ctx.egress());
    ASSIGN_OR_RETURN(cfg.net, svc->Attach(cfg.id, req.egress, req.hosts));
  }
  double attach_s = SecondsSince(t0);
  auto c = Container::Start(ctx, rt, std::move(cfg), timings);
  if (c.ok() && timings && timings->allocate >= 0) timings->allocate += attach_s;
  return c;
}

}  // namespace sbx::backend
