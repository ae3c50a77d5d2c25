#include "wire/wire.h"

#include <fmt/format.h>

#include <array>

namespace sbx::wire {

using nlohmann::json;

namespace {

// Depth of [ and { outside strings; stops at the first excess.
bool DepthWithin(std::string_view s, int max_depth) {
  int depth = 0;
  bool in_string = false, escape = false;
  for (char c : s) {
    if (in_string) {
      if (escape)
        escape = false;
      else if (c == '\\')
        escape = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int B64Value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Reads an optional key of a result object with a type check.
template <typename T, typename Check>
Status Get(const json& j, const char* key, Check is_type, T* out) {
  auto it = j.find(key);
  if (it == j.end()) return Status::Ok();
  if (!((*it).*is_type)()) return InvalidArgument(fmt::format("result.{}: wrong type", key));
  *out = it->template get<T>();
  return Status::Ok();
}

}  // namespace

StatusOr<json> ParseJsonBody(std::string_view body) {
  if (!DepthWithin(body, kMaxJsonDepth)) {
    return InvalidArgument(fmt::format("JSON nested deeper than {} levels", kMaxJsonDepth));
  }
  try {
    return json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    // e.what() names the position; it may quote a few bytes of the caller's own body.
    return InvalidArgument(fmt::format("malformed JSON: {}", e.what()));
  }
}

std::string DumpJson(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string Base64Encode(std::string_view data) {
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= data.size(); i += 3) {
    uint32_t v = (uint32_t{static_cast<unsigned char>(data[i])} << 16) |
                 (uint32_t{static_cast<unsigned char>(data[i + 1])} << 8) |
                 uint32_t{static_cast<unsigned char>(data[i + 2])};
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += kB64[v & 63];
  }
  size_t rest = data.size() - i;
  if (rest > 0) {
    uint32_t v = uint32_t{static_cast<unsigned char>(data[i])} << 16;
    if (rest == 2) v |= uint32_t{static_cast<unsigned char>(data[i + 1])} << 8;
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += rest == 2 ? kB64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

StatusOr<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return InvalidArgument("base64: length is not a multiple of 4");
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    bool last = i + 4 == text.size();
    int pad = 0;
    std::array<int, 4> v{};
    for (int k = 0; k < 4; ++k) {
      unsigned char c = static_cast<unsigned char>(text[i + static_cast<size_t>(k)]);
      if (c == '=' && last && k >= 2) {
        ++pad;
        v[static_cast<size_t>(k)] = 0;
        continue;
      }
      if (pad > 0) return InvalidArgument("base64: data after padding");
      int x = B64Value(c);
      if (x < 0)
        return InvalidArgument(
            fmt::format("base64: invalid character at {}", i + static_cast<size_t>(k)));
      v[static_cast<size_t>(k)] = x;
    }
    uint32_t n = (static_cast<uint32_t>(v[0]) << 18) | (static_cast<uint32_t>(v[1]) << 12) |
                 (static_cast<uint32_t>(v[2]) << 6) | static_cast<uint32_t>(v[3]);
    out += static_cast<char>((n >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((n >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(n & 0xff);
    // Canonical form only: the bits dropped by padding must be zero.
    if ((pad == 1 && (n & 0xff) != 0) || (pad == 2 && (n & 0xffff) != 0)) {
      return InvalidArgument("base64: non-canonical padding");
    }
  }
  return out;
}

json SandboxSpecToJson(const SandboxSpec& s) {
  json j = {{"template", s.template_name},
            {"tenant", s.tenant},
            {"trust", TrustName(s.trust)},
            {"limits", s.limits},
            {"egress", s.egress}};
  if (!s.backend.empty()) j["backend"] = s.backend;
  if (!s.tool.empty()) j["tool"] = s.tool;
  if (!s.hosts.empty()) j["hosts"] = s.hosts;
  if (!s.env.empty()) j["env"] = s.env;
  if (!s.secrets.empty()) j["secrets"] = s.secrets;
  return j;
}

json ExecSpecToJson(const ExecSpec& e) {
  json j = {{"timeout_s", e.timeout_s}};
  if (!e.command.empty()) j["cmd"] = e.command;
  if (!e.argv.empty()) j["argv"] = e.argv;
  if (!e.env.empty()) j["env"] = e.env;
  if (!e.stdin_data.empty()) j["stdin"] = e.stdin_data;
  return j;
}

StatusOr<ExecStatus> ParseExecStatus(std::string_view s) {
  for (ExecStatus v : {ExecStatus::kOk, ExecStatus::kTimeout, ExecStatus::kResourceExceeded,
                       ExecStatus::kToolError, ExecStatus::kSandboxUnavailable}) {
    if (s == ExecStatusName(v)) return v;
  }
  return InvalidArgument(fmt::format("unknown result status '{}'", s));
}

StatusOr<SandboxState> ParseSandboxState(std::string_view s) {
  for (SandboxState v : {SandboxState::kRunning, SandboxState::kCrashed, SandboxState::kSuspended,
                         SandboxState::kDestroyed}) {
    if (s == SandboxStateName(v)) return v;
  }
  return InvalidArgument(fmt::format("unknown sandbox state '{}'", s));
}

StatusOr<ExecResult> ExecResultFromJson(const json& j) {
  if (!j.is_object()) return InvalidArgument("result: expected a JSON object");
  ExecResult r;
  std::string status = "ok", state = "RUNNING";
  RETURN_IF_ERROR(Get(j, "status", &json::is_string, &status));
  RETURN_IF_ERROR(Get(j, "state", &json::is_string, &state));
  ASSIGN_OR_RETURN(r.status, ParseExecStatus(status));
  ASSIGN_OR_RETURN(r.state, ParseSandboxState(state));
  RETURN_IF_ERROR(Get(j, "backend", &json::is_string, &r.backend));
  RETURN_IF_ERROR(Get(j, "sandbox", &json::is_string, &r.sandbox_id));
  RETURN_IF_ERROR(Get(j, "exit", &json::is_number_integer, &r.exit_code));
  RETURN_IF_ERROR(Get(j, "signal", &json::is_number_integer, &r.signal));
  RETURN_IF_ERROR(Get(j, "stdout", &json::is_string, &r.stdout_tail));
  RETURN_IF_ERROR(Get(j, "stderr", &json::is_string, &r.stderr_tail));
  RETURN_IF_ERROR(Get(j, "stdout_bytes", &json::is_number_integer, &r.stdout_bytes));
  RETURN_IF_ERROR(Get(j, "stderr_bytes", &json::is_number_integer, &r.stderr_bytes));
  RETURN_IF_ERROR(Get(j, "seconds", &json::is_number, &r.seconds));
  RETURN_IF_ERROR(Get(j, "reason", &json::is_string, &r.reason));
  RETURN_IF_ERROR(Get(j, "error_code", &json::is_string, &r.error_code));
  if (auto it = j.find("stages"); it != j.end()) {
    if (!it->is_object()) return InvalidArgument("result.stages: wrong type");
    const json& s = *it;
    RETURN_IF_ERROR(Get(s, "allocate", &json::is_number, &r.stages.allocate));
    RETURN_IF_ERROR(Get(s, "initialize", &json::is_number, &r.stages.initialize));
    RETURN_IF_ERROR(Get(s, "inject_context", &json::is_number, &r.stages.inject_context));
    RETURN_IF_ERROR(Get(s, "execute", &json::is_number, &r.stages.execute));
    RETURN_IF_ERROR(Get(s, "collect", &json::is_number, &r.stages.collect));
    RETURN_IF_ERROR(Get(s, "destroy", &json::is_number, &r.stages.destroy));
    RETURN_IF_ERROR(Get(s, "cleanup", &json::is_number, &r.stages.cleanup));
  }
  if (auto it = j.find("usage"); it != j.end()) {
    if (!it->is_object()) return InvalidArgument("result.usage: wrong type");
    const json& u = *it;
    RETURN_IF_ERROR(Get(u, "cpu_seconds", &json::is_number, &r.usage.cpu_seconds));
    RETURN_IF_ERROR(
        Get(u, "memory_peak_bytes", &json::is_number_integer, &r.usage.memory_peak_bytes));
    RETURN_IF_ERROR(Get(u, "oom_kills", &json::is_number_integer, &r.usage.oom_kills));
    RETURN_IF_ERROR(Get(u, "pids_peak", &json::is_number_integer, &r.usage.pids_peak));
    RETURN_IF_ERROR(Get(u, "disk_used_bytes", &json::is_number_integer, &r.usage.disk_used_bytes));
    RETURN_IF_ERROR(Get(u, "throttled_seconds", &json::is_number, &r.usage.throttled_seconds));
  }
  return r;
}

json SandboxInfoToJson(const SandboxInfo& i) {
  return {{"id", i.id},
          {"backend", i.backend},
          {"tenant", i.tenant},
          {"tool", i.tool},
          {"template", i.template_name},
          {"state", SandboxStateName(i.state)},
          {"created_unix", i.created_unix}};
}

StatusOr<SandboxInfo> SandboxInfoFromJson(const json& j) {
  if (!j.is_object()) return InvalidArgument("sandbox info: expected a JSON object");
  SandboxInfo i;
  std::string state = "RUNNING";
  RETURN_IF_ERROR(Get(j, "id", &json::is_string, &i.id));
  RETURN_IF_ERROR(Get(j, "backend", &json::is_string, &i.backend));
  RETURN_IF_ERROR(Get(j, "tenant", &json::is_string, &i.tenant));
  RETURN_IF_ERROR(Get(j, "tool", &json::is_string, &i.tool));
  RETURN_IF_ERROR(Get(j, "template", &json::is_string, &i.template_name));
  RETURN_IF_ERROR(Get(j, "state", &json::is_string, &state));
  RETURN_IF_ERROR(Get(j, "created_unix", &json::is_number, &i.created_unix));
  ASSIGN_OR_RETURN(i.state, ParseSandboxState(state));
  if (i.id.empty()) return InvalidArgument("sandbox info: no id");
  return i;
}

}  // namespace sbx::wire
