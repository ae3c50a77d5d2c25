// The remote backend (BK-7; docs/backends.md "remote"): a pool of sandboxd workers. Each
// sandbox is placed on one worker (the least loaded by live sandboxes, then the one with the
// most free memory, from GET /v1/info), keeps that placement, and every lifecycle call is
// forwarded to it with the caller's tenant's token on that worker. The worker chooses its own
// backend from the forwarded trust and its tenant floors (never weaker: its selection), its
// gateway enforces the forwarded egress policy.
//
// A worker that stops answering: every call is bounded (RuntimeOptions::remote_call_timeout_s;
// an exec by its timeout plus that), so its sandboxes answer sandbox_unavailable naming the
// worker and the reason, never a hang, and new sandboxes go to the other workers until it
// answers again.
//
// Thread-safety: RemoteBackend is thread-safe (one mutex per worker for its load figures); a
// RemoteSandbox is used by one caller at a time, as every Sandbox.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "backend/backend.h"
#include "client/remote_runtime.h"
#include "sbx/runtime.h"

namespace sbx::backend {
namespace {

using nlohmann::json;

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A failed forwarded call that may mean the worker is silent (the HTTP client's transport
// failures are these codes; a worker's API may answer them too, so the worker is asked for its
// info before it is called down).
bool MaybeSilent(const Status& s) {
  return s.code() == Code::kSandboxUnavailable || s.code() == Code::kTimeout;
}

// A worker called down is asked again after this long (a silent one costs each caller the call
// bound at most once per interval). An answering worker is asked for its load at every
// placement: a cached figure placed a sandbox on a worker that another client had just filled.
constexpr double kRetryDownAfterS = 5;

class Worker {
 public:
  Worker(RemoteWorker cfg, double call_timeout_s)
      : cfg_(std::move(cfg)), call_timeout_s_(call_timeout_s) {}

  const std::string& name() const { return cfg_.name; }
  const std::string& url() const { return cfg_.url; }
  bool Serves(const std::string& tenant) const { return cfg_.tokens.contains(tenant); }

  // The worker's API as `tenant` (opened once per tenant, without a probe).
  StatusOr<Runtime*> Client(const std::string& tenant) {
    std::lock_guard lock(mu_);
    auto it = clients_.find(tenant);
    if (it != clients_.end()) return it->second.get();
    auto tok = cfg_.tokens.find(tenant);
    if (tok == cfg_.tokens.end()) {
      return Status(Code::kPermissionDenied,
                    fmt::format("worker {} has no token for tenant '{}'", cfg_.name, tenant));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<Runtime> rt,
                     client::OpenRemoteRuntime(
                         cfg_.url, tok->second, /*probe=*/false,
                         {.call_timeout_s = call_timeout_s_, .exec_slack_s = call_timeout_s_},
                         {.ca_file = cfg_.ca_file,
                          .pin_sha256 = cfg_.pin_sha256,
                          .client_cert_file = cfg_.client_cert_file,
                          .client_key_file = cfg_.client_key_file}));
    Runtime* raw = rt.get();
    clients_[tenant] = std::move(rt);
    return raw;
  }

  // GET /v1/info as any tenant it serves: refreshes the load figures; the error if it is
  // silent. `force`: ask now, whatever the age of the figures or of its silence.
  Status Refresh(bool force = false) {
    if (cfg_.tokens.empty()) return InvalidArgument(fmt::format("worker {}: no tokens", name()));
    if (!force) {
      std::lock_guard lock(mu_);
      double now = NowSeconds();
      if (!down_reason_.empty() && now - down_since_ < kRetryDownAfterS)
        return Status(Code::kSandboxUnavailable, down_reason_);
    }
    auto rt = Client(cfg_.tokens.begin()->first);
    if (!rt.ok()) return rt.status();
    json info = (*rt)->Info();
    std::lock_guard lock(mu_);
    if (info.contains("error")) {
      std::string msg = info["error"].value("message", "no answer");
      MarkDownLocked(msg);
      return Status(Code::kSandboxUnavailable, msg);
    }
    info_ = info;
    const json cap = info.value("capacity", json::object());
    if (cap.is_object()) {
      reported_live_ = cap.value("persistent_sandboxes", -1);
      free_memory_ = cap.value("memory_available_bytes", -1LL);
    }
    down_reason_.clear();
    return Status::Ok();
  }

  void MarkDown(const std::string& why) {
    std::lock_guard lock(mu_);
    MarkDownLocked(why);
  }
  void MarkUp() {
    std::lock_guard lock(mu_);
    down_reason_.clear();
  }
  std::string DownReason() const {
    std::lock_guard lock(mu_);
    return down_reason_;
  }
  json Info() const {
    std::lock_guard lock(mu_);
    return info_;
  }

  void Placed(int delta) {
    std::lock_guard lock(mu_);
    placed_ += delta;
  }

  // Placement order: up before down, then fewer live sandboxes (the worker's own figure when it
  // gave one, never below what this runtime placed there), then more free memory, then the
  // configured order.
  struct Load {
    bool down;
    long long live, free_memory;
  };
  Load CurrentLoad() const {
    std::lock_guard lock(mu_);
    return {!down_reason_.empty(), std::max<long long>(reported_live_, placed_), free_memory_};
  }

 private:
  void MarkDownLocked(const std::string& why) {
    if (down_reason_.empty()) down_since_ = NowSeconds();
    down_reason_ = why;
  }

  RemoteWorker cfg_;
  double call_timeout_s_;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Runtime>> clients_;
  json info_ = json::object();
  std::string down_reason_;
  double down_since_ = 0;
  long long reported_live_ = -1, free_memory_ = -1;
  int placed_ = 0;
};

Status Unreachable(const Worker& w, const Status& s) {
  return Status(Code::kSandboxUnavailable, fmt::format("remote worker {} ({}) is not answering: {}",
                                                       w.name(), w.url(), s.message()));
}

class RemoteSandbox final : public Sandbox {
 public:
  RemoteSandbox(std::string id, std::shared_ptr<Worker> worker, Runtime* client,
                std::string remote_id)
      : id_(std::move(id)),
        worker_(std::move(worker)),
        client_(client),
        remote_id_(std::move(remote_id)) {
    worker_->Placed(+1);
  }
  ~RemoteSandbox() override {
    if (!destroyed_) Destroy(nullptr);
  }

  const std::string& id() const override { return id_; }
  SandboxState state() const override { return state_; }

  StatusOr<ExecResult> Exec(const ExecSpec& exec) override {
    if (!lost_.empty()) return Status(Code::kSandboxUnavailable, lost_);
    auto r = client_->Exec(remote_id_, exec);
    if (!r.ok()) return Forwarded(r.status());
    worker_->MarkUp();
    state_ = r->state;
    r->sandbox_id = id_;    // the caller's ID, not the worker's
    r->backend = "remote";  // what the caller asked for; the worker chose its own below it
    return r;
  }
  StatusOr<double> Revert() override { return Seconds(client_->Revert(remote_id_)); }
  StatusOr<double> Suspend() override {
    auto r = Seconds(client_->Suspend(remote_id_));
    if (r.ok()) state_ = SandboxState::kSuspended;
    return r;
  }
  StatusOr<double> Resume() override {
    auto r = Seconds(client_->Resume(remote_id_));
    if (r.ok()) state_ = SandboxState::kRunning;
    return r;
  }
  Status PutFile(const std::string& path, const std::string& content, int mode) override {
    if (!lost_.empty()) return Status(Code::kSandboxUnavailable, lost_);
    Status s = client_->PutFile(remote_id_, path, content, mode);
    return s.ok() ? s : Forwarded(s);
  }
  // The worker's destroy answers once nothing of the sandbox can run (NFR-4's caller part), so
  // it is forwarded here, on the caller's path, not left to the background Destroy().
  void Kill() override { ForwardDestroy(nullptr); }
  void Destroy(StageTimings* timings) override { ForwardDestroy(timings); }
  std::vector<std::string> NetworkIds() const override { return {}; }
  std::optional<json> ForeignGatewayLog() const override { return client_->GatewayLog(remote_id_); }

 private:
  void ForwardDestroy(StageTimings* timings) {
    if (destroyed_) return;
    destroyed_ = true;
    worker_->Placed(-1);
    // A silent worker's sandboxes are its own reaper's (another runtime on its host sweeps
    // them as orphans, or it does when it runs again); the bound keeps this caller from
    // waiting for it.
    auto r = client_->Destroy(remote_id_);
    if (timings && r.ok()) timings->destroy = *r;
    state_ = SandboxState::kDestroyed;
  }

  StatusOr<double> Seconds(StatusOr<double> r) {
    if (!lost_.empty()) return Status(Code::kSandboxUnavailable, lost_);
    if (!r.ok()) return Forwarded(r.status());
    return r;
  }
  // A failed forwarded call: the worker's own answer as it is; silence ends the sandbox.
  Status Forwarded(const Status& s) {
    if (!MaybeSilent(s) || worker_->Refresh(/*force=*/true).ok()) return s;
    worker_->MarkDown(s.message());
    lost_ = fmt::format("sandbox {} was on remote worker {} ({}), which stopped answering: {}", id_,
                        worker_->name(), worker_->url(), s.message());
    state_ = SandboxState::kCrashed;
    return Status(Code::kSandboxUnavailable, lost_);
  }

  std::string id_;
  std::shared_ptr<Worker> worker_;
  Runtime* client_;  // owned by worker_
  std::string remote_id_;
  SandboxState state_ = SandboxState::kRunning;
  std::string lost_;  // non-empty: the worker stopped answering, and what it said last
  bool destroyed_ = false;
};

class RemoteBackend final : public Backend {
 public:
  explicit RemoteBackend(const BackendContext& ctx) {
    for (const RemoteWorker& w : ctx.remote_workers)
      workers_.push_back(std::make_shared<Worker>(w, ctx.remote_call_timeout_s));
  }

  std::string name() const override { return "remote"; }

  Status Probe() override {
    if (workers_.empty()) {
      return Unsupported(
          "no remote workers configured (sandboxd config \"remote_workers\", docs/backends.md)");
    }
    std::vector<std::string> silent;
    int up = 0;
    for (auto& w : workers_) {
      Status s = w->Refresh(/*force=*/true);
      if (s.ok())
        ++up;
      else
        silent.push_back(fmt::format("{}: {}", w->name(), s.message()));
    }
    if (up == 0) {
      return Status(Code::kSandboxUnavailable,
                    fmt::format("no remote worker answers ({})", fmt::join(silent, "; ")));
    }
    return Status::Ok();
  }

  std::string Implementation() const override {
    std::vector<std::string> parts;
    for (const auto& w : workers_) {
      std::string down = w->DownReason();
      parts.push_back(fmt::format("{} {} {}", w->name(), w->url(),
                                  down.empty() ? "up" : "down (" + down + ")"));
    }
    return fmt::format("{} sandboxd worker{}: {}", workers_.size(), workers_.size() == 1 ? "" : "s",
                       fmt::join(parts, ", "));
  }

  // What every answering worker offers (a feature one of them lacks could not be promised).
  std::vector<std::string> Features() const override {
    std::optional<std::set<std::string>> common;
    for (const auto& w : workers_) {
      json info = w->Info();
      if (!info.contains("features") || !info["features"].is_array()) continue;
      std::set<std::string> f;
      for (const auto& x : info["features"])
        if (x.is_string()) f.insert(x.get<std::string>());
      if (!common) {
        common = std::move(f);
      } else {
        std::set<std::string> both;
        std::set_intersection(common->begin(), common->end(), f.begin(), f.end(),
                              std::inserter(both, both.begin()));
        common = std::move(both);
      }
    }
    return common ? std::vector<std::string>(common->begin(), common->end())
                  : std::vector<std::string>{};
  }

  StatusOr<std::unique_ptr<Sandbox>> Create(const std::string& id, const SandboxSpec& spec,
                                            StageTimings* timings, CreateMode) override {
    double t0 = NowSeconds();
    // The worker picks its backend from the trust class and its tenant floors.
    SandboxSpec forwarded = spec;
    forwarded.backend.clear();
    std::vector<std::shared_ptr<Worker>> order;
    for (const auto& w : workers_)
      if (w->Serves(spec.tenant)) order.push_back(w);
    if (order.empty()) {
      return Status(Code::kPermissionDenied,
                    fmt::format("no remote worker holds a token for tenant '{}'", spec.tenant));
    }
    for (auto& w : order) (void)w->Refresh();  // bounded; a silent worker is marked down
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
      Worker::Load la = a->CurrentLoad(), lb = b->CurrentLoad();
      if (la.down != lb.down) return !la.down;
      if (la.live != lb.live) return la.live < lb.live;
      // Free memory in steps of 256 MiB: workers alike in it keep the configured order (a
      // placement that flips on a few pages' difference is one nobody can predict).
      constexpr long long kStep = 256LL << 20;
      return la.free_memory / kStep > lb.free_memory / kStep;
    });
    std::vector<std::string> tried;
    for (auto& w : order) {
      auto client = w->Client(spec.tenant);
      if (!client.ok()) return client.status();
      auto remote_id = (*client)->Create(forwarded);
      if (remote_id.ok()) {
        if (timings) timings->allocate = NowSeconds() - t0;
        return std::unique_ptr<Sandbox>(
            std::make_unique<RemoteSandbox>(id, w, *client, *remote_id));
      }
      const Status& s = remote_id.status();
      if (MaybeSilent(s) && !w->Refresh(/*force=*/true).ok()) {
        w->MarkDown(s.message());
        tried.push_back(Unreachable(*w, s).message());
        continue;
      }
      if (s.code() == Code::kResourceExceeded || s.code() == Code::kSandboxUnavailable) {
        // full, or it cannot provide what the trust class needs: the next one may
        tried.push_back(fmt::format("worker {}: {}", w->name(), s.message()));
        continue;
      }
      return s.WithContext(fmt::format("remote worker {}", w->name()));
    }
    return Status(
        Code::kSandboxUnavailable,
        fmt::format("no remote worker could take the sandbox: {}", fmt::join(tried, "; ")));
  }

 private:
  std::vector<std::shared_ptr<Worker>> workers_;
};

}  // namespace

std::unique_ptr<Backend> MakeRemoteBackend(const BackendContext& ctx) {
  return std::make_unique<RemoteBackend>(ctx);
}

}  // namespace sbx::backend
