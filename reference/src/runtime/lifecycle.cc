#include "runtime/lifecycle.h"

namespace sbx {

ExecResult UnavailableResult(const Status& s, const std::string& backend_name) {
  ExecResult r;
  r.status = s.code() == Code::kToolError ? ExecStatus::kToolError : ExecStatus::kSandboxUnavailable;
  r.state = SandboxState::kCrashed;
  r.reason = s.message();
  r.error_code = std::string(CodeName(s.code()));
  r.backend = backend_name;
  return r;
}

ExecResult RunOneShot(backend::Backend& backend, const std::string& id, const ExecRequest& req) {
  StageTimings create_t;
  auto created = backend.Create(id, req.sandbox, &create_t, backend::CreateMode::kOneShot);
  if (!created.ok()) return UnavailableResult(created.status(), backend.name());
  std::unique_ptr<backend::Sandbox> sb = std::move(created).value();
  ExecResult r;
  auto res = sb->Exec(req.exec);
  if (res.ok()) {
    r = std::move(res).value();
  } else {
    r.status = ExecStatus::kToolError;
    r.state = SandboxState::kCrashed;
    r.reason = res.status().message();
    r.error_code = std::string(CodeName(res.status().code()));
  }
  StageTimings end_t;
  sb->Destroy(&end_t);  // LC-9: ephemeral by default; LC-7, LC-8 whatever happened above
  r.stages.allocate = create_t.allocate;
  r.stages.initialize = create_t.initialize;
  r.stages.destroy = end_t.destroy;
  r.stages.cleanup = end_t.cleanup;
  if (r.backend.empty()) r.backend = backend.name();
  if (r.sandbox_id.empty()) r.sandbox_id = id;
  return r;
}

}  // namespace sbx
