#include "sbx/model.h"

#include <algorithm>
#include <cctype>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sbx/ascii.h"
#include "sbx/units.h"

namespace sbx {

using nlohmann::json;

const char* ExecStatusName(ExecStatus s) {
  switch (s) {
    case ExecStatus::kOk: return "ok";
    case ExecStatus::kTimeout: return "timeout";
    case ExecStatus::kResourceExceeded: return "resource_exceeded";
    case ExecStatus::kToolError: return "tool_error";
    case ExecStatus::kSandboxUnavailable: return "sandbox_unavailable";
  }
  return "tool_error";
}

const char* SandboxStateName(SandboxState s) {
  switch (s) {
    case SandboxState::kRunning: return "RUNNING";
    case SandboxState::kCrashed: return "CRASHED";
    case SandboxState::kSuspended: return "SUSPENDED";
    case SandboxState::kDestroyed: return "DESTROYED";
  }
  return "CRASHED";
}

StatusOr<Trust> ParseTrust(std::string_view s) {
  if (s == "first_party" || s == "first-party") return Trust::kFirstParty;
  if (s == "verified") return Trust::kVerified;
  if (s == "untrusted") return Trust::kUntrusted;
  if (s == "unverified") return Trust::kUnverified;
  return InvalidArgument(fmt::format(
      "trust: '{}' is not one of first_party, verified, untrusted, unverified", s));
}

const char* TrustName(Trust t) {
  switch (t) {
    case Trust::kFirstParty: return "first_party";
    case Trust::kVerified: return "verified";
    case Trust::kUntrusted: return "untrusted";
    case Trust::kUnverified: return "unverified";
  }
  return "untrusted";
}

void to_json(json& j, const StageTimings& s) {
  j = json::object();
  auto put = [&](const char* k, double v) {
    if (v >= 0) j[k] = v;
  };
  put("allocate", s.allocate);
  put("initialize", s.initialize);
  put("inject_context", s.inject_context);
  put("execute", s.execute);
  put("collect", s.collect);
  put("destroy", s.destroy);
  put("cleanup", s.cleanup);
}

void to_json(json& j, const ResourceUsage& u) {
  j = json{{"cpu_seconds", u.cpu_seconds},         {"memory_peak_bytes", u.memory_peak_bytes},
           {"oom_kills", u.oom_kills},             {"pids_peak", u.pids_peak},
           {"disk_used_bytes", u.disk_used_bytes}, {"throttled_seconds", u.throttled_seconds}};
}

void to_json(json& j, const ExecResult& r) {
  j = json{{"status", ExecStatusName(r.status)},
           {"state", SandboxStateName(r.state)},
           {"backend", r.backend},
           {"exit", r.exit_code},
           {"signal", r.signal},
           {"stdout", r.stdout_tail},
           {"stderr", r.stderr_tail},
           {"stdout_bytes", r.stdout_bytes},
           {"stderr_bytes", r.stderr_bytes},
           {"seconds", r.seconds},
           {"stages", r.stages},
           {"usage", r.usage}};
  if (!r.sandbox_id.empty()) j["sandbox"] = r.sandbox_id;
  if (!r.reason.empty()) j["reason"] = r.reason;
  if (!r.error_code.empty()) j["error_code"] = r.error_code;
}

void to_json(json& j, const Limits& l) {
  j = json{{"cpu_millicores", l.cpu_millicores},
           {"memory_bytes", l.memory_bytes},
           {"pids", l.pids},
           {"disk_bytes", l.disk_bytes},
           {"fds", l.fds}};
}

void to_json(json& j, const EgressPolicy& p) {
  json rules = json::array();
  for (const auto& r : p.rules) rules.push_back({{"kind", r.kind}, {"hosts", r.hosts}, {"ports", r.ports}});
  j = json{{"rules", rules}};
}

namespace {

// Unknown keys are errors (style.md habit 6): a typo must not silently weaken a policy.
Status CheckKeys(const json& j, std::string_view what, std::initializer_list<const char*> allowed) {
  if (!j.is_object()) return InvalidArgument(fmt::format("{}: expected a JSON object", what));
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = std::any_of(allowed.begin(), allowed.end(),
                             [&](const char* a) { return it.key() == a; });
    if (!known) return InvalidArgument(fmt::format("{}: unknown key '{}'", what, it.key()));
  }
  return Status::Ok();
}

StatusOr<int64_t> GetInt(const json& j, const char* key, std::string_view what, int64_t max) {
  const json& v = j.at(key);
  if (v.is_number_integer() || v.is_number_unsigned()) {
    int64_t n = v.get<int64_t>();
    if (n < 0 || n > max) return InvalidArgument(fmt::format("{}.{}: {} out of range", what, key, n));
    return n;
  }
  return InvalidArgument(fmt::format("{}.{}: expected an integer", what, key));
}

StatusOr<std::map<std::string, std::string>> GetStringMap(const json& j, std::string_view what) {
  if (!j.is_object()) return InvalidArgument(fmt::format("{}: expected an object of strings", what));
  std::map<std::string, std::string> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_string()) {
      return InvalidArgument(fmt::format("{}.{}: expected a string", what, it.key()));
    }
    out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

bool ValidHostName(std::string_view h) {
  if (h.empty() || h.size() > 253) return false;
  size_t label = 0;
  bool all_digits_or_dots = true;
  for (size_t i = 0; i < h.size(); ++i) {
    char c = h[i];
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-')) return false;
    if (c == '-' && (label == 0 || i + 1 == h.size() || h[i + 1] == '.')) return false;
    if (!std::isdigit(static_cast<unsigned char>(c))) all_digits_or_dots = false;
    if (++label > 63) return false;
  }
  // An IP literal is not a name: rules name hosts (EGR-1, EGR-3).
  return label > 0 && !all_digits_or_dots;
}

Status ValidateRule(EgressRule& r) {
  if (r.kind != "http" && r.kind != "tls") {
    return InvalidArgument(fmt::format("egress rule kind '{}' is not http or tls", r.kind));
  }
  if (r.hosts.empty()) return InvalidArgument("egress rule: no hosts");
  if (r.ports.empty()) return InvalidArgument("egress rule: no ports");
  for (auto& h : r.hosts) {
    h = AsciiLower(h);
    if (!ValidHostName(h)) {
      return InvalidArgument(fmt::format(
          "egress rule host '{}' is not a full host name (no IP literals, no wildcards)", h));
    }
  }
  for (int p : r.ports) {
    if (p < 1 || p > 65535) return InvalidArgument(fmt::format("egress rule port {} out of range", p));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<Limits> LimitsFromJson(const json& j) {
  RETURN_IF_ERROR(CheckKeys(j, "limits", {"cpu_millicores", "memory_bytes", "pids", "disk_bytes", "fds"}));
  Limits l;
  if (j.contains("cpu_millicores")) { ASSIGN_OR_RETURN(l.cpu_millicores, GetInt(j, "cpu_millicores", "limits", 1024000)); }
  if (j.contains("memory_bytes")) { ASSIGN_OR_RETURN(l.memory_bytes, GetInt(j, "memory_bytes", "limits", int64_t{1} << 50)); }
  if (j.contains("pids")) { ASSIGN_OR_RETURN(l.pids, GetInt(j, "pids", "limits", 1 << 22)); }
  if (j.contains("disk_bytes")) { ASSIGN_OR_RETURN(l.disk_bytes, GetInt(j, "disk_bytes", "limits", int64_t{1} << 50)); }
  if (j.contains("fds")) { ASSIGN_OR_RETURN(l.fds, GetInt(j, "fds", "limits", 1 << 20)); }
  return l;
}

StatusOr<EgressPolicy> EgressFromJson(const json& j) {
  RETURN_IF_ERROR(CheckKeys(j, "egress", {"rules"}));
  EgressPolicy p;
  if (!j.contains("rules")) return p;
  if (!j["rules"].is_array()) return InvalidArgument("egress.rules: expected an array");
  for (const json& jr : j["rules"]) {
    RETURN_IF_ERROR(CheckKeys(jr, "egress rule", {"kind", "hosts", "ports"}));
    EgressRule r;
    if (!jr.contains("kind") || !jr["kind"].is_string()) return InvalidArgument("egress rule: kind missing");
    r.kind = jr["kind"].get<std::string>();
    if (!jr.contains("hosts") || !jr["hosts"].is_array()) return InvalidArgument("egress rule: hosts missing");
    for (const json& h : jr["hosts"]) {
      if (!h.is_string()) return InvalidArgument("egress rule: hosts must be strings");
      r.hosts.push_back(h.get<std::string>());
    }
    if (!jr.contains("ports") || !jr["ports"].is_array()) return InvalidArgument("egress rule: ports missing");
    for (const json& pt : jr["ports"]) {
      if (!pt.is_number_integer()) return InvalidArgument("egress rule: ports must be integers");
      r.ports.push_back(pt.get<int>());
    }
    RETURN_IF_ERROR(ValidateRule(r));
    p.rules.push_back(std::move(r));
  }
  return p;
}

StatusOr<SandboxSpec> SandboxSpecFromJson(const json& j) {
  RETURN_IF_ERROR(CheckKeys(j, "create", {"template", "backend", "tenant", "tool", "trust", "limits",
                                          "egress", "hosts", "env", "secrets"}));
  SandboxSpec s;
  auto str = [&](const char* key, std::string* out) -> Status {
    if (!j.contains(key)) return Status::Ok();
    if (!j[key].is_string()) return InvalidArgument(fmt::format("create.{}: expected a string", key));
    *out = j[key].get<std::string>();
    return Status::Ok();
  };
  RETURN_IF_ERROR(str("template", &s.template_name));
  RETURN_IF_ERROR(str("backend", &s.backend));
  RETURN_IF_ERROR(str("tenant", &s.tenant));
  RETURN_IF_ERROR(str("tool", &s.tool));
  std::string trust;
  RETURN_IF_ERROR(str("trust", &trust));
  if (!trust.empty()) { ASSIGN_OR_RETURN(s.trust, ParseTrust(trust)); }
  if (j.contains("limits")) { ASSIGN_OR_RETURN(s.limits, LimitsFromJson(j["limits"])); }
  if (j.contains("egress")) { ASSIGN_OR_RETURN(s.egress, EgressFromJson(j["egress"])); }
  if (j.contains("hosts")) {
    ASSIGN_OR_RETURN(s.hosts, GetStringMap(j["hosts"], "create.hosts"));
    for (const auto& [name, addr] : s.hosts) {
      std::string n, a;
      RETURN_IF_ERROR(ParseHostFlag(name + "=" + addr, &n, &a));
    }
  }
  if (j.contains("env")) { ASSIGN_OR_RETURN(s.env, GetStringMap(j["env"], "create.env")); }
  if (j.contains("secrets")) { ASSIGN_OR_RETURN(s.secrets, GetStringMap(j["secrets"], "create.secrets")); }
  return s;
}

StatusOr<ExecSpec> ExecSpecFromJson(const json& j) {
  RETURN_IF_ERROR(CheckKeys(j, "exec", {"sandbox", "cmd", "argv", "timeout_s", "env", "stdin"}));
  ExecSpec e;
  if (j.contains("cmd")) {
    if (!j["cmd"].is_string()) return InvalidArgument("exec.cmd: expected a string");
    e.command = j["cmd"].get<std::string>();
  }
  if (j.contains("argv")) {
    if (!j["argv"].is_array()) return InvalidArgument("exec.argv: expected an array of strings");
    for (const json& a : j["argv"]) {
      if (!a.is_string()) return InvalidArgument("exec.argv: expected an array of strings");
      e.argv.push_back(a.get<std::string>());
    }
  }
  if (e.command.empty() && e.argv.empty()) return InvalidArgument("exec: one of cmd or argv is required");
  if (j.contains("timeout_s")) {
    if (!j["timeout_s"].is_number()) return InvalidArgument("exec.timeout_s: expected a number");
    e.timeout_s = j["timeout_s"].get<double>();
    if (!(e.timeout_s > 0 && e.timeout_s <= 86400)) return InvalidArgument("exec.timeout_s: out of range (0 .. 86400]");
  }
  if (j.contains("env")) { ASSIGN_OR_RETURN(e.env, GetStringMap(j["env"], "exec.env")); }
  if (j.contains("stdin")) {
    if (!j["stdin"].is_string()) return InvalidArgument("exec.stdin: expected a string");
    e.stdin_data = j["stdin"].get<std::string>();
  }
  return e;
}

StatusOr<EgressRule> ParseAllowFlag(std::string_view text) {
  EgressRule r;
  std::string_view rest;
  if (text.substr(0, 7) == "http://") {
    r.kind = "http";
    rest = text.substr(7);
  } else if (text.substr(0, 6) == "tls://") {
    r.kind = "tls";
    rest = text.substr(6);
  } else {
    return InvalidArgument(fmt::format("--allow '{}': expected http://HOST:PORT or tls://HOST:PORT", text));
  }
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  size_t colon = rest.rfind(':');
  std::string host(colon == std::string_view::npos ? rest : rest.substr(0, colon));
  int port = r.kind == "http" ? 80 : 443;
  if (colon != std::string_view::npos) {
    auto p = ParseCount(rest.substr(colon + 1), 65535);
    if (!p.ok()) return InvalidArgument(fmt::format("--allow '{}': bad port", text));
    port = static_cast<int>(*p);
  }
  r.hosts.push_back(host);
  r.ports.push_back(port);
  Status st = ValidateRule(r);
  if (!st.ok()) return st.WithContext(fmt::format("--allow '{}'", text));
  return r;
}

Status ParseHostFlag(std::string_view text, std::string* name, std::string* addr_port) {
  size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return InvalidArgument(fmt::format("--host '{}': expected NAME=ADDR:PORT", text));
  }
  *name = AsciiLower(text.substr(0, eq));
  std::string_view ap = text.substr(eq + 1);
  size_t colon = ap.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return InvalidArgument(fmt::format("--host '{}': expected NAME=ADDR:PORT", text));
  }
  std::string_view addr = ap.substr(0, colon);
  auto port = ParseCount(ap.substr(colon + 1), 65535);
  if (!port.ok()) return InvalidArgument(fmt::format("--host '{}': bad port", text));
  for (char c : addr) {
    if (!(std::isxdigit(static_cast<unsigned char>(c)) || c == '.' || c == ':' || c == '[' || c == ']' ||
          std::isalnum(static_cast<unsigned char>(c)) || c == '-')) {
      return InvalidArgument(fmt::format("--host '{}': bad address", text));
    }
  }
  *addr_port = std::string(ap);
  return Status::Ok();
}

}  // namespace sbx
