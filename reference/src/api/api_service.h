// The Execution API over HTTP (docs/sandboxd.md): routes, authentication, tenancy, and the
// translation between HTTP and sbx::Runtime. It knows nothing of sockets (http_server.h calls
// it), so it is tested with a fake Runtime.
//
// PROD-1: every request carries "Authorization: Bearer TOKEN" (else 401 with
// WWW-Authenticate); the service records which tenant created each sandbox, and a sandbox of
// another tenant answers exactly as a sandbox that does not exist (404, same body). The tenant
// a sandbox is created for is always the authenticated one (so warm pools never cross tenants,
// POOL-4); a "tenant" in the body must be absent or the same.
//
// Thread-safety: Handle() and HeadCheck() may be called concurrently; the Runtime must be
// thread-safe (it is) and outlive the service.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "api/auth.h"
#include "api/http_message.h"
#include "sbx/runtime.h"

namespace sbx::api {

struct ServiceOptions {
  std::map<std::string, int> max_sandboxes;  // per tenant; absent = kDefaultMaxSandboxes
  // SEL-2: per tenant, its policy floor (GET /v1/info's "tenant_floor"; the runtime enforces it).
  std::map<std::string, std::string> floors;
  static constexpr int kDefaultMaxSandboxes = 16;
  // The server's own bounds and counters for GET /v1/info's "capacity.server" (issue 17).
  std::function<nlohmann::json()> server_capacity;
};

class ApiService {
 public:
  ApiService(Runtime* runtime, Authenticator auth, ServiceOptions options);

  HttpResponse Handle(const HttpRequest& request);

  // For HttpServer's head check: the 401 answer for a head without a valid token (before its
  // body is read), or nullopt.
  std::optional<HttpResponse> HeadCheck(const HttpRequest& head) const;

  // Sandboxes the service knows, per tenant (for tests and the shutdown log).
  std::map<std::string, int> Counts() const;

 private:
  struct Route;
  HttpResponse Dispatch(const HttpRequest& req, const std::string& tenant);
  HttpResponse Info(const std::string& tenant);
  HttpResponse Create(const HttpRequest& req, const std::string& tenant);
  HttpResponse List(const std::string& tenant);
  HttpResponse Get(const std::string& id, const std::string& tenant);
  HttpResponse Exec(const HttpRequest& req, const std::string& id, const std::string& tenant);
  HttpResponse Lifecycle(const HttpRequest& req, const std::string& id, const std::string& op,
                         const std::string& tenant);
  HttpResponse PutFile(const HttpRequest& req, const std::string& id, const std::string& tenant);
  HttpResponse GatewayLog(const std::string& id, const std::string& tenant);
  HttpResponse Run(const HttpRequest& req, const std::string& tenant);

  // True if `id` exists and belongs to `tenant`. Both "no such sandbox" and "someone else's"
  // answer NotFoundResponse(id).
  bool Owns(const std::string& id, const std::string& tenant) const;
  void Forget(const std::string& id);
  int MaxSandboxes(const std::string& tenant) const;

  Runtime* runtime_;
  Authenticator auth_;
  ServiceOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, std::string> owner_;  // sandbox id → tenant
  std::map<std::string, int> reserved_;       // tenant → live + being created
};

// The 404 answer for a sandbox the caller may not see: identical whether it does not exist or
// belongs to another tenant.
HttpResponse NotFoundResponse(const std::string& id);
HttpResponse ErrorResponse(const Status& status);

}  // namespace sbx::api
