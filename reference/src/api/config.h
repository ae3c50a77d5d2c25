// sandboxd's configuration file and command line (docs/sandboxd.md, "Configuration").
//
//   {
//     "tenants": {                       required, at least one
//       "alice": {"token": "..."},        token: 16..512 token68 characters
//       "bob": {"token_file": "bob.token", "max_sandboxes": 4}
//     },
//     "listen": "unix:/run/sandcheck/sandboxd.sock",   default; or "127.0.0.1:8080"
//     "allow_remote": false,             listen on a non-loopback address (default false)
//     "workers": 16,                     request threads (1..256)
//     "max_connections": 256,            open connections (1..4096)
//     "pool_ceiling": 8,                 warm sandboxes kept ready per pool (1..256)
//     "pool_reuse_per_tool": 2,          trusted reset sandboxes kept per (tenant, tool) (1..256)
//     "pool_reuse_total": 32,            ... and over all keys of a pool (1..4096)
//     "background_threads": 2,           reclaim / refill threads (1..16)
//     "reclaim_backlog": 16,             reclaim tasks that may wait (1..1024); past it, a
//                                        request reclaims its own sandbox before answering
//     "drain_timeout_s": 60,             on SIGTERM, how long running requests may finish
//     "tls": {"cert_file": "server.pem", "key_file": "server.key",     TCP speaks TLS (optional)
//             "client_ca_file": "clients-ca.pem"},                  mutual TLS (optional)
//     "remote_workers": [                the remote backend's workers (BK-7; none: unsupported)
//       {"name": "w1", "url": "unix:/run/w1.sock" | "http://127.0.0.1:8081"
//                             | "https://HOST:PORT",  with "ca_file" and/or "pin_sha256",
//                                                     optional "client_cert_file"+"client_key_file"
//        "tokens": {"alice": "..."}}     each tenant's token on that worker
//     ],
//     "remote_call_timeout_s": 10        bound of each forwarded call (an exec: its timeout + it)
//   }
// Unknown keys are errors at every level (style.md habit 6). A tenant has exactly one of
// "token" and "token_file" (relative paths are relative to the config file; the file must not
// be readable by others); "max_sandboxes" (default 16, 1..10000) bounds its live sandboxes.
// File paths of "tls" and of workers are relative to the config file too; key files must not be
// readable by others. Plain http:// workers must be on this host; https:// ones may be anywhere.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "api/auth.h"
#include "sbx/runtime.h"
#include "sbx/status.h"

namespace sbx::api {

inline constexpr const char* kDefaultSocket = "/run/sandcheck/sandboxd.sock";

struct TenantConfig {
  std::string name;
  std::string token;
  int max_sandboxes = 16;
  std::string floor;  // SEL-2: the tenant policy's minimum isolation (a backend); "" = none
};

// "tls": the server's certificate (chain) and key, and the CA of client certificates (mutual
// TLS; "" = none asked for). Paths absolute once parsed.
struct TlsConfig {
  std::string cert_file, key_file, client_ca_file;
};

struct DaemonConfig {
  std::vector<TenantConfig> tenants;
  std::string listen = std::string("unix:") + kDefaultSocket;
  bool allow_remote = false;
  int workers = 16;
  int max_connections = 256;
  int pool_ceiling = 8;
  int pool_reuse_per_tool = 2;
  int pool_reuse_total = 32;
  int background_threads = 2;
  int reclaim_backlog = 16;
  double drain_timeout_s = 60;
  std::optional<TlsConfig> tls;
  std::vector<RemoteWorker> remote_workers;
  double remote_call_timeout_s = 10;
  std::vector<std::string> warnings;  // e.g. an inline token in a world-readable file
};

// `base_dir` resolves relative paths (token_file, tls, workers' files).
StatusOr<DaemonConfig> ParseDaemonConfig(const nlohmann::json& j, const std::string& base_dir);
StatusOr<DaemonConfig> LoadDaemonConfig(const std::string& path);

struct DaemonArgs {
  std::string config_path;
  std::string listen;  // "" = from the config; else "unix:PATH" or "HOST:PORT"
  bool allow_remote = false;
  bool help = false;
};

// sandboxd --config FILE [--socket PATH | --listen HOST:PORT] [--allow-remote] [--help]
StatusOr<DaemonArgs> ParseDaemonArgs(const std::vector<std::string>& args);

extern const char* const kDaemonUsage;

}  // namespace sbx::api
