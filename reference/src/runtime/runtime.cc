// Over 600 lines: the public Runtime's one implementation (its operations serialise on the
// sandbox mutex here); a split would put the locking rule in two files.
// The reference runtime: owns the shared services (cgroups, images, seccomp, egress), the
// backends, and the live sandboxes. Every operation on a sandbox is serialised by its mutex.
#include "sbx/runtime.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "backend/backend.h"
#include "host/cgroup.h"
#include "host/image.h"
#include "host/random_hex.h"
#include "host/seccomp.h"
#include "host/state_dir.h"
#include "net/egress.h"
#include "pool/warm_pool.h"
#include "runtime/executor.h"
#include "runtime/lifecycle.h"
#include "runtime/reaper.h"
#include "select/selection.h"

namespace sbx {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

std::string BinDir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

int OpenFds() {
  std::error_code ec;
  int n = 0;
  for (fs::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

long long RssBytes() {
  std::ifstream statm("/proc/self/statm");
  long long pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return -1;
  return resident * sysconf(_SC_PAGESIZE);
}

// MemAvailable of /proc/meminfo in bytes, -1 if unknown: what a front runtime's remote backend
// places by (BK-7).
long long MemAvailableBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  long long kib = 0;
  std::string unit;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return -1;
}

struct Live {
  std::mutex mu;
  std::unique_ptr<backend::Sandbox> sandbox;
  SandboxInfo info;
};

class RuntimeImpl final : public Runtime {
 public:
  ~RuntimeImpl() override {
    {
      std::lock_guard lock(reaper_mu_);
      reaper_stop_ = true;
    }
    reaper_cv_.notify_all();
    if (reaper_.joinable()) reaper_.join();
    if (pool_tick_.joinable()) pool_tick_.join();
    std::map<std::string, std::shared_ptr<Live>> all;
    {
      std::lock_guard lock(mu_);
      all.swap(live_);
    }
    for (auto& [id, l] : all) {
      std::lock_guard lock(l->mu);
      l->sandbox->Destroy(nullptr);
      l->sandbox.reset();
    }
    // Background work references the backends and services: finish it before they go. (No
    // executor: Init() failed before it made one, and this runtime is being thrown away.)
    if (executor_) executor_->Drain();
    {
      std::lock_guard lock(pools_mu_);
      for (auto& [key, p] : pools_) {
        for (auto& sb : p->Drain()) sb->Destroy(nullptr);
      }
      pools_.clear();
    }
    executor_.reset();
    backends_.clear();
    egress_.reset();
    cgroups_.reset();
    std::error_code ec;
    fs::remove_all(state_dir_, ec);
    // Every sandbox is gone: so are their snapshots (<snapshot_dir>/<runtime id>, which the
    // gvisor backend's golden checkpoints create for every persistent sandbox).
    if (!ctx_.snapshot_dir.empty()) fs::remove_all(ctx_.snapshot_dir, ec);
  }

  Status Init(const RuntimeOptions& o) {
    if (geteuid() != 0) {
      return Status(Code::kPermissionDenied,
                    "the reference runtime needs root: it creates namespaces, cgroups and mounts "
                    "(run as root, e.g. with sudo)");
    }
    runtime_id_ = host::NewRuntimeId();
    std::error_code ec;
    fs::create_directories(o.state_dir, ec);
    if (ec) return Status(Code::kPermissionDenied, fmt::format("state dir {}: {}", o.state_dir, ec.message()));
    state_dir_ = o.state_dir + "/" + runtime_id_;
    if (mkdir(state_dir_.c_str(), 0700) != 0) return ErrnoStatus("mkdir " + state_dir_);
    // Written whole, then renamed into place: another runtime's reaper (a second sandboxd on
    // this host) must never read a half-written owner, take this live runtime for a dead one
    // and sweep its directory and cgroups (it did, in one start of two out of ten).
    RETURN_IF_ERROR(host::WriteOwnerRecord(state_dir_));
    state_root_ = o.state_dir;
    snapshot_root_ = o.snapshot_dir;
    std::string bin = BinDir();
    std::string store = o.image_store.empty() ? bin + "/../images" : o.image_store;
    std::string cache = o.cache_dir.empty() ? o.state_dir + "/images" : o.cache_dir;
    images_ = std::make_unique<host::ImageStore>(store, cache);
    ASSIGN_OR_RETURN(cgroups_, host::CgroupManager::Open(runtime_id_));
    // FAIL-6: the reaper adopts exactly these (our own cgroup may differ per hierarchy and per
    // process, so a reaper must not re-derive it from its own).
    RETURN_IF_ERROR(host::WriteOwnCgroups(state_dir_, cgroups_->OwnPaths()));
    ASSIGN_OR_RETURN(seccomp_, host::SeccompFilter::Compile());
    net_pool_floor_ = o.net_pool_floor;
    if (o.warm_pool) {
      pool_options_ = pool::PoolOptions{.floor = o.pool_floor,
                                        .ceiling = o.pool_ceiling,
                                        .owned_per_key = o.pool_reuse_per_tool,
                                        .owned_total = o.pool_reuse_total};
      pool_reuse_ = o.pool_reuse;
    }
    for (const auto& [tenant, floor] : o.tenant_floors) {
      auto kind = selection::ParseBackend(floor);
      if (!kind.ok()) return InvalidArgument(fmt::format("tenant '{}' floor: {}", tenant, kind.status().message()));
      tenant_floors_[tenant] = *kind;
    }

    ctx_.runtime_id = runtime_id_;
    ctx_.state_dir = state_dir_;
    ctx_.cache_dir = cache;
    ctx_.init_path = o.init_path;
    if (ctx_.init_path.empty()) {
      ctx_.init_path = bin + "/sbx-init";
      if (access(ctx_.init_path.c_str(), X_OK) != 0) ctx_.init_path = bin + "/../bin/sbx-init";
    }
    ctx_.cgroups = cgroups_.get();
    ctx_.images = images_.get();
    ctx_.seccomp = &*seccomp_;
    ctx_.egress = [this]() -> StatusOr<net::EgressService*> { return Egress(); };
    background_threads_ = o.background_threads;
    reclaim_backlog_ = static_cast<size_t>(o.reclaim_backlog);
    executor_ = std::make_unique<Executor>(background_threads_);
    ctx_.background = [this](std::function<void()> task) { Background(std::move(task)); };
    ctx_.snapshot_dir = o.snapshot_dir.empty() ? "" : o.snapshot_dir + "/" + runtime_id_;
    ctx_.remote_workers = o.remote_workers;
    ctx_.remote_call_timeout_s = o.remote_call_timeout_s;
    if (o.start_reaper) {
      // NFR-5: sweep orphans now, then every reaper_interval_s.
      ASSIGN_OR_RETURN(ReapReport first, ReapOrphans(state_root_, snapshot_root_, runtime_id_));
      reaper_pending_ = first.pending > 0;
      reaper_interval_ = o.reaper_interval_s;
      reaper_ = std::thread([this] { ReaperLoop(); });
    }
    for (auto& b : backend::MakeBackends(ctx_)) {
      Status probe = b->Probe();
      probes_[b->name()] = probe;
      backends_[b->name()] = std::move(b);
    }
    // POOL-6 both ways: once a second every pool is brought to what demand asks now, so a pool
    // that grew under a burst shrinks back (with its sandboxes' descriptors, cgroups and
    // namespaces) once the burst is over, not only at the next request.
    if (pool_options_) pool_tick_ = std::thread([this] { PoolTickLoop(); });
    return Status::Ok();
  }

  nlohmann::json Info() const override {
    nlohmann::json backends = nlohmann::json::array(), unsupported = nlohmann::json::object();
    nlohmann::json implementations = nlohmann::json::object();
    std::set<std::string> features;
    nlohmann::json backend_features = nlohmann::json::object();  // where backends differ
    for (const auto& [name, b] : backends_) {
      const Status& p = probes_.at(name);
      if (p.ok()) {
        backends.push_back(name);
        for (auto& f : b->Features()) features.insert(f);
        std::vector<std::string> own = b->Features();
        std::sort(own.begin(), own.end());
        backend_features[name] = own;
        if (std::string impl = b->Implementation(); !impl.empty()) implementations[name] = impl;
      } else {
        unsupported[name] = p.message();
      }
    }
    for (selection::BackendKind kind : selection::kAllBackends) {
      std::string name(selection::BackendName(kind));
      if (!backends_.contains(name)) {
        unsupported[name] =
            kind == selection::BackendKind::kKubernetes
                ? "no Kubernetes API server to run Pods on (none can run on this machine): the "
                  "manifests are made (`sandboxctl manifest kubernetes`) and checked against the "
                  "API types offline only (docs/kubernetes.md)"
                : "not built into this runtime (docs/backends.md lists the backends it has)";
      }
    }
    return {{"name", "sandcheck-reference"},
            {"version", "0.1.0"},
            {"backends", backends},
            {"features", features},
            {"backend_features", backend_features},
            {"unsupported", unsupported},
            {"implementations", implementations},
            {"cgroup", cgroups_->version() == host::CgroupVersion::kV1 ? "v1" : "v2"},
            {"seccomp_denied", seccomp_->denied()},
            {"capacity", Capacity()}};
  }

  // The bounds on what grows with load (issue 17) and where each stands now.
  nlohmann::json Capacity() const {
    int fresh = 0, reused = 0;
    {
      std::lock_guard lock(pools_mu_);
      for (const auto& [key, p] : pools_) {
        fresh += p->fresh_count();
        reused += p->owned_count();
      }
    }
    size_t live;
    {
      std::lock_guard lock(mu_);
      live = live_.size();
    }
    nlohmann::json pool = nullptr;
    if (pool_options_) {
      pool = {{"floor", pool_options_->floor},       {"ceiling", pool_options_->ceiling},
              {"fresh", fresh},                      {"reuse_per_tool", pool_options_->owned_per_key},
              {"reuse_total", pool_options_->owned_total}, {"reusable", reused}};
    }
    return {{"background_threads", background_threads_},
            {"reclaim_backlog", reclaim_backlog_},
            {"background_outstanding", executor_->outstanding()},
            {"reclaimed_on_caller", executor_->refused()},
            {"pool", pool},
            {"persistent_sandboxes", live},
            {"open_fds", OpenFds()},
            {"rss_bytes", RssBytes()},
            {"memory_available_bytes", MemAvailableBytes()}};
  }

  ExecResult Run(const ExecRequest& req) override {
    if (pool_options_) return RunPooled(req);
    auto name = SelectFor(req.sandbox);
    if (!name.ok()) return Unavailable(name.status(), req.sandbox.backend);
    auto it = backends_.find(*name);
    if (it == backends_.end()) {
      return Unavailable(Status(Code::kSandboxUnavailable, fmt::format("unknown backend '{}'", *name)), *name);
    }
    const Status& probe = probes_.at(*name);
    if (!probe.ok()) {
      return Unavailable(Status(Code::kSandboxUnavailable,
                                fmt::format("backend '{}' unsupported on this host: {}", *name, probe.message())),
                         *name);
    }
    return RunOneShot(*it->second, NewId(), req);
  }

  // POOL-2: take a warm sandbox, inject context, execute; return it per POOL-3 in the background.
  ExecResult RunPooled(const ExecRequest& req) {
    auto t0 = Clock::now();
    ExecResult r;
    auto pool = PoolFor(req.sandbox);
    if (!pool.ok()) return Unavailable(pool.status(), req.sandbox.backend);
    auto lease = (*pool)->Take(req.sandbox.tenant, req.sandbox.tool);
    if (!lease.ok()) return Unavailable(lease.status(), req.sandbox.backend);
    // std::function needs a copyable callable: the sandbox travels in a shared holder.
    auto holder = std::make_shared<std::unique_ptr<backend::Sandbox>>(std::move(lease->item));
    backend::Sandbox* sb = holder->get();
    Status limits = sb->ApplyLimits(req.sandbox.limits);
    if (!limits.ok()) {
      sb->Kill();
      Background([holder] { (*holder)->Destroy(nullptr); });
      ScheduleRefill(*pool);
      return Unavailable(limits, req.sandbox.backend);
    }
    double allocate = std::chrono::duration<double>(Clock::now() - t0).count();
    ExecSpec exec = req.exec;
    for (const auto& [k, v] : req.sandbox.env) exec.env.emplace(k, v);
    for (const auto& [k, v] : req.sandbox.secrets) exec.secrets[k] = v;
    auto res = sb->Exec(exec);
    for (auto& [k, v] : exec.secrets) explicit_bzero(v.data(), v.size());
    if (res.ok()) {
      r = std::move(res).value();
    } else if (res.status().code() == Code::kSandboxUnavailable) {
      // The host could not give the command what it needs (descriptors, memory, processes):
      // nothing of the tool ran, one cause gets one code (issue 17).
      r = Unavailable(res.status(), req.sandbox.backend);
    } else {
      r.status = ExecStatus::kToolError;
      r.state = SandboxState::kCrashed;
      r.reason = res.status().message();
    }
    r.stages.allocate = allocate;
    r.stages.initialize = lease->warm ? 0 : -1;
    // POOL-3, POOL-5: untrusted is discarded, trusted is reset and kept for the same tenant +
    // tool; a crashed one is discarded. All of it off the caller's path (NFR-4).
    bool trusted = req.sandbox.trust == Trust::kFirstParty || req.sandbox.trust == Trust::kVerified;
    // LC-9: ephemeral unless reuse is on (LC-10); a crashed sandbox is never reused.
    trusted = trusted && pool_reuse_ && r.state != SandboxState::kCrashed;
    auto t_destroy = Clock::now();
    sb->Kill();
    auto p = *pool;
    std::string tenant = req.sandbox.tenant, tool = req.sandbox.tool;
    r.stages.destroy = std::chrono::duration<double>(Clock::now() - t_destroy).count();
    // Reclaim in the background; when the background is a full backlog behind, here (the
    // caller then pays for it, in `cleanup`, rather than the host in descriptors and memory).
    auto t_cleanup = Clock::now();
    bool posted = Background([p, holder, tenant, tool, trusted] {
      auto discard = p->Return(std::move(*holder), tenant, tool, trusted);
      if (discard) discard->Destroy(nullptr);
    });
    r.stages.cleanup = posted ? 0 : std::chrono::duration<double>(Clock::now() - t_cleanup).count();
    ScheduleRefill(p);
    return r;
  }

  StatusOr<std::string> Create(const SandboxSpec& spec) override {
    std::string id = NewId();
    StageTimings t;
    ASSIGN_OR_RETURN(auto sb, CreateSandbox(id, spec, &t, backend::CreateMode::kPersistent));
    auto l = std::make_shared<Live>();
    l->info = {id, BackendName(spec), spec.tenant, spec.tool, spec.template_name, SandboxState::kRunning,
               std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()};
    l->sandbox = std::move(sb);
    std::lock_guard lock(mu_);
    live_[id] = l;
    return id;
  }

  StatusOr<ExecResult> Exec(const std::string& id, const ExecSpec& exec) override {
    ASSIGN_OR_RETURN(auto l, Find(id));
    std::lock_guard lock(l->mu);
    return l->sandbox->Exec(exec);
  }

  StatusOr<double> Revert(const std::string& id) override {
    ASSIGN_OR_RETURN(auto l, Find(id));
    std::lock_guard lock(l->mu);
    return l->sandbox->Revert();
  }
  StatusOr<double> Suspend(const std::string& id) override {
    ASSIGN_OR_RETURN(auto l, Find(id));
    std::lock_guard lock(l->mu);
    return l->sandbox->Suspend();
  }
  StatusOr<double> Resume(const std::string& id) override {
    ASSIGN_OR_RETURN(auto l, Find(id));
    std::lock_guard lock(l->mu);
    return l->sandbox->Resume();
  }
  StatusOr<double> Destroy(const std::string& id) override {
    std::shared_ptr<Live> l;
    {
      std::lock_guard lock(mu_);
      auto it = live_.find(id);
      if (it == live_.end()) return NotFound(fmt::format("no sandbox '{}'", id));
      l = it->second;
      live_.erase(it);
    }
    // LC-7 on the caller's path: every process gets SIGKILL now; the reclaim (LC-8) runs in the
    // background (NFR-4 counts the caller's part; Drain() waits for the rest).
    auto t0 = Clock::now();
    {
      std::lock_guard lock(l->mu);
      l->sandbox->Kill();
    }
    Background([l] {
      std::lock_guard lock(l->mu);
      l->sandbox->Destroy(nullptr);
    });
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  Status PutFile(const std::string& id, const std::string& path, const std::string& content,
                 int mode) override {
    ASSIGN_OR_RETURN(auto l, Find(id));
    std::lock_guard lock(l->mu);
    return l->sandbox->PutFile(path, content, mode);
  }
  std::vector<SandboxInfo> List() const override {
    std::vector<SandboxInfo> out;
    std::lock_guard lock(mu_);
    for (const auto& [id, l] : live_) {
      SandboxInfo i = l->info;
      std::unique_lock sl(l->mu, std::try_to_lock);
      if (sl.owns_lock()) i.state = l->sandbox->state();
      out.push_back(i);
    }
    return out;
  }

  // The background work (reclaim, refills, spares), then each idle sandbox's own readiness
  // (its next command's pre-spawned shell has started: Sandbox::Settle). A sandbox busy with a
  // command is not waited for.
  void Drain() override {
    executor_->Drain();
    std::vector<std::shared_ptr<Live>> live;
    {
      std::lock_guard lock(mu_);
      for (const auto& [id, l] : live_) live.push_back(l);
    }
    for (const auto& l : live) {
      std::unique_lock sl(l->mu, std::try_to_lock);
      if (sl.owns_lock()) l->sandbox->Settle();
    }
  }

  nlohmann::json GatewayLog(const std::string& id) const override {
    nlohmann::json out = nlohmann::json::array();
    std::shared_ptr<Live> l;
    {
      std::lock_guard lock(mu_);
      auto it = live_.find(id);
      if (it == live_.end()) return out;
      l = it->second;
    }
    std::vector<std::string> net_ids;
    {
      std::lock_guard sl(l->mu);
      if (auto foreign = l->sandbox->ForeignGatewayLog()) {
        for (auto& d : *foreign) {
          if (d.is_object()) d["sandbox"] = id;  // the worker's ID is not the caller's
        }
        return *foreign;
      }
      net_ids = l->sandbox->NetworkIds();
    }
    std::lock_guard lock(egress_mu_);
    if (!egress_) return out;
    for (const std::string& net_id : net_ids) {
      for (const auto& d : egress_->Decisions(net_id)) {
        out.push_back({{"time", d.unix_time}, {"sandbox", id}, {"network", net_id},
                       {"protocol", d.protocol}, {"destination", d.destination}, {"rule", d.rule},
                       {"verdict", d.verdict}, {"reason", d.reason}});
      }
    }
    return out;
  }

 private:
  std::string NewId() { return "sb" + host::RandomHex(6); }

  // SEL-1..SEL-6: the backend comes from the pure selection function over the manifest
  // preference, the tenant's floor, the trust class and what this worker probed it can run.
  StatusOr<std::string> SelectFor(const SandboxSpec& spec) const {
    selection::Input in;
    if (!spec.backend.empty()) {
      auto pref = selection::ParseBackend(spec.backend);
      if (!pref.ok()) return Status(Code::kInvalidArgument, pref.status().message());
      in.preference = *pref;
    }
    auto floor = tenant_floors_.find(spec.tenant);
    if (floor != tenant_floors_.end()) in.tenant.floor = floor->second;
    in.trust = spec.trust;
    for (const auto& [name, probe] : probes_) {
      auto kind = selection::ParseBackend(name);
      if (probe.ok() && kind.ok()) in.worker.Add(*kind);
    }
    auto d = selection::SelectBackend(in);
    if (!d.ok()) return d.status();
    return std::string(selection::BackendName(d->backend));
  }

  std::string BackendName(const SandboxSpec& spec) const {
    auto s = SelectFor(spec);
    return s.ok() ? *s : (spec.backend.empty() ? "native" : spec.backend);
  }

  StatusOr<std::unique_ptr<backend::Sandbox>> CreateSandbox(const std::string& id, const SandboxSpec& spec,
                                                             StageTimings* t, backend::CreateMode mode) {
    ASSIGN_OR_RETURN(std::string name, SelectFor(spec));
    auto it = backends_.find(name);
    if (it == backends_.end()) {
      return Status(Code::kSandboxUnavailable, fmt::format("unknown backend '{}'", name));
    }
    const Status& probe = probes_.at(name);
    if (!probe.ok()) {
      return Status(Code::kSandboxUnavailable,
                    fmt::format("backend '{}' unsupported on this host: {}", name, probe.message()));
    }
    return it->second->Create(id, spec, t, mode);
  }

  // invalid_argument (e.g. an unknown backend name) is still "no sandbox": the code says why.
  static ExecResult Unavailable(const Status& s, const std::string& backend) {
    return UnavailableResult(s, backend.empty() ? "native" : backend);
  }

  using WarmSandboxPool = pool::WarmPool<backend::Sandbox>;

  // POOL-1: one pool per (backend, image, tenant class); what is fixed at creation and differs
  // between requests (disk quota, egress policy and service directory) is part of the key too.
  StatusOr<std::shared_ptr<WarmSandboxPool>> PoolFor(const SandboxSpec& spec) {
    bool trusted = spec.trust == Trust::kFirstParty || spec.trust == Trust::kVerified;
    SandboxSpec base;
    base.backend = BackendName(spec);
    base.template_name = spec.template_name;
    base.trust = spec.trust;
    base.limits.disk_bytes = spec.limits.disk_bytes;
    base.egress = spec.egress;
    base.hosts = spec.hosts;
    nlohmann::json key = {{"backend", base.backend}, {"image", base.template_name},
                          {"tenant_class", trusted ? "trusted" : "untrusted"},
                          {"disk", base.limits.disk_bytes}, {"egress", base.egress}, {"hosts", base.hosts}};
    std::lock_guard lock(pools_mu_);
    auto& slot = pools_[key.dump()];
    if (!slot) {
      // A pooled sandbox is ready when its next command's shell has started: on the refill's
      // background thread, or the pool's return path (POOL-8).
      auto factory = [this, base]() -> StatusOr<std::unique_ptr<backend::Sandbox>> {
        auto sb = CreateSandbox(NewId(), base, nullptr, backend::CreateMode::kPooled);
        if (sb.ok()) (*sb)->Settle();
        return sb;
      };
      auto resetter = [](backend::Sandbox& sb) {
        if (!sb.Reset().ok()) return false;
        sb.Settle();
        return true;
      };
      slot = std::make_shared<WarmSandboxPool>(*pool_options_, factory, resetter);
      ScheduleRefill(slot);
    }
    return slot;
  }

  // Background work, bounded (issue 17): posted while fewer than reclaim_backlog_ tasks wait
  // or run, else run here on the caller's thread. True = posted.
  bool Background(std::function<void()> task) {
    if (executor_->TryPost(task, reclaim_backlog_)) return true;
    task();
    return false;
  }

  // POOL-6 refill, at most one per pool scheduled or running at a time (WarmPool::BeginRefill);
  // its surplus is reclaimed like any other sandbox.
  void ScheduleRefill(const std::shared_ptr<WarmSandboxPool>& p) {
    if (!p->BeginRefill()) return;
    executor_->Post([this, p] {
      do {
        for (auto& extra : p->Refill()) extra->Destroy(nullptr);
      } while (p->EndRefill());
    });
  }

  StatusOr<std::shared_ptr<Live>> Find(const std::string& id) {
    std::lock_guard lock(mu_);
    auto it = live_.find(id);
    if (it == live_.end()) return NotFound(fmt::format("no sandbox '{}'", id));
    return it->second;
  }

  StatusOr<net::EgressService*> Egress() {
    std::lock_guard lock(egress_mu_);
    if (!egress_) {
      net::EgressOptions eo;
      eo.runtime_id = runtime_id_;
      eo.pool_floor = net_pool_floor_;
      auto svc = net::EgressService::Start(eo);
      if (!svc.ok()) {
        return Status(Code::kSandboxUnavailable, "egress gateway: " + svc.status().message());
      }
      egress_ = std::move(svc).value();
    }
    return egress_.get();
  }

  // Sweeps every reaper_interval_ (NFR-5), and every 50 ms while a dead runtime's sandboxes
  // are still dying (their namespaces tear down asynchronously in the kernel).
  void ReaperLoop() {
    std::unique_lock lock(reaper_mu_);
    for (;;) {
      double wait = reaper_pending_ ? 0.05 : reaper_interval_;
      if (reaper_cv_.wait_for(lock, std::chrono::duration<double>(wait), [&] { return reaper_stop_; })) return;
      lock.unlock();
      auto report = ReapOrphans(state_root_, snapshot_root_, runtime_id_);
      lock.lock();
      reaper_pending_ = report.ok() && report->pending > 0;
    }
  }

  void PoolTickLoop() {
    std::unique_lock lock(reaper_mu_);
    while (!reaper_cv_.wait_for(lock, std::chrono::seconds(1), [&] { return reaper_stop_; })) {
      lock.unlock();
      std::vector<std::shared_ptr<WarmSandboxPool>> pools;
      {
        std::lock_guard pl(pools_mu_);
        for (auto& [key, p] : pools_) pools.push_back(p);
      }
      for (auto& p : pools) ScheduleRefill(p);
      lock.lock();
    }
  }

  std::string runtime_id_, state_dir_, state_root_, snapshot_root_;
  std::unique_ptr<Executor> executor_;
  int background_threads_ = 2;
  size_t reclaim_backlog_ = 16;
  std::thread reaper_, pool_tick_;
  std::mutex reaper_mu_;
  std::condition_variable reaper_cv_;
  bool reaper_stop_ = false;
  double reaper_interval_ = 1.0;
  bool reaper_pending_ = false;
  int net_pool_floor_ = 2;
  std::unique_ptr<host::ImageStore> images_;
  std::unique_ptr<host::CgroupManager> cgroups_;
  std::optional<host::SeccompFilter> seccomp_;
  backend::BackendContext ctx_;
  std::map<std::string, std::unique_ptr<backend::Backend>> backends_;
  std::map<std::string, Status> probes_;
  mutable std::mutex egress_mu_;
  std::unique_ptr<net::EgressService> egress_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Live>> live_;
  std::optional<pool::PoolOptions> pool_options_;
  bool pool_reuse_ = false;
  std::map<std::string, selection::BackendKind> tenant_floors_;
  mutable std::mutex pools_mu_;
  std::map<std::string, std::shared_ptr<WarmSandboxPool>> pools_;
};

}  // namespace

StatusOr<std::unique_ptr<Runtime>> Runtime::Open(const RuntimeOptions& options) {
  auto rt = std::make_unique<RuntimeImpl>();
  RETURN_IF_ERROR(rt->Init(options));
  return std::unique_ptr<Runtime>(std::move(rt));
}

}  // namespace sbx
