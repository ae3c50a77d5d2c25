// The Execution API model: what a caller asks for and what it gets back.
// JSON field names are the wire format of sandboxd and of adapter protocol v1 (docs/execution-api.md).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sbx/status.h"

namespace sbx {

// Limits a sandbox is held to (RES-1..RES-6). 0 means "the runtime's default" (see docs/limits.md).
struct Limits {
  int64_t cpu_millicores = 0;  // RES-1 hard cap; 0 = unlimited
  int64_t memory_bytes = 0;    // RES-2; 0 = default (512Mi)
  int64_t pids = 0;            // RES-4; 0 = default (256)
  int64_t disk_bytes = 0;      // RES-3 scratch quota; 0 = default (256Mi)
  int64_t fds = 0;             // RES-6 RLIMIT_NOFILE; 0 = default (1024)
};

// One egress rule (EGR-1, EGR-4). kind "http": forwarded by Host header; "tls": passthrough by SNI.
struct EgressRule {
  std::string kind;                 // "http" | "tls"
  std::vector<std::string> hosts;   // full names, lower case, no wildcards
  std::vector<int> ports;
};

// No rules = no reachable destination at all (SNAP-5). `enabled` false = not even a gateway:
// the sandbox namespace holds only lo.
struct EgressPolicy {
  std::vector<EgressRule> rules;
  bool empty() const { return rules.empty(); }
};

enum class Trust { kFirstParty, kVerified, kUntrusted, kUnverified };

// A request to run one command (one-shot `run`) or to create a sandbox (`create`).
struct SandboxSpec {
  std::string template_name = "sandbox";
  std::string backend;                 // "" = chosen by selection (SEL-*)
  std::string tenant = "default";
  std::string tool;
  Trust trust = Trust::kFirstParty;
  Limits limits;
  EgressPolicy egress;
  std::map<std::string, std::string> hosts;  // service directory: name → "addr:port"
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> secrets;  // LC-4: memory only, zeroed after use (LC-8)
};

struct ExecSpec {
  std::vector<std::string> argv;   // if empty, `command` is run as sh -c
  std::string command;
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> secrets;  // per command (pooled sandboxes); LC-4, LC-8
  std::string stdin_data;
  double timeout_s = 30;
  double grace_s = 1;              // RES-5: SIGTERM → grace → SIGKILL
};

struct ExecRequest {
  SandboxSpec sandbox;
  ExecSpec exec;
};

// Execution API statuses (stable strings).
enum class ExecStatus { kOk, kTimeout, kResourceExceeded, kToolError, kSandboxUnavailable };
enum class SandboxState { kRunning, kCrashed, kSuspended, kDestroyed };

const char* ExecStatusName(ExecStatus s);
const char* SandboxStateName(SandboxState s);
StatusOr<Trust> ParseTrust(std::string_view s);
const char* TrustName(Trust t);

// LC-1: each stage timed. Seconds; a stage that did not run is -1.
struct StageTimings {
  double allocate = -1, initialize = -1, inject_context = -1, execute = -1, collect = -1,
         destroy = -1, cleanup = -1;
};

// Read from the cgroup after the command (never from inside the sandbox).
struct ResourceUsage {
  double cpu_seconds = 0;        // cpuacct.usage / cpu.stat usage_usec
  int64_t memory_peak_bytes = 0; // memory.max_usage_in_bytes / memory.peak
  int64_t oom_kills = 0;
  int64_t pids_peak = 0;
  int64_t disk_used_bytes = 0;   // scratch
  double throttled_seconds = 0;
};

struct ExecResult {
  ExecStatus status = ExecStatus::kOk;
  SandboxState state = SandboxState::kRunning;
  std::string backend;
  std::string sandbox_id;
  int exit_code = -1;          // -1 when killed by a signal or never started
  int signal = 0;
  std::string stdout_tail, stderr_tail;
  int64_t stdout_bytes = 0, stderr_bytes = 0;
  double seconds = 0;          // wall time of execute
  StageTimings stages;
  ResourceUsage usage;
  std::string reason;          // human explanation when status != ok (e.g. "memory limit 256Mi")
  std::string error_code;      // stable code for sandbox_unavailable/tool_error ("backend_unsupported", ...)
};

inline constexpr size_t kOutputTailBytes = 64 * 1024;

// JSON (nlohmann). FromJson functions reject unknown keys with kInvalidArgument naming the key.
void to_json(nlohmann::json& j, const ExecResult& r);
void to_json(nlohmann::json& j, const StageTimings& s);
void to_json(nlohmann::json& j, const ResourceUsage& u);
void to_json(nlohmann::json& j, const Limits& l);
void to_json(nlohmann::json& j, const EgressPolicy& p);
StatusOr<Limits> LimitsFromJson(const nlohmann::json& j);
StatusOr<EgressPolicy> EgressFromJson(const nlohmann::json& j);
StatusOr<SandboxSpec> SandboxSpecFromJson(const nlohmann::json& j);
StatusOr<ExecSpec> ExecSpecFromJson(const nlohmann::json& j);

// "http://host:80" / "tls://host:443" → rule. Host names are validated (RFC 1123, no IP literals).
StatusOr<EgressRule> ParseAllowFlag(std::string_view text);
// "name=addr:port" → (name, "addr:port").
Status ParseHostFlag(std::string_view text, std::string* name, std::string* addr_port);

}  // namespace sbx
