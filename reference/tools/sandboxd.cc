// sandboxd: the reference runtime as a daemon serving the Execution API over HTTP,
// authenticated per tenant (PROD-1). docs/sandboxd.md has the API, the configuration and the
// exit codes; the work is in reference/src/api/.
//
// Exit status: 0 clean shutdown on SIGTERM/SIGINT (every sandbox destroyed, the socket
// removed); 1 requests still running after drain_timeout_s (the process exits anyway; the
// reaper of the next start reclaims what they held); 2 bad usage or configuration; 3 cannot
// start (not root, socket or port busy, runtime cannot open).
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "api/api_service.h"
#include "api/config.h"
#include "api/http_server.h"
#include "api/listener.h"
#include "api/tls_terminator.h"
#include <nlohmann/json.hpp>
#include "sbx/runtime.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitNotDrained = 1;
constexpr int kExitUsage = 2;
constexpr int kExitCannotStart = 3;

void Log(std::string_view line) {
  // One fwrite per line: concurrent workers do not interleave within a line.
  std::string s = fmt::format("sandboxd: {}\n", line);
  fwrite(s.data(), 1, s.size(), stderr);
}

int Usage(std::string_view error) {
  Log(error);
  fmt::print(stderr, "{}", sbx::api::kDaemonUsage);
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sbx;
  using namespace sbx::api;
  std::vector<std::string> argv_v(argv + 1, argv + argc);
  auto args = ParseDaemonArgs(argv_v);
  if (!args.ok()) return Usage(args.status().message());
  if (args->help) {
    fmt::print("{}", kDaemonUsage);
    return kExitOk;
  }
  auto config = LoadDaemonConfig(args->config_path);
  if (!config.ok()) {
    Log(config.status().message());
    return kExitUsage;
  }
  for (const auto& w : config->warnings) Log("warning: " + w);
  auto address = ParseListenAddress(args->listen.empty() ? config->listen : args->listen);
  if (!address.ok()) return Usage(address.status().message());
  const bool tls = config->tls.has_value() && address->kind == ListenAddress::Kind::kTcp;
  if (!IsLoopback(*address) && !(args->allow_remote || config->allow_remote)) {
    Log(fmt::format("refusing to listen on {}: not a loopback address (use --allow-remote{})",
                    address->ToString(),
                    tls ? "" : ", and configure \"tls\": without it tokens travel in clear"));
    return kExitUsage;
  }
  // The certificate and key are loaded before anything starts: a bad file is exit 2.
  std::shared_ptr<TlsServerContext> tls_context;
  if (tls) {
    auto ctx = TlsServerContext::Create(config->tls->cert_file, config->tls->key_file,
                                        config->tls->client_ca_file);
    if (!ctx.ok()) {
      Log(ctx.status().message());
      return kExitUsage;
    }
    tls_context = std::move(ctx).value();
  } else if (config->tls) {
    Log("warning: \"tls\" applies to TCP only; the unix socket is served without it");
  }
  if (geteuid() != 0) {
    Log("needs root: the runtime creates namespaces, cgroups and mounts");
    return kExitCannotStart;
  }

  std::vector<TenantCredential> creds;
  ServiceOptions service_options;
  std::vector<std::string> names;
  for (auto& t : config->tenants) {
    creds.push_back({t.name, std::move(t.token)});
    service_options.max_sandboxes[t.name] = t.max_sandboxes;
    if (!t.floor.empty()) service_options.floors[t.name] = t.floor;
    names.push_back(t.name);
  }
  auto auth = Authenticator::Create(std::move(creds));
  if (!auth.ok()) {
    Log(auth.status().message());
    return kExitUsage;
  }

  // Signals are taken synchronously by this thread; block them before any thread exists so
  // every thread (runtime, server) inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN);  // a daemon outlives the terminal that started it

  auto listener = Listener::Open(*address);
  if (!listener.ok()) {
    Log(fmt::format("cannot listen on {}: {}", address->ToString(), listener.status().message()));
    return kExitCannotStart;
  }
  RuntimeOptions runtime_options;
  runtime_options.start_reaper = true;  // a daemon is where orphans of crashed runs get swept
  runtime_options.warm_pool = true;     // POST /v1/run takes pre-initialised sandboxes (POOL-2)
  runtime_options.pool_ceiling = config->pool_ceiling;
  runtime_options.pool_reuse_per_tool = config->pool_reuse_per_tool;
  runtime_options.pool_reuse_total = config->pool_reuse_total;
  runtime_options.background_threads = config->background_threads;
  runtime_options.reclaim_backlog = config->reclaim_backlog;
  runtime_options.remote_workers = config->remote_workers;
  runtime_options.remote_call_timeout_s = config->remote_call_timeout_s;
  runtime_options.tenant_floors = service_options.floors;  // SEL-2
  auto runtime = Runtime::Open(runtime_options);
  if (!runtime.ok()) {
    Log(fmt::format("cannot open the runtime: {}", runtime.status().ToString()));
    return kExitCannotStart;
  }
  // GET /v1/info's capacity.server: the server's bounds and where they stand (issue 17).
  std::atomic<HttpServer*> serving{nullptr};
  service_options.server_capacity = [&serving, &config]() -> nlohmann::json {
    nlohmann::json j = {{"workers", config->workers}, {"max_connections", config->max_connections}};
    if (HttpServer* s = serving.load()) {
      auto st = s->stats();
      j["open_connections"] = st.open_connections;
      j["busy_workers"] = st.busy_workers;
      j["refused_connections"] = st.refused;
    }
    return j;
  };
  auto service =
      std::make_unique<ApiService>(runtime->get(), std::move(auth).value(), service_options);
  ServerOptions server_options;
  server_options.workers = config->workers;
  server_options.max_connections = config->max_connections;
  server_options.access_log = [](std::string_view line) { Log(line); };
  server_options.tls = tls_context;
  ApiService* svc = service.get();
  auto server = std::make_unique<HttpServer>(
      std::move(listener).value(), [svc](const HttpRequest& r) { return svc->Handle(r); },
      [svc](const HttpRequest& h) { return svc->HeadCheck(h); }, server_options);
  if (Status s = server->Start(); !s.ok()) {
    Log(fmt::format("cannot start serving: {}", s.ToString()));
    return kExitCannotStart;
  }
  serving = server.get();
  Log(fmt::format("serving the Execution API v1 on {}{} for tenants {} (pid {})",
                  server->address().ToString(),
                  !tls                     ? ""
                  : tls_context->mutual() ? " (TLS, client certificates required)"
                                          : " (TLS)",
                  fmt::join(names, ", "), getpid()));

  siginfo_t info{};
  while (sigwaitinfo(&stop_signals, &info) < 0) {
  }
  int live = 0;
  for (const auto& [t, n] : service->Counts()) live += n;
  Log(fmt::format("{}: stopping; {} sandboxes to destroy",
                  info.si_signo == SIGTERM ? "SIGTERM" : "SIGINT", live));
  if (!server->Stop(config->drain_timeout_s)) {
    Log(fmt::format("requests still running after {} s; exiting without waiting for them",
                    config->drain_timeout_s));
    std::_Exit(kExitNotDrained);
  }
  server.reset();
  service.reset();
  runtime->reset();  // destroys every sandbox left
  Log("stopped");
  return kExitOk;
}
