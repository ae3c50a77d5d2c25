#include "common/oci.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>

#include "common/cgroup_probe.h"
#include "common/fs_util.h"

namespace sandcheck::adapter {

namespace {

constexpr int64_t kCpuPeriodUs = 100000;
constexpr double kCreateTimeout = 60;
constexpr double kVerbTimeout = 30;
constexpr double kTermGrace = 0.5;  // RES-5: SIGTERM, then SIGKILL after this

Json Mount(std::string dest, std::string type, std::string source, std::vector<std::string> opts) {
  return Json{{"destination", std::move(dest)},
              {"type", std::move(type)},
              {"source", std::move(source)},
              {"options", std::move(opts)}};
}

}  // namespace

std::map<std::string, std::string> OciUnsupported() {
  return {
      {"egress",
       "no egress gateway: the container gets its own network namespace with loopback only, so "
       "allow-listed hosts are unreachable too (SNAP-5 holds, EGR-1..5 cannot be shown)"},
      {"limits.disk",
       "no scratch quota: /work is a host directory and the OCI spec has no disk limit"},
      {"suspend",
       "one container per exec: no process state is kept between execs to suspend (no "
       "suspend/resume ops)"},
      {"tenants", "no tenant model: a sandbox serves whoever holds its id"},
      {"trust", "no trust classes: one isolation level per adapter"},
      {"pool", "no warm pool: every exec creates and deletes a container"},
      {"secrets", "secrets would have to be written into config.json on disk (LC-4)"},
  };
}

Json BuildOciSpec(const SandboxRecord& rec, const std::string& work_dir, const std::string& cmd,
                  const std::string& cgroups_path, const OciOptions& options) {
  std::vector<std::string> env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/work", "LANG=C"};
  for (const auto& [k, v] : rec.env) env.push_back(k + "=" + v);
  Json no_caps = Json::array();
  int64_t nofile = rec.limits.fds.value_or(0) > 0 ? *rec.limits.fds : 1024;

  Json process = {
      {"terminal", false},
      // SECURITY: the image's unprivileged user, no capabilities, no setuid gains.
      {"user", {{"uid", kSandboxUid}, {"gid", kSandboxGid}, {"additionalGids", Json::array()}}},
      {"args", {"/bin/sh", "-c", cmd}},
      {"env", env},
      {"cwd", "/work"},
      {"capabilities",
       {{"bounding", no_caps},
        {"effective", no_caps},
        {"permitted", no_caps},
        {"inheritable", no_caps},
        {"ambient", no_caps}}},
      // RES-6: file descriptors.
      {"rlimits", {{{"type", "RLIMIT_NOFILE"}, {"hard", nofile}, {"soft", nofile}}}},
      {"noNewPrivileges", true}};

  Json mounts = Json::array({
      Mount("/proc", "proc", "proc", {"nosuid", "noexec", "nodev"}),
      Mount("/dev", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k"}),
      Mount("/dev/pts", "devpts", "devpts",
            {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}),
      Mount("/dev/shm", "tmpfs", "shm", {"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}),
      Mount("/dev/mqueue", "mqueue", "mqueue", {"nosuid", "noexec", "nodev"}),
      Mount("/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"}),
      // FS-1: /work is the one writable, persistent path (the sandbox's own directory).
      Mount("/work", "bind", work_dir, {"rbind", "rw", "nosuid", "nodev"}),
      Mount("/tmp", "tmpfs", "tmpfs", {"nosuid", "nodev", "mode=1777", "size=65536k"}),
  });

  Json resources = {{"devices", {{{"allow", false}, {"access", "rwm"}}}}};
  // RES-1: CPU quota as a hard cap (quota per period).
  if (rec.limits.cpu_millicores.value_or(0) > 0) {
    resources["cpu"] = {{"quota", *rec.limits.cpu_millicores * kCpuPeriodUs / 1000},
                        {"period", kCpuPeriodUs}};
  }
  // RES-2: memory, with swap capped at the same value so the limit cannot be dodged.
  // RES-8: with the kernel's OOM killer disabled (cgroup v1 memory.oom_control), a breach parks
  // the breaching task instead of killing one process and letting its shell run on; the OOM
  // watch fires and Exec ends the whole container (docs/cgroups.md).
  if (rec.limits.memory_bytes.value_or(0) > 0) {
    resources["memory"] = {{"limit", *rec.limits.memory_bytes},
                           {"swap", *rec.limits.memory_bytes},
                           {"disableOOMKiller", true}};
  }
  // RES-4: pids.max.
  if (rec.limits.pids.value_or(0) > 0) resources["pids"] = {{"limit", *rec.limits.pids}};

  Json namespaces = Json::array();
  for (const auto& ns : options.namespaces) namespaces.push_back({{"type", ns}});

  return Json{{"ociVersion", "1.0.2"},
              {"process", process},
              // FS-2: the root (this sandbox's own copy of the image) is read-only.
              {"root", {{"path", "rootfs"}, {"readonly", true}}},
              {"hostname", "sandbox"},
              {"mounts", mounts},
              {"linux",
               {{"namespaces", namespaces},
                {"cgroupsPath", cgroups_path},
                {"resources", resources},
                {"maskedPaths",
                 {"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                  "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
                  "/proc/scsi"}},
                {"readonlyPaths",
                 {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}}}}};
}

std::string OciRuntime::ContainerId(const SandboxContext& sbx) const {
  return fmt::format("sandcheck-{}-{}", Describe().name, sbx.record.id);
}

std::vector<std::string> OciRuntime::Command(
    const SandboxContext& sbx, std::initializer_list<std::string> verb_and_args) const {
  std::vector<std::string> argv = {options_.binary};
  argv.insert(argv.end(), options_.global_args.begin(), options_.global_args.end());
  // Only `create` starts the sandbox process that writes the panic log; other verbs must not
  // reopen (and truncate) it.
  if (!options_.panic_log.empty() && *verb_and_args.begin() == "create") {
    argv.push_back("--panic-log=" + sbx.dir + "/" + options_.panic_log);
  }
  argv.insert(argv.end(), verb_and_args.begin(), verb_and_args.end());
  return argv;
}

sbx::StatusOr<std::string> OciRuntime::Version(Supervisor& sup) {
  std::vector<std::string> argv = {options_.binary, "--version"};
  ASSIGN_OR_RETURN(RunResult r, Run(sup, argv));
  if (!r.success()) return sbx::Internal(DescribeFailure(argv, r));
  // "runc version 1.1.5+ds1\n..." / "crun version 1.8.1\n..." / "runsc version 0.0~2022...".
  std::string first = r.out.substr(0, r.out.find('\n'));
  auto pos = first.find("version ");
  return pos == std::string::npos ? first : first.substr(pos + 8);
}

void OciRuntime::Kill(Supervisor& sup, const SandboxContext& sbx, int signal) {
  auto r = Run(sup, Command(sbx, {"kill", "--all", ContainerId(sbx), std::to_string(signal)}),
               RunOptions{.timeout_s = kVerbTimeout});
  (void)r;
}

sbx::Status OciRuntime::Delete(Supervisor& sup, SandboxContext& sbx) {
  std::string id = ContainerId(sbx);
  auto argv = Command(sbx, {"delete", "--force", id});
  ASSIGN_OR_RETURN(RunResult r, Run(sup, argv, RunOptions{.timeout_s = kVerbTimeout}));
  bool gone = r.success() || r.err.find("does not exist") != std::string::npos ||
              r.err.find("not exist") != std::string::npos ||
              r.err.find("not found") != std::string::npos;
  if (!gone) return sbx::Internal(DescribeFailure(argv, r));
  // The runtime removes the cgroups it made; these are swept in case it died half way.
  if (auto st = RemoveCgroupDirs(sbx.record.cgroup_dirs, id); !st.ok()) return st;
  sbx.record.cgroup_dirs.clear();
  sbx.record.container_live = false;
  return sbx.Save();
}

sbx::Status OciRuntime::Cleanup(Supervisor& sup, SandboxContext& sbx) {
  if (!sbx.record.container_live) return sbx::Status::Ok();
  Kill(sup, sbx, SIGKILL);
  return Delete(sup, sbx);
}

sbx::StatusOr<ExecResult> OciRuntime::Exec(Supervisor& sup, SandboxContext& sbx,
                                           const ExecRequest& req) {
  const std::string id = ContainerId(sbx);
  const std::string cgroups_path = options_.absolute_cgroups_path ? "/" + id : id;
  Json spec = BuildOciSpec(sbx.record, sbx.work, req.cmd, cgroups_path, options_);
  RETURN_IF_ERROR(WriteFileAtomic(sbx.dir + "/config.json", spec.dump(1), 0600));
  sbx.record.container_live = true;
  sbx.record.container_id = id;
  RETURN_IF_ERROR(sbx.Save());

  // The container's stdout/stderr are these pipes: `create` passes its own stdio to the init.
  ASSIGN_OR_RETURN(Pipe out, MakePipe());
  ASSIGN_OR_RETURN(Pipe err, MakePipe());
  for (int fd : {out.read.get(), err.read.get()}) fcntl(fd, F_SETFL, O_NONBLOCK);
  TailBuffer out_tail, err_tail;
  std::vector<Supervisor::Stream> streams;
  streams.push_back({std::move(out.read), &out_tail});
  streams.push_back({std::move(err.read), &err_tail});

  const std::string pid_file = sbx.dir + "/init.pid";
  unlink(pid_file.c_str());
  const std::string panic_log =
      options_.panic_log.empty() ? "" : sbx.dir + "/" + options_.panic_log;
  if (!panic_log.empty()) unlink(panic_log.c_str());
  auto create_argv = Command(sbx, {"create", "--bundle", sbx.dir, "--pid-file", pid_file, id});
  int create_status = 0;
  for (int attempt = 0;; ++attempt) {
    SpawnSpec create;
    create.argv = create_argv;
    create.stdout_fd = out.write.get();
    create.stderr_fd = err.write.get();
    Trace("create");
    ASSIGN_OR_RETURN(pid_t pid, Spawn(create));
    auto wake = sup.Wait(pid, DeadlineIn(kCreateTimeout), streams, -1, &create_status);
    if (wake != Supervisor::Wake::kExited) {
      kill(pid, SIGKILL);
      sup.Wait(pid, DeadlineIn(5), streams, -1, &create_status);
      (void)Cleanup(sup, sbx);
      return sbx::Internal(
          fmt::format("{} create: did not finish ({})", options_.binary,
                      wake == Supervisor::Wake::kSignal ? "adapter interrupted" : "timed out"));
    }
    if (create_status == 0) break;
    if (attempt == 0 && err_tail.data().find("already exists") != std::string::npos) {
      // A container left by an adapter that died: remove it and try once more.
      err_tail = TailBuffer();
      RETURN_IF_ERROR(Delete(sup, sbx));
      sbx.record.container_live = true;
      RETURN_IF_ERROR(sbx.Save());
      continue;
    }
    sup.Drain(streams, DeadlineIn(0.2));
    (void)Cleanup(sup, sbx);
    return sbx::Internal(fmt::format("{} create: {}: {}", options_.binary,
                                     DescribeWaitStatus(create_status), err_tail.data()));
  }
  Trace("created");
  out.write.Reset();
  err.write.Reset();

  ASSIGN_OR_RETURN(std::string pid_text, ReadFile(pid_file));
  pid_t init = static_cast<pid_t>(std::atol(pid_text.c_str()));
  if (init <= 1) return sbx::Internal(fmt::format("bad pid file {}", pid_file));

  // Read back what the runtime made, from outside (limits verified from the host side).
  std::string pids_dir;
  if (auto dirs = CgroupDirsOf(init); dirs.ok()) {
    for (const auto& d : *dirs) {
      if (d.dir.size() > id.size() && d.dir.compare(d.dir.size() - id.size(), id.size(), id) == 0) {
        sbx.record.cgroup_dirs.push_back(d.dir);
      }
    }
    RETURN_IF_ERROR(sbx.Save());
    if (sbx.record.limits.pids.value_or(0) > 0) pids_dir = ControllerDir(*dirs, "pids");
  }
  auto pids_hits = [&]() -> uint64_t {
    if (pids_dir.empty()) return 0;
    auto n = PidsLimitHits(pids_dir);
    return n.ok() ? *n : 0;
  };
  std::optional<MemoryCgroup> memcg;
  std::optional<OomWatch> oom_watch;
  if (auto m = MemoryCgroupOf(init); m.ok()) {
    memcg = *m;
    if (auto w = OomWatch::Start(*m); w.ok()) {
      oom_watch.emplace(std::move(*w));
    } else {
      fmt::print(stderr, "sandcheck-adapter: OOM watch unavailable ({}); relying on the counter\n",
                 w.status().ToString());
    }
  }

  auto start = Clock::now();
  auto start_argv = Command(sbx, {"start", id});
  auto started_or = Run(sup, start_argv, RunOptions{.timeout_s = kVerbTimeout});
  if (!started_or.ok()) {
    // Interrupted (SIGTERM) while `start` ran: the command may already be running (runsc's
    // start returns late, and under load much later). The signal is reported once, so the
    // cleanup's own runtime calls still run: never leave the container behind.
    (void)Cleanup(sup, sbx);
    return started_or.status();
  }
  RunResult started = std::move(started_or).value();
  if (!started.success()) {
    (void)Cleanup(sup, sbx);
    return sbx::Internal(DescribeFailure(start_argv, started));
  }

  // LC-5: the command runs with the timeout armed.
  auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(req.timeout_s));
  int status = 0;
  bool timed_out = false, oom_event = false, pids_event = false, interrupted = false;
  constexpr auto kPidsTick = std::chrono::milliseconds(100);
  for (;;) {
    // With a pids limit, look at pids.events every tick: a refused fork ends the sandbox.
    bool ticking = !pids_dir.empty() && !pids_event && !oom_event && !timed_out;
    auto until = ticking ? std::min(deadline, Clock::now() + kPidsTick) : deadline;
    auto wake = sup.Wait(init, until, streams, oom_watch ? oom_watch->fd() : -1, &status);
    if (wake == Supervisor::Wake::kExited) break;
    if (wake == Supervisor::Wake::kDeadline && Clock::now() < deadline) {
      if (pids_hits() > 0) {
        // RES-4, RES-8: the pids limit was hit; end the whole sandbox (a fork bomb that
        // tolerates EAGAIN would otherwise spin until the timeout).
        pids_event = true;
        Kill(sup, sbx, SIGKILL);
        deadline = DeadlineIn(10);
      }
      continue;
    }
    if (wake == Supervisor::Wake::kEvent) {
      if (!oom_watch->Fired()) continue;
      // RES-8: a breached memory limit ends the whole sandbox, not just the process the
      // kernel chose (cgroup v1 kills one process and its parent shell would carry on). The
      // breaching task waits in the kernel (disableOOMKiller), so nothing runs on while the
      // init — and with it the container's PID namespace — is killed: one syscall, no runtime
      // CLI in between. Then the runtime's own kill, for anything outside that namespace.
      oom_event = true;
      kill(init, SIGKILL);
      Kill(sup, sbx, SIGKILL);
      oom_watch.reset();
      deadline = DeadlineIn(10);
      continue;
    }
    if (wake == Supervisor::Wake::kSignal) {
      interrupted = true;
      Kill(sup, sbx, SIGKILL);
    } else if (!timed_out && !oom_event && !pids_event) {
      // RES-5, FAIL-4: SIGTERM to every process, SIGKILL after a grace period.
      timed_out = true;
      Kill(sup, sbx, SIGTERM);
      if (sup.Wait(init, DeadlineIn(kTermGrace), streams, -1, &status) ==
          Supervisor::Wake::kExited) {
        break;
      }
      Kill(sup, sbx, SIGKILL);
    } else {
      kill(init, SIGKILL);  // the runtime's kill did not end it: end the init directly
    }
    if (sup.Wait(init, DeadlineIn(5), streams, -1, &status) == Supervisor::Wake::kExited) break;
    kill(init, SIGKILL);
    if (sup.Wait(init, DeadlineIn(5), streams, -1, &status) == Supervisor::Wake::kExited) break;
    (void)Cleanup(sup, sbx);
    return sbx::Internal(fmt::format("container {} (pid {}) would not die", id, init));
  }
  ExecResult res;
  res.seconds = SecondsSince(start);
  Trace("init exited");
  // LC-6: collect what is still in the pipes (all writers are in the ended container).
  sup.Drain(streams, DeadlineIn(1));
  uint64_t oom_kills = 0;
  if (memcg) {
    if (auto n = OomKillCount(*memcg); n.ok()) oom_kills = *n;
  }
  uint64_t refused_forks = pids_hits();
  std::string panic;
  if (!panic_log.empty()) {
    if (auto text = ReadFile(panic_log); text.ok()) panic = text->substr(0, 2000);
    unlink(panic_log.c_str());
  }
  Trace("drained");
  RETURN_IF_ERROR(Delete(sup, sbx));
  if (interrupted) return sbx::Internal("adapter interrupted by a signal; container removed");

  res.out = out_tail.data();
  res.err = err_tail.data();
  res.exit = ExitCodeOf(status);
  if (oom_event || oom_kills > 0) {
    // FAIL-3: killed for breaching the memory limit, as the kernel's counter says.
    res.status = "resource_exceeded";
    res.state = "CRASHED";
    res.err += fmt::format("[sandcheck-adapter: memory limit reached: {} OOM kill(s) in {}]\n",
                           oom_kills, memcg ? memcg->dir : "?");
  } else if (pids_event || refused_forks > 0) {
    // RES-4, RES-8: the pids limit refused a fork; the sandbox is ended and reported so.
    res.status = "resource_exceeded";
    res.state = "CRASHED";
    res.err += fmt::format("[sandcheck-adapter: pids limit reached: {} fork(s) refused in {}]\n",
                           refused_forks, pids_dir);
  } else if (timed_out) {
    res.status = "timeout";
  } else if (!panic.empty() || (options_.init_is_sandbox && WIFSIGNALED(status))) {
    // FAIL-2: the runtime's sandbox process itself died (not the command inside it).
    res.status = "tool_error";
    res.state = "CRASHED";
    res.err += fmt::format("[sandcheck-adapter: sandbox process {}{}{}]\n",
                           DescribeWaitStatus(status), panic.empty() ? "" : ": ", panic);
  }
  return res;
}

}  // namespace sandcheck::adapter
