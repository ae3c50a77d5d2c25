// A test double of sbx::Runtime for the API's unit tests (the layer below sandboxd): sandboxes
// are map entries; commands are interpreted, not run:
//   "sleep S"          sleeps S seconds, then ok
//   "timeout"          a result with status timeout (the call itself succeeds)
//   "fail CODE"        the call fails with that Code name (e.g. "fail failed_precondition")
//   anything else      ok, exit 0, stdout = the command
// Create fails with the Code named by a template "fail-CODE". Suspended sandboxes refuse Exec
// with kFailedPrecondition, as the real runtime does.
//
// Thread-safety: thread-safe.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "sbx/runtime.h"
#include "wire/error_map.h"

namespace sbx::api {

class FakeRuntime final : public Runtime {
 public:
  struct Box {
    SandboxSpec spec;
    SandboxState state = SandboxState::kRunning;
    std::map<std::string, std::pair<std::string, int>> files;  // path → (content, mode)
    int execs = 0, reverts = 0;
  };

  nlohmann::json Info() const override {
    return {{"name", "fake"}, {"version", "0"}, {"backends", {"native"}}, {"features", {"revert"}}};
  }

  ExecResult Run(const ExecRequest& request) override {
    std::lock_guard lock(mu_);
    last_spec_ = request.sandbox;
    ++runs_;
    ExecResult r;
    r.backend = "native";
    if (request.sandbox.template_name.rfind("unavailable-", 0) == 0) {
      // "unavailable-CODE": the runtime could not provide a sandbox at all.
      r.status = ExecStatus::kSandboxUnavailable;
      r.state = SandboxState::kCrashed;
      r.error_code = request.sandbox.template_name.substr(12);
      r.reason = "fake: no sandbox";
      return r;
    }
    r.exit_code = 0;
    r.stdout_tail = request.exec.command;
    return r;
  }

  StatusOr<std::string> Create(const SandboxSpec& spec) override {
    if (spec.template_name.rfind("fail-", 0) == 0) {
      return Status(wire::CodeFromName(spec.template_name.substr(5)), "fake create failure");
    }
    std::lock_guard lock(mu_);
    last_spec_ = spec;
    std::string id = fmt::format("sb{:04d}", next_++);
    boxes_[id].spec = spec;
    return id;
  }

  StatusOr<ExecResult> Exec(const std::string& id, const ExecSpec& exec) override {
    {
      std::lock_guard lock(mu_);
      auto it = boxes_.find(id);
      if (it == boxes_.end()) return NotFound(fmt::format("no sandbox '{}'", id));
      if (it->second.state == SandboxState::kSuspended)
        return FailedPrecondition("sandbox is suspended");
      ++it->second.execs;
    }
    const std::string& cmd = exec.command;
    if (cmd.rfind("sleep ", 0) == 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(std::stod(cmd.substr(6))));
    }
    if (cmd.rfind("fail ", 0) == 0)
      return Status(wire::CodeFromName(cmd.substr(5)), "fake exec failure");
    ExecResult r;
    r.backend = "native";
    r.sandbox_id = id;
    if (cmd == "timeout") {
      r.status = ExecStatus::kTimeout;
      r.reason = "timeout 1 s";
      return r;
    }
    r.exit_code = 0;
    r.stdout_tail = cmd;
    r.stdout_bytes = static_cast<int64_t>(cmd.size());
    r.seconds = 0.001;
    return r;
  }

  StatusOr<double> Revert(const std::string& id) override {
    std::lock_guard lock(mu_);
    auto it = boxes_.find(id);
    if (it == boxes_.end()) return NotFound(fmt::format("no sandbox '{}'", id));
    ++it->second.reverts;
    it->second.files.clear();
    it->second.state = SandboxState::kRunning;
    return 0.002;
  }
  StatusOr<double> Suspend(const std::string& id) override {
    return SetState(id, SandboxState::kSuspended);
  }
  StatusOr<double> Resume(const std::string& id) override {
    return SetState(id, SandboxState::kRunning);
  }
  StatusOr<double> Destroy(const std::string& id) override {
    std::lock_guard lock(mu_);
    if (boxes_.erase(id) == 0) return NotFound(fmt::format("no sandbox '{}'", id));
    return 0.003;
  }
  Status PutFile(const std::string& id, const std::string& path, const std::string& content,
                 int mode) override {
    std::lock_guard lock(mu_);
    auto it = boxes_.find(id);
    if (it == boxes_.end()) return NotFound(fmt::format("no sandbox '{}'", id));
    it->second.files[path] = {content, mode};
    return Status::Ok();
  }
  std::vector<SandboxInfo> List() const override {
    std::lock_guard lock(mu_);
    std::vector<SandboxInfo> out;
    for (const auto& [id, b] : boxes_) {
      out.push_back({id, "native", b.spec.tenant, b.spec.tool, b.spec.template_name, b.state, 1.0});
    }
    return out;
  }
  nlohmann::json GatewayLog(const std::string& id) const override {
    return nlohmann::json::array({{{"sandbox", id}, {"verdict", "deny"}}});
  }

  // Test access.
  std::optional<Box> Get(const std::string& id) const {
    std::lock_guard lock(mu_);
    auto it = boxes_.find(id);
    if (it == boxes_.end()) return std::nullopt;
    return it->second;
  }
  SandboxSpec last_spec() const {
    std::lock_guard lock(mu_);
    return last_spec_;
  }
  size_t size() const {
    std::lock_guard lock(mu_);
    return boxes_.size();
  }
  int runs() const {
    std::lock_guard lock(mu_);
    return runs_;
  }

 private:
  StatusOr<double> SetState(const std::string& id, SandboxState s) {
    std::lock_guard lock(mu_);
    auto it = boxes_.find(id);
    if (it == boxes_.end()) return NotFound(fmt::format("no sandbox '{}'", id));
    it->second.state = s;
    return 0.004;
  }

  mutable std::mutex mu_;
  std::map<std::string, Box> boxes_;
  SandboxSpec last_spec_;
  int next_ = 1;
  int runs_ = 0;
};

}  // namespace sbx::api
