#include "sbx/status.h"

#include <cstring>

#include <fmt/format.h>

namespace sbx {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kTimeout: return "timeout";
    case Code::kResourceExceeded: return "resource_exceeded";
    case Code::kToolError: return "tool_error";
    case Code::kSandboxUnavailable: return "sandbox_unavailable";
    case Code::kInvalidArgument: return "invalid_argument";
    case Code::kNotFound: return "not_found";
    case Code::kPermissionDenied: return "permission_denied";
    case Code::kUnauthenticated: return "unauthenticated";
    case Code::kFailedPrecondition: return "failed_precondition";
    case Code::kInternal: return "internal";
    case Code::kUnsupported: return "unsupported";
    case Code::kAlreadyExists: return "already_exists";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return fmt::format("{}: {}", CodeName(code_), message_);
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, fmt::format("{}: {}", context, message_));
}

Status ErrnoStatus(std::string_view what, int err) {
  Code code = Code::kInternal;
  switch (err) {
    case EPERM:
    case EACCES: code = Code::kPermissionDenied; break;
    case ENOENT: code = Code::kNotFound; break;
    case EINVAL: code = Code::kInvalidArgument; break;
    case EEXIST: code = Code::kAlreadyExists; break;
    case ENOSYS:
    case EOPNOTSUPP: code = Code::kUnsupported; break;
    // The host is out of what a sandbox needs: not the caller's fault nor a bug, and retrying
    // later can succeed (issue 17: one cause, one code, whichever call ran out).
    case EMFILE:
    case ENFILE:
    case ENOMEM: code = Code::kSandboxUnavailable; break;
    default: break;
  }
  return Status(code, fmt::format("{}: {} (errno {})", what, std::strerror(err), err));
}

}  // namespace sbx
