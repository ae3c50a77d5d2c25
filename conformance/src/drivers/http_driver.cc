// HttpDriver: a sandboxd-compatible Execution API (docs/execution-api.md), over TCP or a unix
// socket, authenticated with `Authorization: Bearer TOKEN` (--token or $SANDCHECK_TOKEN).
// The bodies are the objects of adapter protocol v1:
//   GET /v1/info · POST /v1/sandboxes · POST /v1/sandboxes/{id}/exec · POST .../revert ·
//   DELETE /v1/sandboxes/{id} · GET /v1/sandboxes/{id}/gateway-log (feature "egress.log") ·
//   POST .../suspend and .../resume (`sandcheck reproduce suspend`) · POST /v1/run (one-shot
//   through the daemon's warm pools: NFR-1 warm-start-pooled)
// An exec answer is accepted with any HTTP status when its body is an exec object (an API may
// answer a crashed sandbox with 503 and a body); every other non-2xx answer is a target failure.
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <set>
#include <string_view>
#include <thread>

#include "common/subprocess.h"
#include "drivers/target.h"
#include "sbx/http_client.h"

namespace sandcheck {
namespace {

using nlohmann::json;

class HttpDriver final : public Target {
 public:
  HttpDriver(std::string spec, sbx::http::Endpoint ep, TargetOptions options)
      : spec_(std::move(spec)), ep_(std::move(ep)), options_(std::move(options)) {}

  std::string Kind() const override { return "http"; }
  std::string Spec() const override { return spec_; }

  sbx::StatusOr<std::unique_ptr<Target>> ForThread() override {
    auto t = std::make_unique<HttpDriver>(spec_, ep_, options_);
    t->second_tenant_ = second_tenant_;
    return std::unique_ptr<Target>(std::move(t));
  }

  sbx::StatusOr<TargetInfo> Info() override {
    ASSIGN_OR_RETURN(Answer a, Call("GET", "/v1/info", std::nullopt, 0));
    RETURN_IF_ERROR(Require2xx("info", a));
    auto info = ParseInfo(a.body);
    if (!info.ok()) return Fail("GET /v1/info", info.status().message());
    features_ = info->features;
    if (!options_.second_token.empty()) {
      // Whose the second credential is (the pool walk's second tenant).
      ASSIGN_OR_RETURN(Answer b, Call("GET", "/v1/info", std::nullopt, 0, options_.second_token));
      if (b.status == 401) {
        return sbx::Status(sbx::Code::kUnauthenticated,
                           fmt::format("{} info: 401: the endpoint refused the second token "
                                       "(--second-token or SANDCHECK_SECOND_TOKEN)",
                                       ep_.ToString()));
      }
      RETURN_IF_ERROR(Require2xx("info (second token)", b));
      second_tenant_ = b.body.is_object() ? b.body.value("tenant", "") : "";
      if (second_tenant_.empty())
        return Fail("GET /v1/info", "the answer to the second token names no \"tenant\"");
      info->raw["second_tenant"] = second_tenant_;
      if (b.body.contains("tenant_floor"))
        info->raw["second_tenant_floor"] = b.body["tenant_floor"];
    }
    return info;
  }

  sbx::StatusOr<std::string> Create(const json& request) override {
    const std::string& token = TokenFor(request);
    ASSIGN_OR_RETURN(Answer a, Call("POST", "/v1/sandboxes", request, 0, token));
    RETURN_IF_ERROR(Require2xx("create", a));
    for (const char* key : {"sandbox", "id"}) {
      if (a.body.contains(key) && a.body[key].is_string() &&
          !a.body[key].get<std::string>().empty()) {
        std::string id = a.body[key].get<std::string>();
        if (&token != &options_.token) second_owned_.insert(id);
        return id;
      }
    }
    return Fail("POST /v1/sandboxes",
                "answer lacks \"sandbox\" (a non-empty string): " + a.body.dump());
  }

  sbx::StatusOr<ExecAnswer> Exec(const std::string& sandbox, const std::string& cmd,
                                 double timeout_s) override {
    json body = {{"sandbox", sandbox}, {"cmd", cmd}, {"timeout_s", timeout_s}};
    ASSIGN_OR_RETURN(Answer a,
                     Call("POST", fmt::format("/v1/sandboxes/{}/exec", sandbox), body, timeout_s));
    if (a.status / 100 != 2 &&
        !(a.body.is_object() && a.body.contains("status") && a.body.contains("exit"))) {
      RETURN_IF_ERROR(Require2xx("exec", a));
    }
    auto e = ParseExecAnswer(a.body);
    if (!e.ok()) return Fail("POST .../exec", e.status().message());
    e->http_status = a.status;
    return e;
  }

  sbx::StatusOr<OpAnswer> Revert(const std::string& sandbox) override {
    ASSIGN_OR_RETURN(
        Answer a, Call("POST", fmt::format("/v1/sandboxes/{}/revert", sandbox), json::object(), 0));
    return Op("revert", a);
  }

  sbx::StatusOr<OpAnswer> Destroy(const std::string& sandbox) override {
    ASSIGN_OR_RETURN(Answer a,
                     Call("DELETE", fmt::format("/v1/sandboxes/{}", sandbox), std::nullopt, 0));
    return Op("destroy", a);
  }

  // POOL-2 over the Execution API: POST /v1/run (the create keys plus cmd and timeout_s);
  // sandboxd serves it from its warm pools (docs/warm-pool.md).
  sbx::StatusOr<ExecAnswer> RunPooled(const json& request, const std::string& cmd,
                                      double timeout_s) override {
    json body = request;
    body["cmd"] = cmd;
    body["timeout_s"] = timeout_s;
    ASSIGN_OR_RETURN(Answer a, Call("POST", "/v1/run", body, timeout_s, TokenFor(request)));
    if (a.status == 404 || a.status == 405 || a.status == 501)
      return sbx::Unsupported(fmt::format("the endpoint has no one-shot run (HTTP {})", a.status));
    if (a.status == 429 || a.status == 503) {
      // A bound of the target ("not now", Retry-After): no sandbox ran. An answer, not a
      // failure of the driver: the caller decides whether to come back.
      ExecAnswer e;
      e.status = "sandbox_unavailable";
      e.state = "CRASHED";
      e.http_status = a.status;
      if (a.body.is_object() && a.body.contains("error") && a.body["error"].is_object())
        e.extra["error"] = a.body["error"];
      e.extra["retry_after_s"] = a.retry_after_s;
      return e;
    }
    RETURN_IF_ERROR(Require2xx("run", a));
    // A one-shot sandbox is destroyed after its command by design: that is not a crash.
    if (a.body.is_object() && a.body.value("state", "") == "DESTROYED") {
      a.body["one_shot_state"] = "DESTROYED";
      a.body["state"] = "RUNNING";
    }
    auto e = ParseExecAnswer(a.body);
    if (!e.ok()) return Fail("POST /v1/run", e.status().message());
    e->http_status = a.status;
    return e;
  }

  // PROD-1 (target.h): the second credential's tenant, or "" for no credential at all; 401, 403
  // and 404 are refusals, any other non-2xx answer a failure of the target.
  sbx::StatusOr<ForeignAnswer> CallAs(const std::string& caller, const std::string& op,
                                      const std::string& sandbox, const std::string& cmd,
                                      double timeout_s) override {
    if (!caller.empty() && caller != second_tenant_) {
      return sbx::Unsupported(fmt::format(
          "over HTTP a caller is a credential: '{}' is not the tenant of --second-token ({})",
          caller, second_tenant_.empty() ? "none given" : second_tenant_));
    }
    const std::string& token = caller.empty() ? kNoToken : options_.second_token;
    Answer a;
    if (op == "exec") {
      json body = {{"sandbox", sandbox}, {"cmd", cmd}, {"timeout_s", timeout_s}};
      ASSIGN_OR_RETURN(
          a, Call("POST", fmt::format("/v1/sandboxes/{}/exec", sandbox), body, timeout_s, token));
    } else if (op == "revert") {
      ASSIGN_OR_RETURN(a, Call("POST", fmt::format("/v1/sandboxes/{}/revert", sandbox),
                               json::object(), 0, token));
    } else if (op == "destroy") {
      ASSIGN_OR_RETURN(
          a, Call("DELETE", fmt::format("/v1/sandboxes/{}", sandbox), std::nullopt, 0, token));
    } else {
      return sbx::InvalidArgument("CallAs: op is exec, revert or destroy, not " + op);
    }
    ForeignAnswer f;
    f.http_status = a.status;
    f.said = fmt::format("HTTP {}: {}", a.status, a.text.substr(0, 280));
    if (a.status == 401 || a.status == 403 || a.status == 404) {
      f.refused = true;
      return f;
    }
    if (op == "exec" && a.body.is_object() && a.body.contains("status") &&
        a.body.contains("exit")) {
      auto e = ParseExecAnswer(a.body);
      if (!e.ok()) return Fail("POST .../exec (another caller)", e.status().message());
      e->http_status = a.status;
      f.said = fmt::format("HTTP {}: status {}, exit {}", a.status, e->status, e->exit_code);
      f.exec = *e;
      return f;
    }
    if (a.status / 100 != 2)
      return Fail(op + " (another caller)",
                  fmt::format("HTTP {}: {}", a.status, a.text.substr(0, 300)));
    return f;
  }

  // Between samples, untimed (target.h): sandboxd reports its background work (a destroyed
  // sandbox's reclaim, a pool's return and refill) as GET /v1/info's
  // capacity.background_outstanding; wait until it is 0, polled every 5 ms and bounded. An
  // Execution API without that field cannot be waited for: a 20 ms pause instead (said in the
  // nfr boundaries). Each answer also says which of the two this endpoint is (settle_kind()).
  sbx::Status Settle() override {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kSettleBoundS);
    for (;;) {
      ASSIGN_OR_RETURN(Answer a, Call("GET", "/v1/info", std::nullopt, 0));
      RETURN_IF_ERROR(Require2xx("info (settle)", a));
      json outstanding;
      if (a.body.is_object() && a.body.contains("capacity") && a.body["capacity"].is_object())
        outstanding = a.body["capacity"].value("background_outstanding", json());
      if (!outstanding.is_number_integer()) {
        observable_background_ = false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return sbx::Status::Ok();
      }
      observable_background_ = true;
      if (outstanding.get<int64_t>() <= 0) return sbx::Status::Ok();
      if (std::chrono::steady_clock::now() > deadline || Interrupted()) {
        return sbx::Status(sbx::Code::kTimeout,
                           fmt::format("the target's background work (capacity."
                                       "background_outstanding {}) did not finish within {} s",
                                       outstanding.get<int64_t>(), kSettleBoundS));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  std::string SettleNote() const override {
    return observable_background_
               ? "the endpoint reports its background work (GET /v1/info "
                 "capacity.background_outstanding): waited for until none is left"
               : "the endpoint does not report its background work: a 20 ms pause instead";
  }

  sbx::StatusOr<OpAnswer> Suspend(const std::string& sandbox) override {
    ASSIGN_OR_RETURN(Answer a, Call("POST", fmt::format("/v1/sandboxes/{}/suspend", sandbox),
                                    json::object(), 0));
    if (a.status == 405 || a.status == 501)
      return sbx::Unsupported(fmt::format("the endpoint has no suspend (HTTP {})", a.status));
    return Op("suspend", a);
  }

  sbx::StatusOr<OpAnswer> Resume(const std::string& sandbox) override {
    ASSIGN_OR_RETURN(
        Answer a, Call("POST", fmt::format("/v1/sandboxes/{}/resume", sandbox), json::object(), 0));
    if (a.status == 405 || a.status == 501)
      return sbx::Unsupported(fmt::format("the endpoint has no resume (HTTP {})", a.status));
    return Op("resume", a);
  }

  sbx::StatusOr<json> GatewayLog(const std::string& sandbox) override {
    if (std::find(features_.begin(), features_.end(), "egress.log") == features_.end()) {
      return sbx::Unsupported("the endpoint does not offer egress.log");
    }
    ASSIGN_OR_RETURN(Answer a, Call("GET", fmt::format("/v1/sandboxes/{}/gateway-log", sandbox),
                                    std::nullopt, 0));
    if (a.status == 404) return sbx::Unsupported("no gateway-log endpoint (404)");
    RETURN_IF_ERROR(Require2xx("gateway-log", a));
    if (!a.body.contains("decisions") || !a.body["decisions"].is_array()) {
      return Fail("GET .../gateway-log", "answer lacks \"decisions\" (an array)");
    }
    return a.body["decisions"];
  }

 private:
  struct Answer {
    int status = 0;
    json body;
    std::string text;
    double retry_after_s = -1;  // Retry-After in seconds (-1: none)
  };

  sbx::Status Fail(const std::string& what, const std::string& message) const {
    return sbx::Internal(fmt::format("{} {}: {}", ep_.ToString(), what, message));
  }

  sbx::Status Require2xx(const char* op, const Answer& a) const {
    if (a.status / 100 == 2) return sbx::Status::Ok();
    std::string detail = a.text.substr(0, 300);
    if (a.status == 401) {
      return sbx::Status(sbx::Code::kUnauthenticated,
                         fmt::format("{} {}: 401: the endpoint refused the token (give --token or "
                                     "SANDCHECK_TOKEN): {}",
                                     ep_.ToString(), op, detail));
    }
    return Fail(op, fmt::format("HTTP {}: {}", a.status, detail));
  }

  sbx::StatusOr<OpAnswer> Op(const char* op, const Answer& a) {
    RETURN_IF_ERROR(Require2xx(op, a));
    auto r = ParseOpAnswer(a.body.is_object() ? a.body : json::object());
    if (!r.ok()) return Fail(op, r.status().message());
    r->http_status = a.status;
    return r;
  }

  // The credential of a create (or one-shot run) request: the second one when it names the
  // second credential's tenant.
  const std::string& TokenFor(const json& request) const {
    if (!second_tenant_.empty() && request.is_object() &&
        request.value("tenant", "") == second_tenant_)
      return options_.second_token;
    return options_.token;
  }

  // `token`: the credential to send; "" = the one that made the sandbox the path names (the
  // first credential for every other path); kNoToken = none at all.
  sbx::StatusOr<Answer> Call(const std::string& method, const std::string& path,
                             const std::optional<json>& body, double extra_s,
                             const std::string& token_in = {}) {
    std::string token = &token_in == &kNoToken ? std::string() : token_in;
    if (token.empty() && &token_in != &kNoToken) {
      token = options_.token;
      static constexpr std::string_view kPrefix = "/v1/sandboxes/";
      if (!second_owned_.empty() && path.rfind(kPrefix, 0) == 0) {
        std::string id =
            path.substr(kPrefix.size(), path.find('/', kPrefix.size()) - kPrefix.size());
        if (second_owned_.count(id)) token = options_.second_token;
      }
    }
    sbx::http::Request req;
    req.method = method;
    req.path = path;
    req.headers = {{"Accept", "application/json"}, {"User-Agent", "sandcheck"}};
    if (!token.empty()) req.headers.push_back({"Authorization", "Bearer " + token});
    if (body) {
      req.headers.push_back({"Content-Type", "application/json"});
      req.body = body->dump();
    }
    auto r = sbx::http::Call(ep_, req,
                             {.timeout_s = options_.call_timeout_s + extra_s,
                              .interrupted = [] { return Interrupted(); },
                              .who = "the target"});
    if (!r.ok()) return r.status();
    Answer a;
    a.status = r->status;
    a.text = r->body;
    if (const std::string* ra = r->Header("retry-after")) {
      char* end = nullptr;
      double v = std::strtod(ra->c_str(), &end);
      if (end != ra->c_str() && *end == '\0' && v >= 0 && v <= 3600) a.retry_after_s = v;
    }
    a.body = r->body.empty() ? json::object()
                             : json::parse(r->body, nullptr, /*allow_exceptions=*/false);
    if (a.body.is_discarded()) {
      if (a.status / 100 == 2) {
        return Fail(method + " " + path,
                    "the body is not JSON: \"" + r->body.substr(0, 200) + "\"");
      }
      a.body = json::object();
    }
    return a;
  }

  static constexpr int kSettleBoundS = 60;
  static inline const std::string kNoToken;  // Call(..., kNoToken): no Authorization header

  std::string spec_;
  sbx::http::Endpoint ep_;
  TargetOptions options_;
  std::vector<std::string> features_;
  std::string second_tenant_;           // whose --second-token is ("" = none given)
  std::set<std::string> second_owned_;  // sandboxes made with the second token
  bool observable_background_ = false;  // the last Settle saw background_outstanding
};

}  // namespace

sbx::StatusOr<std::unique_ptr<Target>> MakeHttpTarget(const std::string& spec,
                                                      const TargetOptions& options) {
  ASSIGN_OR_RETURN(sbx::http::Endpoint ep, sbx::http::ParseEndpoint(spec));
  return std::unique_ptr<Target>(new HttpDriver(spec, std::move(ep), options));
}

}  // namespace sandcheck
