#include "wire/error_map.h"

#include <fmt/format.h>

#include <array>
#include <nlohmann/json.hpp>

#include "wire/wire.h"

namespace sbx::wire {
namespace {

struct Row {
  Code code;
  int http;
};

// THE table (docs/sandboxd.md, "Status codes"). Every Code appears exactly once.
constexpr std::array<Row, 13> kTable = {{
    {Code::kOk, 200},
    {Code::kInvalidArgument, 400},
    {Code::kUnauthenticated, 401},
    {Code::kPermissionDenied, 403},
    {Code::kNotFound, 404},
    {Code::kFailedPrecondition, 409},
    {Code::kAlreadyExists, 409},
    {Code::kResourceExceeded, 429},  // e.g. the tenant's max_sandboxes
    {Code::kInternal, 500},
    {Code::kUnsupported, 501},
    {Code::kToolError, 502},           // the sandbox crashed or the tool could not start
    {Code::kSandboxUnavailable, 503},  // no backend could provide the sandbox (FAIL-1)
    {Code::kTimeout, 504},
}};

constexpr std::array<Code, 13> kAllCodes = {Code::kOk,
                                            Code::kTimeout,
                                            Code::kResourceExceeded,
                                            Code::kToolError,
                                            Code::kSandboxUnavailable,
                                            Code::kInvalidArgument,
                                            Code::kNotFound,
                                            Code::kPermissionDenied,
                                            Code::kUnauthenticated,
                                            Code::kFailedPrecondition,
                                            Code::kInternal,
                                            Code::kUnsupported,
                                            Code::kAlreadyExists};

}  // namespace

int HttpStatusFor(Code code) {
  for (const Row& r : kTable) {
    if (r.code == code) return r.http;
  }
  return 500;
}

Code CodeFromName(std::string_view name) {
  for (Code c : kAllCodes) {
    if (CodeName(c) == name) return c;
  }
  return Code::kOk;
}

Code CodeForHttpStatus(int status) {
  for (const Row& r : kTable) {
    if (r.http == status && r.code != Code::kOk) return r.code;
  }
  return status >= 400 && status < 500 ? Code::kInvalidArgument : Code::kInternal;
}

std::string ErrorBody(Code code, std::string_view message) {
  nlohmann::json j = {{"error", {{"code", CodeName(code)}, {"message", message}}}};
  return DumpJson(j);
}

Status StatusFromErrorResponse(int http_status, std::string_view body) {
  auto j = ParseJsonBody(body);
  if (j.ok() && j->is_object() && j->contains("error") && (*j)["error"].is_object()) {
    const auto& e = (*j)["error"];
    std::string name =
        e.contains("code") && e["code"].is_string() ? e["code"].get<std::string>() : "";
    std::string message =
        e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>() : "";
    Code code = CodeFromName(name);
    if (code == Code::kOk) code = CodeForHttpStatus(http_status);
    return Status(code, message.empty() ? fmt::format("HTTP {}", http_status) : message);
  }
  std::string excerpt(body.substr(0, 200));
  return Status(CodeForHttpStatus(http_status),
                fmt::format("HTTP {} from sandboxd (body is not an error object: '{}')",
                            http_status, excerpt));
}

}  // namespace sbx::wire
