#include "api/api_service.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "wire/error_map.h"
#include "wire/wire.h"

namespace sbx::api {

using nlohmann::json;

namespace {

constexpr const char* kRealm = "Bearer realm=\"sandboxd\"";

HttpResponse JsonResponse(int status, const json& body) {
  HttpResponse r;
  r.status = status;
  r.body = wire::DumpJson(body);
  return r;
}

HttpResponse Error(int http_status, Code code, const std::string& message) {
  HttpResponse r;
  r.status = http_status;
  r.body = wire::ErrorBody(code, message);
  return r;
}

HttpResponse BadRequest(const std::string& message) {
  return Error(400, Code::kInvalidArgument, message);
}

HttpResponse Unauthenticated(Authenticator::Result why) {
  HttpResponse r = Error(401, Code::kUnauthenticated,
                         why == Authenticator::Result::kMissing
                             ? "missing credentials: send 'Authorization: Bearer TOKEN'"
                             : "invalid bearer token");
  r.headers.push_back(
      {"WWW-Authenticate", why == Authenticator::Result::kMissing
                               ? std::string(kRealm)
                               : std::string(kRealm) + ", error=\"invalid_token\""});
  return r;
}

HttpResponse MethodNotAllowed(const HttpRequest& req, const std::string& allowed) {
  HttpResponse r =
      Error(405, Code::kInvalidArgument,
            fmt::format("{} is not allowed on {} (allowed: {})", req.method, req.path, allowed));
  r.headers.push_back({"Allow", allowed});
  return r;
}

std::vector<std::string> Split(std::string_view path) {
  std::vector<std::string> parts;
  size_t pos = 1;  // path starts with '/'
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string_view::npos) slash = path.size();
    parts.emplace_back(path.substr(pos, slash - pos));
    pos = slash + 1;
  }
  return parts;
}

// A body that must be a JSON object.
StatusOr<json> ObjectBody(const HttpRequest& req) {
  if (req.body.empty()) return InvalidArgument("expected a JSON object as the body");
  ASSIGN_OR_RETURN(json j, wire::ParseJsonBody(req.body));
  if (!j.is_object()) return InvalidArgument("expected a JSON object as the body");
  return j;
}

// The optional body of revert/suspend/resume/destroy: empty, {} or {"sandbox": id}.
Status CheckIdOnlyBody(const HttpRequest& req, const std::string& id, const char* op) {
  if (req.body.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(json j, wire::ParseJsonBody(req.body));
  if (!j.is_object())
    return InvalidArgument(fmt::format("{}: expected a JSON object as the body", op));
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "sandbox")
      return InvalidArgument(fmt::format("{}: unknown key '{}'", op, it.key()));
    if (!it.value().is_string() || it.value().get<std::string>() != id) {
      return InvalidArgument(fmt::format("{}.sandbox: does not match the sandbox in the path", op));
    }
  }
  return Status::Ok();
}

// A "tenant" in a create body must name the caller (PROD-1): nobody creates for someone else.
Status CheckTenant(const json& j, const std::string& tenant) {
  auto it = j.find("tenant");
  if (it == j.end()) return Status::Ok();
  if (!it->is_string()) return InvalidArgument("create.tenant: expected a string");
  if (it->get<std::string>() != tenant) {
    return Status(Code::kPermissionDenied,
                  fmt::format("create.tenant: '{}' is not the authenticated tenant '{}'",
                              it->get<std::string>(), tenant));
  }
  return Status::Ok();
}

}  // namespace

// 429 and 503 say "not now": they carry Retry-After (issue 17: past a bound, the caller is
// told when to come back, never given a half-made sandbox).
HttpResponse ErrorResponse(const Status& status) {
  HttpResponse r = Error(wire::HttpStatusFor(status.code()), status.code(), status.message());
  if (r.status == 429 || r.status == 503) r.headers.push_back({"Retry-After", "1"});
  return r;
}

HttpResponse NotFoundResponse(const std::string& id) {
  return Error(404, Code::kNotFound, fmt::format("no sandbox '{}'", id));
}

ApiService::ApiService(Runtime* runtime, Authenticator auth, ServiceOptions options)
    : runtime_(runtime), auth_(std::move(auth)), options_(std::move(options)) {}

std::optional<HttpResponse> ApiService::HeadCheck(const HttpRequest& head) const {
  std::string tenant;
  auto result = auth_.Authenticate(head.Header("authorization"), &tenant);
  if (result == Authenticator::Result::kOk) return std::nullopt;
  return Unauthenticated(result);
}

HttpResponse ApiService::Handle(const HttpRequest& req) {
  std::string tenant;
  // SECURITY: authentication comes before routing, so an unauthenticated caller learns
  // nothing, not even which routes exist (PROD-1).
  auto result = auth_.Authenticate(req.Header("authorization"), &tenant);
  if (result != Authenticator::Result::kOk) return Unauthenticated(result);
  HttpResponse r;
  try {
    r = Dispatch(req, tenant);
  } catch (const std::exception&) {
    // nlohmann::json may throw on a path we did not foresee: answer, never crash.
    r = Error(500, Code::kInternal, "internal error while handling the request");
  }
  r.log_tenant = tenant;
  return r;
}

HttpResponse ApiService::Dispatch(const HttpRequest& req, const std::string& tenant) {
  if (!req.query.empty()) return BadRequest("query parameters are not accepted");
  if (req.method == "GET" && !req.body.empty()) return BadRequest("GET takes no body");
  std::vector<std::string> p = Split(req.path);
  const std::string& m = req.method;
  auto no_route = [&] { return Error(404, Code::kNotFound, fmt::format("no route {}", req.path)); };
  if (p.size() < 2 || p[0] != "v1") return no_route();
  if (p.size() == 2 && p[1] == "info") {
    return m == "GET" ? Info(tenant) : MethodNotAllowed(req, "GET");
  }
  if (p.size() == 2 && p[1] == "run") {
    return m == "POST" ? Run(req, tenant) : MethodNotAllowed(req, "POST");
  }
  if (p[1] != "sandboxes") return no_route();
  if (p.size() == 2) {
    if (m == "GET") return List(tenant);
    if (m == "POST") return Create(req, tenant);
    return MethodNotAllowed(req, "GET, POST");
  }
  const std::string& id = p[2];
  if (id.empty()) return no_route();
  if (p.size() == 3) {
    if (m == "GET") return Get(id, tenant);
    if (m == "DELETE") return Lifecycle(req, id, "destroy", tenant);
    return MethodNotAllowed(req, "GET, DELETE");
  }
  if (p.size() != 4) return no_route();
  const std::string& op = p[3];
  if (op == "exec") return m == "POST" ? Exec(req, id, tenant) : MethodNotAllowed(req, "POST");
  if (op == "revert" || op == "suspend" || op == "resume") {
    return m == "POST" ? Lifecycle(req, id, op, tenant) : MethodNotAllowed(req, "POST");
  }
  if (op == "files") return m == "POST" ? PutFile(req, id, tenant) : MethodNotAllowed(req, "POST");
  if (op == "gateway-log")
    return m == "GET" ? GatewayLog(id, tenant) : MethodNotAllowed(req, "GET");
  return no_route();
}

bool ApiService::Owns(const std::string& id, const std::string& tenant) const {
  std::lock_guard lock(mu_);
  auto it = owner_.find(id);
  return it != owner_.end() && it->second == tenant;
}

void ApiService::Forget(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = owner_.find(id);
  if (it == owner_.end()) return;
  if (--reserved_[it->second] <= 0) reserved_.erase(it->second);
  owner_.erase(it);
}

int ApiService::MaxSandboxes(const std::string& tenant) const {
  auto it = options_.max_sandboxes.find(tenant);
  return it == options_.max_sandboxes.end() ? ServiceOptions::kDefaultMaxSandboxes : it->second;
}

std::map<std::string, int> ApiService::Counts() const {
  std::lock_guard lock(mu_);
  std::map<std::string, int> out;
  for (const auto& [id, t] : owner_) ++out[t];
  return out;
}

HttpResponse ApiService::Info(const std::string& tenant) {
  json info = runtime_->Info();
  if (!info.is_object()) info = json::object();
  json features =
      info.contains("features") && info["features"].is_array() ? info["features"] : json::array();
  if (std::find(features.begin(), features.end(), "tenants") == features.end())
    features.push_back("tenants");
  info["features"] = features;
  info["api"] = "v1";
  info["tenant"] = tenant;
  if (auto f = options_.floors.find(tenant); f != options_.floors.end())
    info["tenant_floor"] = f->second;
  if (!info.contains("capacity") || !info["capacity"].is_object()) info["capacity"] = json::object();
  {
    std::lock_guard lock(mu_);
    auto it = reserved_.find(tenant);
    info["capacity"]["tenant"] = {{"max_sandboxes", MaxSandboxes(tenant)},
                                  {"sandboxes", it == reserved_.end() ? 0 : it->second}};
  }
  if (options_.server_capacity) info["capacity"]["server"] = options_.server_capacity();
  return JsonResponse(200, info);
}

HttpResponse ApiService::Create(const HttpRequest& req, const std::string& tenant) {
  auto body = ObjectBody(req);
  if (!body.ok()) return ErrorResponse(body.status());
  if (Status s = CheckTenant(*body, tenant); !s.ok()) return ErrorResponse(s);
  auto spec = SandboxSpecFromJson(*body);
  if (!spec.ok()) return ErrorResponse(spec.status());
  spec->tenant = tenant;
  {
    std::lock_guard lock(mu_);
    int max = MaxSandboxes(tenant);
    if (reserved_[tenant] >= max) {
      return ErrorResponse(
          Status(Code::kResourceExceeded,
                 fmt::format("tenant '{}' has its maximum of {} sandboxes", tenant, max)));
    }
    ++reserved_[tenant];  // held while the runtime creates, so parallel creates cannot overshoot
  }
  auto id = runtime_->Create(*spec);
  std::lock_guard lock(mu_);
  if (!id.ok()) {
    if (--reserved_[tenant] <= 0) reserved_.erase(tenant);
    return ErrorResponse(id.status());
  }
  owner_[*id] = tenant;
  HttpResponse r = JsonResponse(201, {{"sandbox", *id}});
  r.headers.push_back({"Location", "/v1/sandboxes/" + *id});
  return r;
}

HttpResponse ApiService::List(const std::string& tenant) {
  json out = json::array();
  for (const SandboxInfo& i : runtime_->List()) {
    if (Owns(i.id, tenant)) out.push_back(wire::SandboxInfoToJson(i));
  }
  return JsonResponse(200, {{"sandboxes", out}});
}

HttpResponse ApiService::Get(const std::string& id, const std::string& tenant) {
  if (!Owns(id, tenant)) return NotFoundResponse(id);
  for (const SandboxInfo& i : runtime_->List()) {
    if (i.id == id) return JsonResponse(200, wire::SandboxInfoToJson(i));
  }
  Forget(id);
  return NotFoundResponse(id);
}

HttpResponse ApiService::Exec(const HttpRequest& req, const std::string& id,
                              const std::string& tenant) {
  if (!Owns(id, tenant)) return NotFoundResponse(id);
  auto body = ObjectBody(req);
  if (!body.ok()) return ErrorResponse(body.status());
  if (auto it = body->find("sandbox"); it != body->end()) {
    if (!it->is_string() || it->get<std::string>() != id) {
      return BadRequest("exec.sandbox: does not match the sandbox in the path");
    }
  }
  auto spec = ExecSpecFromJson(*body);
  if (!spec.ok()) return ErrorResponse(spec.status());
  auto result = runtime_->Exec(id, *spec);
  if (!result.ok()) {
    if (result.status().code() == Code::kNotFound) {
      Forget(id);
      return NotFoundResponse(id);
    }
    return ErrorResponse(result.status());
  }
  // 200 whatever the command did: its outcome is the result object's "status".
  json j = *result;
  return JsonResponse(200, j);
}

HttpResponse ApiService::Lifecycle(const HttpRequest& req, const std::string& id,
                                   const std::string& op, const std::string& tenant) {
  if (!Owns(id, tenant)) return NotFoundResponse(id);
  if (Status s = CheckIdOnlyBody(req, id, op.c_str()); !s.ok()) return ErrorResponse(s);
  StatusOr<double> seconds = Status(Code::kInternal, "unreachable");
  if (op == "revert")
    seconds = runtime_->Revert(id);
  else if (op == "suspend")
    seconds = runtime_->Suspend(id);
  else if (op == "resume")
    seconds = runtime_->Resume(id);
  else
    seconds = runtime_->Destroy(id);
  if (!seconds.ok()) {
    if (seconds.status().code() == Code::kNotFound) {
      Forget(id);
      return NotFoundResponse(id);
    }
    return ErrorResponse(seconds.status());
  }
  if (op == "destroy") Forget(id);
  return JsonResponse(200, {{"seconds", *seconds}});
}

HttpResponse ApiService::PutFile(const HttpRequest& req, const std::string& id,
                                 const std::string& tenant) {
  if (!Owns(id, tenant)) return NotFoundResponse(id);
  auto body = ObjectBody(req);
  if (!body.ok()) return ErrorResponse(body.status());
  const json& j = *body;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k != "sandbox" && k != "path" && k != "content_b64" && k != "mode") {
      return BadRequest(fmt::format("put_file: unknown key '{}'", k));
    }
  }
  if (auto it = j.find("sandbox");
      it != j.end() && (!it->is_string() || it->get<std::string>() != id)) {
    return BadRequest("put_file.sandbox: does not match the sandbox in the path");
  }
  if (!j.contains("path") || !j["path"].is_string() || j["path"].get<std::string>().empty()) {
    return BadRequest("put_file.path: required, a non-empty string");
  }
  if (!j.contains("content_b64") || !j["content_b64"].is_string()) {
    return BadRequest("put_file.content_b64: required, a base64 string");
  }
  auto content = wire::Base64Decode(j["content_b64"].get<std::string>());
  if (!content.ok()) return ErrorResponse(content.status().WithContext("put_file.content_b64"));
  int mode = 0644;
  if (j.contains("mode")) {
    if (!j["mode"].is_number_integer() || j["mode"].get<int64_t>() < 0 ||
        j["mode"].get<int64_t>() > 07777) {
      return BadRequest("put_file.mode: an integer in 0..4095 (0o7777)");
    }
    mode = static_cast<int>(j["mode"].get<int64_t>());
  }
  Status s = runtime_->PutFile(id, j["path"].get<std::string>(), *content, mode);
  if (!s.ok()) return ErrorResponse(s);  // the sandbox is ours: a not_found names the path
  return JsonResponse(200, json::object());
}

HttpResponse ApiService::GatewayLog(const std::string& id, const std::string& tenant) {
  if (!Owns(id, tenant)) return NotFoundResponse(id);
  json log = runtime_->GatewayLog(id);
  if (!log.is_array()) log = json::array();
  return JsonResponse(200, {{"decisions", log}});
}

HttpResponse ApiService::Run(const HttpRequest& req, const std::string& tenant) {
  auto body = ObjectBody(req);
  if (!body.ok()) return ErrorResponse(body.status());
  if (Status s = CheckTenant(*body, tenant); !s.ok()) return ErrorResponse(s);
  // One object: the create keys plus the command's (cmd, argv, timeout_s, stdin).
  json create = json::object(), exec = json::object();
  for (auto it = body->begin(); it != body->end(); ++it) {
    const std::string& k = it.key();
    bool exec_key = k == "cmd" || k == "argv" || k == "timeout_s" || k == "stdin";
    (exec_key ? exec : create)[k] = it.value();
  }
  auto spec = SandboxSpecFromJson(create);
  if (!spec.ok()) return ErrorResponse(spec.status().WithContext("run"));
  auto exec_spec = ExecSpecFromJson(exec);
  if (!exec_spec.ok()) return ErrorResponse(exec_spec.status().WithContext("run"));
  spec->tenant = tenant;
  {
    std::lock_guard lock(mu_);
    int max = MaxSandboxes(tenant);
    if (reserved_[tenant] >= max) {
      return ErrorResponse(
          Status(Code::kResourceExceeded,
                 fmt::format("tenant '{}' has its maximum of {} sandboxes", tenant, max)));
    }
    ++reserved_[tenant];
  }
  ExecResult result = runtime_->Run(ExecRequest{*spec, *exec_spec});
  {
    std::lock_guard lock(mu_);
    if (--reserved_[tenant] <= 0) reserved_.erase(tenant);
  }
  // LC-9: what happened inside is a 200 result. No sandbox at all (the runtime could not make
  // one: host out of descriptors, memory, a backend missing) is an error answer with its code,
  // so that a client at a bound sees the 503 + Retry-After of every other bound.
  if (result.status == ExecStatus::kSandboxUnavailable) {
    Code code = result.error_code.empty() ? Code::kSandboxUnavailable
                                          : wire::CodeFromName(result.error_code);
    if (code == Code::kOk) code = Code::kSandboxUnavailable;
    return ErrorResponse(Status(code, result.reason.empty() ? "no sandbox could be provided" : result.reason));
  }
  json j = result;
  return JsonResponse(200, j);
}

}  // namespace sbx::api
