#include "client/remote_runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <nlohmann/json.hpp>

#include "sbx/http_client.h"
#include "wire/error_map.h"
#include "wire/token.h"
#include "wire/wire.h"

namespace sbx::client {
namespace {

using nlohmann::json;

// IDs go into the request path: only characters that need no escaping.
bool PlainId(const std::string& id) {
  return !id.empty() && id.size() <= 128 &&
         std::all_of(
             id.begin(), id.end(),
             [](unsigned char c) { return std::isalnum(c) || c == '-' || c == '_' || c == '.'; }) &&
         id != "." && id != "..";
}

Status NoSuchSandbox(const std::string& id) { return NotFound(fmt::format("no sandbox '{}'", id)); }

class RemoteRuntime final : public Runtime {
 public:
  RemoteRuntime(http::Endpoint endpoint, std::string token, RemoteCallBounds bounds,
                http::TlsOptions tls)
      : endpoint_(std::move(endpoint)),
        token_(std::move(token)),
        bounds_(bounds),
        tls_(std::move(tls)) {}
  ~RemoteRuntime() override { wire::ZeroString(&token_); }

  // GET/DELETE/POST returning the body as JSON, or the server's error as a Status.
  StatusOr<json> Call(std::string_view method, const std::string& path, const json* body,
                      double timeout_s = 0) const {
    if (timeout_s <= 0) timeout_s = bounds_.call_timeout_s;
    http::Request req;
    req.method = std::string(method);
    req.path = path;
    req.headers = {{"Authorization", "Bearer " + token_}, {"Accept", "application/json"}};
    if (body) {
      req.headers.push_back({"Content-Type", "application/json"});
      req.body = wire::DumpJson(*body);
    }
    auto resp =
        http::Call(endpoint_, req, {.timeout_s = timeout_s, .who = "sandboxd", .tls = tls_});
    wire::ZeroString(&req.headers[0].value);
    if (!resp.ok()) return resp.status();
    if (resp->status >= 400) return wire::StatusFromErrorResponse(resp->status, resp->body);
    auto j = wire::ParseJsonBody(resp->body);
    if (!j.ok())
      return Status(Code::kInternal, "sandboxd answered malformed JSON: " + j.status().message());
    return j;
  }

  Status Probe() {
    ASSIGN_OR_RETURN(json info, Call("GET", "/v1/info", nullptr));
    std::lock_guard lock(mu_);
    info_ = std::move(info);
    return Status::Ok();
  }

  json Info() const override {
    auto j = Call("GET", "/v1/info", nullptr);
    std::lock_guard lock(mu_);
    if (j.ok() && j->is_object()) {
      info_ = *j;
      return info_;
    }
    json out = info_;
    out["error"] = {{"code", CodeName(j.ok() ? Code::kInternal : j.status().code())},
                    {"message", j.ok() ? "info is not an object" : j.status().message()}};
    return out;
  }

  ExecResult Run(const ExecRequest& request) override {
    json body = wire::SandboxSpecToJson(request.sandbox);
    if (request.sandbox.tenant == SandboxSpec{}.tenant) body.erase("tenant");
    json exec = wire::ExecSpecToJson(request.exec);
    for (auto it = exec.begin(); it != exec.end(); ++it) body[it.key()] = it.value();
    auto j = Call("POST", "/v1/run", &body, request.exec.timeout_s + bounds_.call_timeout_s);
    StatusOr<ExecResult> r =
        j.ok() ? wire::ExecResultFromJson(*j) : StatusOr<ExecResult>(j.status());
    if (r.ok()) return *r;
    ExecResult failed;
    failed.status = ExecStatus::kSandboxUnavailable;
    failed.state = SandboxState::kCrashed;
    failed.backend = request.sandbox.backend.empty() ? "native" : request.sandbox.backend;
    failed.reason = r.status().message();
    failed.error_code = std::string(CodeName(r.status().code()));
    return failed;
  }

  StatusOr<std::string> Create(const SandboxSpec& spec) override {
    json body = wire::SandboxSpecToJson(spec);
    // The server creates for the token's tenant; "default" (the model's default) means "mine".
    if (spec.tenant == SandboxSpec{}.tenant) body.erase("tenant");
    ASSIGN_OR_RETURN(json j, Call("POST", "/v1/sandboxes", &body));
    if (!j.contains("sandbox") || !j["sandbox"].is_string()) {
      return Internal("sandboxd: create answered without a sandbox ID");
    }
    return j["sandbox"].get<std::string>();
  }

  StatusOr<ExecResult> Exec(const std::string& id, const ExecSpec& exec) override {
    if (!PlainId(id)) return NoSuchSandbox(id);
    json body = wire::ExecSpecToJson(exec);
    ASSIGN_OR_RETURN(
        json j, Call("POST", "/v1/sandboxes/" + id + "/exec", &body, exec.timeout_s + bounds_.exec_slack_s));
    return wire::ExecResultFromJson(j);
  }

  StatusOr<double> Revert(const std::string& id) override { return Seconds("POST", id, "/revert"); }
  StatusOr<double> Suspend(const std::string& id) override {
    return Seconds("POST", id, "/suspend");
  }
  StatusOr<double> Resume(const std::string& id) override { return Seconds("POST", id, "/resume"); }
  StatusOr<double> Destroy(const std::string& id) override { return Seconds("DELETE", id, ""); }

  Status PutFile(const std::string& id, const std::string& path, const std::string& content,
                 int mode) override {
    if (!PlainId(id)) return NoSuchSandbox(id);
    json body = {{"path", path}, {"content_b64", wire::Base64Encode(content)}, {"mode", mode}};
    auto j = Call("POST", "/v1/sandboxes/" + id + "/files", &body);
    return j.ok() ? Status::Ok() : j.status();
  }

  std::vector<SandboxInfo> List() const override {
    std::vector<SandboxInfo> out;
    auto j = Call("GET", "/v1/sandboxes", nullptr);
    if (!j.ok() || !j->contains("sandboxes") || !(*j)["sandboxes"].is_array()) return out;
    for (const json& e : (*j)["sandboxes"]) {
      auto info = wire::SandboxInfoFromJson(e);
      if (info.ok()) out.push_back(*info);
    }
    return out;
  }

  json GatewayLog(const std::string& id) const override {
    if (!PlainId(id)) return json::array();
    auto j = Call("GET", "/v1/sandboxes/" + id + "/gateway-log", nullptr);
    if (!j.ok() || !j->contains("decisions") || !(*j)["decisions"].is_array()) return json::array();
    return (*j)["decisions"];
  }

 private:
  StatusOr<double> Seconds(std::string_view method, const std::string& id,
                           const std::string& suffix) {
    if (!PlainId(id)) return NoSuchSandbox(id);
    ASSIGN_OR_RETURN(json j, Call(method, "/v1/sandboxes/" + id + suffix, nullptr));
    if (!j.contains("seconds") || !j["seconds"].is_number())
      return Internal("sandboxd: answer without seconds");
    return j["seconds"].get<double>();
  }

  http::Endpoint endpoint_;
  std::string token_;
  RemoteCallBounds bounds_;
  http::TlsOptions tls_;
  mutable std::mutex mu_;
  mutable json info_ = json::object();
};

}  // namespace

StatusOr<std::unique_ptr<Runtime>> OpenRemoteRuntime(const std::string& url,
                                                     const std::string& token, bool probe) {
  return OpenRemoteRuntime(url, token, probe, RemoteCallBounds{});
}

StatusOr<std::unique_ptr<Runtime>> OpenRemoteRuntime(const std::string& url,
                                                     const std::string& token,
                                                     const http::TlsOptions& tls, bool probe) {
  return OpenRemoteRuntime(url, token, probe, RemoteCallBounds{}, tls);
}

StatusOr<std::unique_ptr<Runtime>> OpenRemoteRuntime(const std::string& url,
                                                     const std::string& token, bool probe,
                                                     RemoteCallBounds bounds,
                                                     const http::TlsOptions& tls) {
  if (!(bounds.call_timeout_s > 0) || !(bounds.exec_slack_s > 0))
    return InvalidArgument("remote call bounds must be positive");
  if (token.empty())
    return Status(Code::kUnauthenticated, "no token for sandboxd (--token or SANDBOXD_TOKEN)");
  // A token goes into a header line: refuse what could break out of it.
  if (Status s = wire::ValidateToken(token); !s.ok())
    return Status(Code::kUnauthenticated, s.message());
  ASSIGN_OR_RETURN(http::Endpoint endpoint, http::ParseEndpoint(url));
  if (endpoint.tls && tls.ca_file.empty() && tls.pin_sha256.empty()) {
    return InvalidArgument(fmt::format(
        "{}: https needs a CA file or a certificate pin to trust the server (unverified TLS is "
        "refused)",
        url));
  }
  if (!endpoint.tls && !tls.empty())
    return InvalidArgument(fmt::format("{}: TLS options need an https:// url", url));
  if (!tls.pin_sha256.empty()) RETURN_IF_ERROR(http::NormalizePinSha256(tls.pin_sha256).status());
  auto rt = std::make_unique<RemoteRuntime>(std::move(endpoint), token, bounds, tls);
  if (probe) RETURN_IF_ERROR(rt->Probe());
  return std::unique_ptr<Runtime>(std::move(rt));
}

}  // namespace sbx::client
