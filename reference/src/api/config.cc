#include "api/config.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "api/listener.h"
#include "sbx/http_client.h"
#include "select/selection.h"
#include "wire/token.h"
#include "wire/wire.h"

namespace sbx::api {

using nlohmann::json;

const char* const kDaemonUsage =
    R"(usage: sandboxd --config FILE [--socket PATH | --listen HOST:PORT] [--allow-remote]

Serves the reference runtime's Execution API over HTTP, authenticated per tenant (PROD-1).

  --config FILE       tenants and their tokens (JSON; see docs/sandboxd.md)
  --socket PATH       listen on this unix socket (default /run/sandcheck/sandboxd.sock, mode 0660)
  --listen HOST:PORT  listen on TCP instead; only loopback addresses unless --allow-remote
  --allow-remote      accept a non-loopback --listen address
  --help              this text

Exit status: 0 clean shutdown (SIGTERM/SIGINT); 1 running requests did not finish within
drain_timeout_s; 2 bad usage or configuration; 3 cannot start (not root, socket busy).
)";

namespace {

Status CheckKeys(const json& j, std::string_view what, std::initializer_list<const char*> allowed) {
  if (!j.is_object()) return InvalidArgument(fmt::format("{}: expected a JSON object", what));
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const char* a : allowed) known = known || it.key() == a;
    if (!known) return InvalidArgument(fmt::format("{}: unknown key '{}'", what, it.key()));
  }
  return Status::Ok();
}

StatusOr<int> GetInt(const json& j, const char* key, std::string_view what, int lo, int hi,
                     int dflt) {
  if (!j.contains(key)) return dflt;
  const json& v = j[key];
  if (!v.is_number_integer())
    return InvalidArgument(fmt::format("{}.{}: expected an integer", what, key));
  int64_t n = v.get<int64_t>();
  if (n < lo || n > hi)
    return InvalidArgument(fmt::format("{}.{}: {} not in {}..{}", what, key, n, lo, hi));
  return static_cast<int>(n);
}

StatusOr<std::string> ReadTokenFile(const std::string& path) {
  struct stat st {};
  // Any problem with the file is a configuration error (exit 2), whatever errno says.
  if (stat(path.c_str(), &st) != 0)
    return InvalidArgument(ErrnoStatus("token_file " + path).message());
  if (!S_ISREG(st.st_mode))
    return InvalidArgument(fmt::format("token_file {}: not a regular file", path));
  // SECURITY: a token file readable by everyone is a leaked token.
  if (st.st_mode & S_IROTH) {
    return InvalidArgument(
        fmt::format("token_file {}: readable by others (chmod o-r {})", path, path));
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return InvalidArgument(ErrnoStatus("token_file " + path).message());
  std::string token;
  std::getline(f, token, '\0');
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  return token;
}

// A PEM file named by `what` (relative to base_dir): it must be a regular file; a key
// (`secret`) must not be readable by others, like a token file.
StatusOr<std::string> FilePath(const json& j, const char* key, std::string_view what,
                               const std::string& base_dir, bool secret) {
  if (!j[key].is_string() || j[key].get<std::string>().empty())
    return InvalidArgument(fmt::format("{}.{}: expected a file name", what, key));
  std::filesystem::path p = j[key].get<std::string>();
  if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
  std::string path = p.string();
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    return InvalidArgument(ErrnoStatus(fmt::format("{}.{} {}", what, key, path)).message());
  if (!S_ISREG(st.st_mode))
    return InvalidArgument(fmt::format("{}.{} {}: not a regular file", what, key, path));
  // SECURITY: a private key readable by everyone is a leaked identity.
  if (secret && (st.st_mode & S_IROTH)) {
    return InvalidArgument(
        fmt::format("{}.{} {}: readable by others (chmod o-r {})", what, key, path, path));
  }
  return path;
}

}  // namespace

StatusOr<DaemonConfig> ParseDaemonConfig(const json& j, const std::string& base_dir) {
  RETURN_IF_ERROR(CheckKeys(
      j, "config",
      {"tenants", "listen", "allow_remote", "workers", "max_connections", "pool_ceiling",
                       "pool_reuse_per_tool", "pool_reuse_total", "background_threads", "reclaim_backlog", "drain_timeout_s",
                       "tls", "remote_workers", "remote_call_timeout_s"}));
  DaemonConfig c;
  if (!j.contains("tenants") || !j["tenants"].is_object() || j["tenants"].empty()) {
    return InvalidArgument("config.tenants: required, an object with at least one tenant");
  }
  std::vector<TenantCredential> creds;
  for (auto it = j["tenants"].begin(); it != j["tenants"].end(); ++it) {
    std::string what = fmt::format("config.tenants.{}", it.key());
    RETURN_IF_ERROR(ValidateTenantName(it.key()).WithContext("config.tenants"));
    RETURN_IF_ERROR(CheckKeys(it.value(), what, {"token", "token_file", "max_sandboxes", "floor"}));
    const json& t = it.value();
    TenantConfig tc;
    tc.name = it.key();
    bool has_token = t.contains("token"), has_file = t.contains("token_file");
    if (has_token == has_file)
      return InvalidArgument(fmt::format("{}: exactly one of token and token_file", what));
    if (has_token) {
      if (!t["token"].is_string())
        return InvalidArgument(fmt::format("{}.token: expected a string", what));
      tc.token = t["token"].get<std::string>();
    } else {
      if (!t["token_file"].is_string())
        return InvalidArgument(fmt::format("{}.token_file: expected a string", what));
      std::filesystem::path p = t["token_file"].get<std::string>();
      if (p.is_relative()) p = std::filesystem::path(base_dir) / p;
      ASSIGN_OR_RETURN(tc.token, ReadTokenFile(p.string()));
    }
    RETURN_IF_ERROR(wire::ValidateToken(tc.token).WithContext(what));
    ASSIGN_OR_RETURN(tc.max_sandboxes, GetInt(t, "max_sandboxes", what, 1, 10000, 16));
    if (t.contains("floor")) {
      if (!t["floor"].is_string() || !selection::ParseBackend(t["floor"].get<std::string>()).ok())
        return InvalidArgument(fmt::format(
            "{}.floor: a backend (native, wasm, oci, gvisor, microvm, kubernetes, remote)", what));
      tc.floor = t["floor"].get<std::string>();
    }
    c.tenants.push_back(tc);
    creds.push_back({tc.name, tc.token});
  }
  // Duplicate tokens, checked the same way the server will check them.
  auto auth = Authenticator::Create(std::move(creds));
  if (!auth.ok()) return auth.status().WithContext("config.tenants");
  if (j.contains("listen")) {
    if (!j["listen"].is_string()) return InvalidArgument("config.listen: expected a string");
    c.listen = j["listen"].get<std::string>();
  }
  if (j.contains("allow_remote")) {
    if (!j["allow_remote"].is_boolean())
      return InvalidArgument("config.allow_remote: expected true or false");
    c.allow_remote = j["allow_remote"].get<bool>();
  }
  ASSIGN_OR_RETURN(c.workers, GetInt(j, "workers", "config", 1, 256, 16));
  ASSIGN_OR_RETURN(c.max_connections, GetInt(j, "max_connections", "config", 1, 4096, 256));
  ASSIGN_OR_RETURN(c.pool_ceiling, GetInt(j, "pool_ceiling", "config", 1, 256, 8));
  ASSIGN_OR_RETURN(c.pool_reuse_per_tool, GetInt(j, "pool_reuse_per_tool", "config", 1, 256, 2));
  ASSIGN_OR_RETURN(c.pool_reuse_total, GetInt(j, "pool_reuse_total", "config", 1, 4096, 32));
  ASSIGN_OR_RETURN(c.background_threads, GetInt(j, "background_threads", "config", 1, 16, 2));
  ASSIGN_OR_RETURN(c.reclaim_backlog, GetInt(j, "reclaim_backlog", "config", 1, 1024, 16));
  if (j.contains("drain_timeout_s")) {
    if (!j["drain_timeout_s"].is_number())
      return InvalidArgument("config.drain_timeout_s: expected a number");
    c.drain_timeout_s = j["drain_timeout_s"].get<double>();
    if (!(c.drain_timeout_s >= 0 && c.drain_timeout_s <= 3600)) {
      return InvalidArgument("config.drain_timeout_s: not in 0..3600");
    }
  }
  if (j.contains("tls")) {
    const json& t = j["tls"];
    RETURN_IF_ERROR(CheckKeys(t, "config.tls", {"cert_file", "key_file", "client_ca_file"}));
    if (!t.contains("cert_file") || !t.contains("key_file"))
      return InvalidArgument("config.tls: cert_file and key_file are required");
    TlsConfig tc;
    ASSIGN_OR_RETURN(tc.cert_file, FilePath(t, "cert_file", "config.tls", base_dir, false));
    ASSIGN_OR_RETURN(tc.key_file, FilePath(t, "key_file", "config.tls", base_dir, true));
    if (t.contains("client_ca_file")) {
      ASSIGN_OR_RETURN(tc.client_ca_file,
                       FilePath(t, "client_ca_file", "config.tls", base_dir, false));
    }
    c.tls = std::move(tc);
  }
  if (j.contains("remote_workers")) {
    const json& ws = j["remote_workers"];
    if (!ws.is_array()) return InvalidArgument("config.remote_workers: expected an array");
    std::set<std::string> names;
    for (size_t i = 0; i < ws.size(); ++i) {
      std::string what = fmt::format("config.remote_workers[{}]", i);
      const json& w = ws[i];
      if (!w.is_object()) return InvalidArgument(what + ": expected an object");
      RETURN_IF_ERROR(CheckKeys(w, what,
                                {"name", "url", "tokens", "ca_file", "pin_sha256",
                                 "client_cert_file", "client_key_file"}));
      RemoteWorker rw;
      if (!w.contains("name") || !w["name"].is_string())
        return InvalidArgument(what + ".name: required, a string");
      rw.name = w["name"].get<std::string>();
      RETURN_IF_ERROR(ValidateTenantName(rw.name).WithContext(what + ".name"));
      if (!names.insert(rw.name).second)
        return InvalidArgument(fmt::format("{}.name: '{}' twice", what, rw.name));
      if (!w.contains("url") || !w["url"].is_string())
        return InvalidArgument(what + ".url: required, a string (unix:PATH or http://HOST:PORT)");
      rw.url = w["url"].get<std::string>();
      auto ep = http::ParseEndpoint(rw.url);
      if (!ep.ok()) return ep.status().WithContext(what + ".url");
      const bool trust_keys = w.contains("ca_file") || w.contains("pin_sha256") ||
                              w.contains("client_cert_file") || w.contains("client_key_file");
      if (ep->tls) {
        if (!w.contains("ca_file") && !w.contains("pin_sha256")) {
          return InvalidArgument(fmt::format(
              "{}: an https:// worker needs ca_file or pin_sha256 (or both): unverified TLS is "
              "refused",
              what));
        }
        if (w.contains("ca_file")) {
          ASSIGN_OR_RETURN(rw.ca_file, FilePath(w, "ca_file", what, base_dir, false));
        }
        if (w.contains("pin_sha256")) {
          if (!w["pin_sha256"].is_string())
            return InvalidArgument(what + ".pin_sha256: expected a string");
          auto pin = http::NormalizePinSha256(w["pin_sha256"].get<std::string>());
          if (!pin.ok()) return pin.status().WithContext(what);
          rw.pin_sha256 = *pin;
        }
        if (w.contains("client_cert_file") != w.contains("client_key_file"))
          return InvalidArgument(what + ": client_cert_file and client_key_file go together");
        if (w.contains("client_cert_file")) {
          ASSIGN_OR_RETURN(rw.client_cert_file,
                           FilePath(w, "client_cert_file", what, base_dir, false));
          ASSIGN_OR_RETURN(rw.client_key_file,
                           FilePath(w, "client_key_file", what, base_dir, true));
        }
      } else if (trust_keys) {
        return InvalidArgument(fmt::format(
            "{}: ca_file, pin_sha256 and client certificates need an https:// url", what));
      } else if (!ep->unix_socket) {
        // SECURITY: the tokens travel with every call: plain TCP only to this host (issue 14;
        // docs/backends.md "remote"). Over https the tokens are encrypted and the worker
        // verified, so it may be anywhere.
        std::string host = ep->host;
        auto addr = ParseListenAddress(
            (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
            std::to_string(ep->port));
        if (host != "localhost" && (!addr.ok() || !IsLoopback(*addr))) {
          return InvalidArgument(fmt::format(
              "{}.url: {} is not on this host: a worker's token would cross the network in "
              "clear (use https:// with ca_file or pin_sha256, a loopback address or a unix "
              "socket)",
              what, rw.url));
        }
      }
      if (!w.contains("tokens") || !w["tokens"].is_object() || w["tokens"].empty())
        return InvalidArgument(what + ".tokens: required, tenant -> token on that worker");
      for (auto t = w["tokens"].begin(); t != w["tokens"].end(); ++t) {
        std::string tw = fmt::format("{}.tokens.{}", what, t.key());
        RETURN_IF_ERROR(ValidateTenantName(t.key()).WithContext(what + ".tokens"));
        if (!t.value().is_string()) return InvalidArgument(tw + ": expected a string");
        std::string token = t.value().get<std::string>();
        RETURN_IF_ERROR(wire::ValidateToken(token).WithContext(tw));
        rw.tokens[t.key()] = std::move(token);
      }
      c.remote_workers.push_back(std::move(rw));
    }
  }
  if (j.contains("remote_call_timeout_s")) {
    if (!j["remote_call_timeout_s"].is_number())
      return InvalidArgument("config.remote_call_timeout_s: expected a number");
    c.remote_call_timeout_s = j["remote_call_timeout_s"].get<double>();
    if (!(c.remote_call_timeout_s >= 0.1 && c.remote_call_timeout_s <= 600))
      return InvalidArgument("config.remote_call_timeout_s: not in 0.1..600");
  }
  return c;
}

StatusOr<DaemonConfig> LoadDaemonConfig(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return ErrnoStatus("config " + path);
  if (!S_ISREG(st.st_mode))
    return InvalidArgument(fmt::format("config {}: not a regular file", path));
  std::ifstream f(path, std::ios::binary);
  if (!f) return ErrnoStatus("config " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  auto j = wire::ParseJsonBody(text);
  wire::ZeroString(&text);
  if (!j.ok()) return j.status().WithContext("config " + path);
  std::string base = std::filesystem::path(path).parent_path().string();
  auto c = ParseDaemonConfig(*j, base.empty() ? "." : base);
  if (!c.ok()) return c.status().WithContext("config " + path);
  bool inline_token = false;
  for (const auto& [name, t] : j->at("tenants").items())
    inline_token = inline_token || t.contains("token");
  inline_token = inline_token || !c->remote_workers.empty();  // their tokens are inline
  if (inline_token && (st.st_mode & S_IROTH)) {
    c->warnings.push_back(fmt::format(
        "config {} holds tokens and is readable by others: chmod o-r it, or use token_file", path));
  }
  return c;
}

StatusOr<DaemonArgs> ParseDaemonArgs(const std::vector<std::string>& args) {
  DaemonArgs a;
  bool socket = false, listen = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& f = args[i];
    auto value = [&]() -> StatusOr<std::string> {
      if (i + 1 >= args.size()) return InvalidArgument(fmt::format("{} needs a value", f));
      return args[++i];
    };
    if (f == "--help" || f == "-h") {
      a.help = true;
    } else if (f == "--config") {
      ASSIGN_OR_RETURN(a.config_path, value());
    } else if (f == "--socket") {
      ASSIGN_OR_RETURN(std::string p, value());
      if (p.empty() || p[0] != '/') return InvalidArgument("--socket: expected an absolute path");
      a.listen = "unix:" + p;
      socket = true;
    } else if (f == "--listen") {
      ASSIGN_OR_RETURN(a.listen, value());
      listen = true;
    } else if (f == "--allow-remote") {
      a.allow_remote = true;
    } else {
      return InvalidArgument(fmt::format("unknown argument '{}'", f));
    }
  }
  if (a.help) return a;
  if (socket && listen) return InvalidArgument("--socket and --listen exclude each other");
  if (a.config_path.empty()) return InvalidArgument("--config FILE is required");
  return a;
}

}  // namespace sbx::api
