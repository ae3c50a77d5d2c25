// ReferenceDriver: the reference runtime in process, through its public API only
// (sbx/runtime.h, sbx/model.h, sbx/status.h) — exactly as any embedder would use it. The
// runtime's gateway log is offered as the feature "egress.log".
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "common/subprocess.h"
#include "drivers/target.h"
#include "host/orphan_census.h"
#include "sbx/model.h"
#include "sbx/runtime.h"

namespace sandcheck {
namespace {

using nlohmann::json;

const char* StatusName(sbx::ExecStatus s) {
  switch (s) {
    case sbx::ExecStatus::kOk:
      return "ok";
    case sbx::ExecStatus::kTimeout:
      return "timeout";
    case sbx::ExecStatus::kResourceExceeded:
      return "resource_exceeded";
    case sbx::ExecStatus::kToolError:
      return "tool_error";
    case sbx::ExecStatus::kSandboxUnavailable:
      return "sandbox_unavailable";
  }
  return "tool_error";
}

const char* StateName(sbx::SandboxState s) {
  switch (s) {
    case sbx::SandboxState::kRunning:
      return "RUNNING";
    case sbx::SandboxState::kCrashed:
      return "CRASHED";
    case sbx::SandboxState::kSuspended:
      return "SUSPENDED";
    case sbx::SandboxState::kDestroyed:
      return "DESTROYED";
  }
  return "CRASHED";
}

sbx::StatusOr<sbx::SandboxSpec> SpecFromRequest(const json& r) {
  sbx::SandboxSpec spec;
  try {
    spec.template_name = r.value("template", std::string("sandbox"));
    spec.backend = r.value("backend", std::string());
    const json limits = r.value("limits", json::object());
    spec.limits.cpu_millicores = limits.value("cpu_millicores", int64_t{0});
    spec.limits.memory_bytes = limits.value("memory_bytes", int64_t{0});
    spec.limits.pids = limits.value("pids", int64_t{0});
    spec.limits.disk_bytes = limits.value("disk_bytes", int64_t{0});
    spec.limits.fds = limits.value("fds", int64_t{0});
    for (const auto& rule : r.value("egress", json::object()).value("rules", json::array())) {
      sbx::EgressRule e;
      e.kind = rule.at("kind").get<std::string>();
      e.hosts = rule.at("hosts").get<std::vector<std::string>>();
      e.ports = rule.at("ports").get<std::vector<int>>();
      spec.egress.rules.push_back(std::move(e));
    }
    spec.hosts = r.value("hosts", json::object()).get<std::map<std::string, std::string>>();
    // The optional fields of the protocol's create object (LC-3, LC-4, SEL-3).
    spec.env = r.value("env", json::object()).get<std::map<std::string, std::string>>();
    spec.secrets = r.value("secrets", json::object()).get<std::map<std::string, std::string>>();
    spec.tenant = r.value("tenant", spec.tenant);
    spec.tool = r.value("tool", spec.tool);
    if (r.contains("trust")) {
      ASSIGN_OR_RETURN(spec.trust, sbx::ParseTrust(r["trust"].get<std::string>()));
    }
  } catch (const json::exception& e) {
    return sbx::InvalidArgument(fmt::format("create request: {}", e.what()));
  }
  return spec;
}

ExecAnswer AnswerFrom(const sbx::ExecResult& r) {
  ExecAnswer a;
  a.status = StatusName(r.status);
  a.state = StateName(r.state);
  a.exit_code = r.exit_code;
  a.stdout_text = r.stdout_tail;
  a.stderr_text = r.stderr_tail;
  a.seconds = r.seconds;
  const auto& s = r.stages;
  a.extra["stages"] = {
      {"allocate", s.allocate}, {"initialize", s.initialize}, {"inject_context", s.inject_context},
      {"execute", s.execute},   {"collect", s.collect},       {"destroy", s.destroy},
      {"cleanup", s.cleanup}};
  const auto& u = r.usage;
  a.extra["usage"] = {{"cpu_seconds", u.cpu_seconds},
                      {"memory_peak_bytes", u.memory_peak_bytes},
                      {"oom_kills", u.oom_kills},
                      {"pids_peak", u.pids_peak},
                      {"disk_used_bytes", u.disk_used_bytes},
                      {"throttled_seconds", u.throttled_seconds}};
  if (!r.reason.empty()) a.extra["reason"] = r.reason;
  if (!r.error_code.empty()) a.extra["error_code"] = r.error_code;
  if (!r.backend.empty()) a.extra["backend"] = r.backend;
  return a;
}

// The options of a runtime under a private state directory (NFR-5): the image cache stays the
// default runtime's, so a holder does not unpack the image again.
sbx::RuntimeOptions PrivateStateOptions(const std::string& state_dir) {
  sbx::RuntimeOptions o;
  o.cache_dir = o.state_dir + "/images";
  o.state_dir = state_dir;
  o.net_pool_floor = 0;
  return o;
}

// The sandbox holder of one NFR-5 sample, as a child process: killed with SIGKILL by the
// measurement; the destructor kills and reaps it if the measurement stopped early.
class Holder {
 public:
  static sbx::StatusOr<Holder> Start(const std::string& state_dir, int sandboxes,
                                     const std::string& backend) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return sbx::ErrnoStatus("pipe2");
    std::string exe = std::filesystem::read_symlink("/proc/self/exe");
    std::string count = std::to_string(sandboxes);
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) return sbx::ErrnoStatus("fork");
    if (pid == 0) {
      // The holder dies with us (then its sandboxes are orphans for the next reaper).
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(3);
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      const char* argv[] = {exe.c_str(),
                            "__hold-sandboxes",
                            state_dir.c_str(),
                            count.c_str(),
                            backend.empty() ? nullptr : backend.c_str(),
                            nullptr};
      ::execv(exe.c_str(), const_cast<char**>(argv));
      ::_exit(127);
    }
    ::close(fds[1]);
    return Holder(pid, fds[0]);
  }
  Holder(Holder&& o) noexcept : pid_(o.pid_), fd_(o.fd_) { o.pid_ = -1, o.fd_ = -1; }
  Holder(const Holder&) = delete;
  Holder& operator=(const Holder&) = delete;
  ~Holder() {
    Kill();
    if (fd_ >= 0) ::close(fd_);
  }

  pid_t pid() const { return pid_; }
  // Waits for "ready PID"; the output so far is in the error otherwise.
  sbx::Status WaitReady(double timeout_s) {
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < deadline && !Interrupted()) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char buf[512];
      ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
      if (out.find("ready ") != std::string::npos &&
          out.find('\n', out.find("ready ")) != std::string::npos) {
        return sbx::Status::Ok();
      }
    }
    return sbx::Internal(fmt::format("the sandbox holder (pid {}) did not get ready: {}", pid_,
                                     out.empty() ? "no output" : out.substr(0, 500)));
  }
  // SIGKILL (the orphaning) and reap; idempotent.
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int st;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

 private:
  Holder(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
  pid_t pid_ = -1;
  int fd_ = -1;
};

class ReferenceDriver final : public Target {
 public:
  ReferenceDriver(std::shared_ptr<sbx::Runtime> rt, bool warm_pool,
                  std::map<std::string, std::string> tenant_floors)
      : rt_(std::move(rt)), warm_pool_(warm_pool), tenant_floors_(std::move(tenant_floors)) {}

  std::string Kind() const override { return "reference"; }
  std::string Spec() const override { return "reference"; }

  // sbx::Runtime is thread-safe: another thread shares it.
  sbx::StatusOr<std::unique_ptr<Target>> ForThread() override {
    return std::unique_ptr<Target>(new ReferenceDriver(rt_, warm_pool_, tenant_floors_));
  }

  sbx::StatusOr<TargetInfo> Info() override {
    auto info = ParseInfo(rt_->Info());
    if (!info.ok()) return sbx::Internal("reference runtime Info(): " + info.status().message());
    if (info->Has("egress") && !info->Has("egress.log")) info->features.push_back("egress.log");
    // SEL-2: the operator's floors, as a multi-tenant front would publish them (the in-process
    // runtime is opened with one in MakeReferenceTarget).
    if (!tenant_floors_.empty()) info->raw["tenant_floors"] = tenant_floors_;
    return info;
  }

  sbx::StatusOr<std::string> Create(const json& request) override {
    ASSIGN_OR_RETURN(sbx::SandboxSpec spec, SpecFromRequest(request));
    return rt_->Create(spec);
  }

  sbx::StatusOr<ExecAnswer> Exec(const std::string& sandbox, const std::string& cmd,
                                 double timeout_s) override {
    sbx::ExecSpec e;
    e.command = cmd;
    e.timeout_s = timeout_s;
    ASSIGN_OR_RETURN(sbx::ExecResult r, rt_->Exec(sandbox, e));
    return AnswerFrom(r);
  }

  sbx::StatusOr<OpAnswer> Revert(const std::string& sandbox) override {
    ASSIGN_OR_RETURN(double s, rt_->Revert(sandbox));
    return OpAnswer{s, 0};
  }

  sbx::StatusOr<OpAnswer> Destroy(const std::string& sandbox) override {
    ASSIGN_OR_RETURN(double s, rt_->Destroy(sandbox));
    return OpAnswer{s, 0};
  }

  sbx::StatusOr<OpAnswer> Suspend(const std::string& sandbox) override {
    ASSIGN_OR_RETURN(double s, rt_->Suspend(sandbox));
    return OpAnswer{s, 0};
  }

  sbx::StatusOr<OpAnswer> Resume(const std::string& sandbox) override {
    ASSIGN_OR_RETURN(double s, rt_->Resume(sandbox));
    return OpAnswer{s, 0};
  }

  sbx::StatusOr<ExecAnswer> RunPooled(const json& request, const std::string& cmd,
                                      double timeout_s) override {
    if (!warm_pool_) {
      return sbx::Unsupported("the reference runtime was opened without its warm pool");
    }
    ASSIGN_OR_RETURN(sbx::SandboxSpec spec, SpecFromRequest(request));
    sbx::ExecRequest req;
    req.sandbox = std::move(spec);
    req.exec.command = cmd;
    req.exec.timeout_s = timeout_s;
    return AnswerFrom(rt_->Run(req));
  }

  // Runtime::Drain(): the reclaim after Destroy/Revert and the pool's refill are done.
  sbx::Status Settle() override {
    rt_->Drain();
    return sbx::Status::Ok();
  }

  // NFR-5, for real (docs/nfr.md): a runtime with its reaper sweeps a private state directory;
  // per sample a holder process opens the runtime there, creates `sandboxes` sandboxes with a
  // background process each, and is killed with SIGKILL; the clock runs from the kill until a
  // census from outside finds nothing of it left.
  sbx::StatusOr<OrphanSweep> MeasureOrphanSweep(int samples, int sandboxes,
                                                const std::string& backend) override {
    char tmpl[] = "/run/sandcheck-nfr5-XXXXXX";
    if (!::mkdtemp(tmpl)) return sbx::ErrnoStatus("mkdtemp /run/sandcheck-nfr5-XXXXXX");
    std::string dir = tmpl;
    struct RemoveDir {
      std::string d;
      ~RemoveDir() {
        std::error_code ec;
        std::filesystem::remove_all(d, ec);
      }
    } remove_dir{dir};
    sbx::RuntimeOptions so = PrivateStateOptions(dir);
    so.start_reaper = true;  // sweeps now and every reaper_interval_s (default)
    auto sweeper = sbx::Runtime::Open(so);
    if (!sweeper.ok()) return sweeper.status().WithContext("opening the sweeping runtime");
    // Whatever happens below, a holder that died half-way is an orphan too: let the sweeper
    // reclaim it (its record is in `dir`) before the directory goes.
    const std::vector<std::string> initial = ListDir(dir);
    struct AwaitSweep {
      const std::string& d;
      const std::vector<std::string>& keep;
      ~AwaitSweep() {
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
        while (std::chrono::steady_clock::now() < until) {
          std::vector<std::string> now = ListDir(d);
          if (std::all_of(now.begin(), now.end(), [&](const std::string& n) {
                return std::find(keep.begin(), keep.end(), n) != keep.end();
              })) {
            return;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
    };
    OrphanSweep out;
    out.evidence = {{"state_dir", dir},
                    {"sandboxes_per_sample", sandboxes},
                    {"backend", backend.empty() ? "the runtime's choice" : backend},
                    {"reaper_interval_s", so.reaper_interval_s},
                    {"samples", json::array()}};
    constexpr double kGiveUpS = 60;
    std::mt19937 rng(std::random_device{}());
    for (int i = 0; i < samples && !Interrupted(); ++i) {
      std::vector<std::string> before = ListDir(dir);
      AwaitSweep await_sweep{dir, initial};  // destroyed after the holder below: it waits
      ASSIGN_OR_RETURN(Holder holder, Holder::Start(dir, sandboxes, backend));
      RETURN_IF_ERROR(holder.WaitReady(60));
      OrphanCensus census = OrphanCensus::Capture(holder.pid(), dir, before);
      OrphanCensus::Counts live = census.Count();
      if (live.processes < sandboxes || live.state_dirs < 1) {
        return sbx::Internal(fmt::format(
            "the holder is ready but the census sees {} processes and {} state directories",
            live.processes, live.state_dirs));
      }
      // The sweep runs every reaper_interval_s; the holder's start-up takes about the same time
      // every sample, so without a random wait every kill would meet the same phase of the
      // sweep: wait uniformly in [0, interval) so that the samples cover the whole interval.
      std::uniform_real_distribution<double> phase(0, so.reaper_interval_s);
      double wait_s = phase(rng);
      std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
      auto t0 = std::chrono::steady_clock::now();
      holder.Kill();
      OrphanCensus::Counts left;
      double s = 0, procs_gone = -1, cgroups_gone = -1, state_gone = -1;
      while (true) {
        left = census.Count();
        s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (left.processes == 0 && procs_gone < 0) procs_gone = s;
        if (left.cgroups == 0 && cgroups_gone < 0) cgroups_gone = s;
        if (left.state_dirs == 0 && state_gone < 0) state_gone = s;
        if (left.Clean() || s > kGiveUpS || Interrupted()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      out.seconds.push_back(s);
      json sample = census.ToJson();
      sample["seconds"] = s;
      sample["random_wait_before_kill_s"] = wait_s;
      sample["processes_gone_s"] = procs_gone;
      sample["cgroup_dirs_gone_s"] = cgroups_gone;
      sample["state_dirs_gone_s"] = state_gone;
      if (!left.Clean()) {
        sample["left"] = {{"processes", left.processes},
                          {"cgroup_dirs", left.cgroups},
                          {"state_dirs", left.state_dirs}};
      }
      out.evidence["samples"].push_back(sample);
    }
    return out;
  }

  sbx::StatusOr<json> GatewayLog(const std::string& sandbox) override {
    json j = rt_->GatewayLog(sandbox);
    if (j.is_object() && j.contains("decisions")) j = j["decisions"];
    if (!j.is_array()) return sbx::Internal("reference runtime GatewayLog(): not an array");
    return j;
  }

 private:
  std::shared_ptr<sbx::Runtime> rt_;
  bool warm_pool_ = false;
  std::map<std::string, std::string> tenant_floors_;
};

}  // namespace

sbx::StatusOr<std::unique_ptr<Target>> MakeReferenceTarget(const TargetOptions& options) {
  sbx::RuntimeOptions ro;
  ro.warm_pool = options.reference_warm_pool;
  // SEL-2 (backends/tenant-floor): one tenant whose policy floor is a kernel of its own.
  ro.tenant_floors = {{"sandcheck-floored", "gvisor"}};
  auto rt = sbx::Runtime::Open(ro);
  if (!rt.ok()) return rt.status().WithContext("opening the reference runtime");
  return std::unique_ptr<Target>(new ReferenceDriver(std::shared_ptr<sbx::Runtime>(std::move(*rt)),
                                                     ro.warm_pool, ro.tenant_floors));
}

int RunSandboxHolder(const std::vector<std::string>& args) {
  if (args.size() < 2 || args.size() > 3 || args[0].empty() || args[0][0] != '/') {
    std::fprintf(stderr,
                 "usage: sandcheck __hold-sandboxes STATE_DIR COUNT [BACKEND] (internal, NFR-5)\n");
    return 2;
  }
  int count = std::atoi(args[1].c_str());
  if (count < 1 || count > 99) {
    std::fprintf(stderr, "sandcheck __hold-sandboxes: COUNT is 1..99\n");
    return 2;
  }
  auto rt = sbx::Runtime::Open(PrivateStateOptions(args[0]));
  if (!rt.ok()) {
    std::fprintf(stderr, "sandcheck __hold-sandboxes: %s\n", rt.status().ToString().c_str());
    return 3;
  }
  sbx::SandboxSpec spec;
  if (args.size() == 3) spec.backend = args[2];
  for (int i = 0; i < count; ++i) {
    auto id = (*rt)->Create(spec);
    if (!id.ok()) {
      std::fprintf(stderr, "sandcheck __hold-sandboxes: create: %s\n",
                   id.status().ToString().c_str());
      return 3;
    }
    sbx::ExecSpec e;
    e.command = "sleep 100000 > /dev/null 2>&1 &";
    e.timeout_s = 30;
    auto r = (*rt)->Exec(*id, e);
    if (!r.ok() || r->status != sbx::ExecStatus::kOk) {
      std::fprintf(stderr, "sandcheck __hold-sandboxes: exec failed\n");
      return 3;
    }
  }
  std::printf("ready %d\n", static_cast<int>(::getpid()));
  std::fflush(stdout);
  for (;;) ::pause();  // until SIGKILL
}

}  // namespace sandcheck
