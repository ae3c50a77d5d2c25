// The JSON of the Execution API on the wire (adapter protocol v1 objects, carried over HTTP):
// safe parsing and printing, base64, and the conversions the model lacks (a SandboxSpec to
// JSON, a result object back to an ExecResult) for the client.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "sbx/model.h"
#include "sbx/runtime.h"
#include "sbx/status.h"

namespace sbx::wire {

inline constexpr int kMaxJsonDepth = 32;

// Parses a request or response body. kInvalidArgument for malformed JSON, invalid UTF-8 or
// nesting deeper than kMaxJsonDepth (checked before parsing: the parser recurses, so an
// 8 MiB "[[[[..." must never reach it).
StatusOr<nlohmann::json> ParseJsonBody(std::string_view body);

// Compact JSON; invalid UTF-8 in strings (e.g. a command's binary stdout) becomes U+FFFD
// instead of throwing.
std::string DumpJson(const nlohmann::json& j);

// RFC 4648 base64 with padding. Decode is strict: no whitespace, no missing padding.
std::string Base64Encode(std::string_view data);
StatusOr<std::string> Base64Decode(std::string_view text);

// The `create` object of adapter protocol v1 (what SandboxSpecFromJson reads back).
nlohmann::json SandboxSpecToJson(const SandboxSpec& spec);
// The `exec` object without "sandbox" (what ExecSpecFromJson reads back; grace_s is not on
// the wire and stays the runtime's default).
nlohmann::json ExecSpecToJson(const ExecSpec& exec);

// A result object (to_json(ExecResult)) back to an ExecResult. Keys this client does not know
// are ignored (a newer server may add some); known keys of the wrong type are errors.
StatusOr<ExecResult> ExecResultFromJson(const nlohmann::json& j);

// {"id","backend","tenant","tool","template","state","created_unix"}
nlohmann::json SandboxInfoToJson(const SandboxInfo& info);
StatusOr<SandboxInfo> SandboxInfoFromJson(const nlohmann::json& j);

StatusOr<ExecStatus> ParseExecStatus(std::string_view s);
StatusOr<SandboxState> ParseSandboxState(std::string_view s);

}  // namespace sbx::wire
