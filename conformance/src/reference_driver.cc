// ReferenceDriver: the reference runtime in process, through its public API only
// (sbx/runtime.h, sbx/model.h, sbx/status.h) — exactly as any embedder would use it. The
// runtime's gateway log is offered as the feature "egress.log".
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "sbx/model.h"
#include "sbx/runtime.h"
#include "target.h"

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
  } catch (const json::exception& e) {
    return sbx::InvalidArgument(fmt::format("create request: {}", e.what()));
  }
  return spec;
}

class ReferenceDriver final : public Target {
 public:
  explicit ReferenceDriver(std::unique_ptr<sbx::Runtime> rt) : rt_(std::move(rt)) {}

  std::string Kind() const override { return "reference"; }
  std::string Spec() const override { return "reference"; }

  sbx::StatusOr<TargetInfo> Info() override {
    auto info = ParseInfo(rt_->Info());
    if (!info.ok()) return sbx::Internal("reference runtime Info(): " + info.status().message());
    if (info->Has("egress") && !info->Has("egress.log")) info->features.push_back("egress.log");
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
    ExecAnswer a;
    a.status = StatusName(r.status);
    a.state = StateName(r.state);
    a.exit_code = r.exit_code;
    a.stdout_text = r.stdout_tail;
    a.stderr_text = r.stderr_tail;
    a.seconds = r.seconds;
    const auto& s = r.stages;
    a.extra["stages"] = {{"allocate", s.allocate},
                         {"initialize", s.initialize},
                         {"inject_context", s.inject_context},
                         {"execute", s.execute},
                         {"collect", s.collect},
                         {"destroy", s.destroy},
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

  sbx::StatusOr<OpAnswer> Revert(const std::string& sandbox) override {
    ASSIGN_OR_RETURN(double s, rt_->Revert(sandbox));
    return OpAnswer{s, 0};
  }

  sbx::StatusOr<OpAnswer> Destroy(const std::string& sandbox) override {
    ASSIGN_OR_RETURN(double s, rt_->Destroy(sandbox));
    return OpAnswer{s, 0};
  }

  sbx::StatusOr<json> GatewayLog(const std::string& sandbox) override {
    json j = rt_->GatewayLog(sandbox);
    if (j.is_object() && j.contains("decisions")) j = j["decisions"];
    if (!j.is_array()) return sbx::Internal("reference runtime GatewayLog(): not an array");
    return j;
  }

 private:
  std::unique_ptr<sbx::Runtime> rt_;
};

}  // namespace

sbx::StatusOr<std::unique_ptr<Target>> MakeReferenceTarget(const TargetOptions& /*options*/) {
  sbx::RuntimeOptions ro;
  auto rt = sbx::Runtime::Open(ro);
  if (!rt.ok()) return rt.status().WithContext("opening the reference runtime");
  return std::unique_ptr<Target>(new ReferenceDriver(std::move(*rt)));
}

}  // namespace sandcheck
