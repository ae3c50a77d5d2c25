// Status and StatusOr: the only error channel of the reference runtime's API.
//
// Thread-safety: values; safe to copy between threads.
// Codes are stable and documented in docs/errors.md. Never renumber; add at the end.
#pragma once

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace sbx {

enum class Code : int {
  kOk = 0,
  // Execution API outcomes (TRT-003 §9, Execution API §10).
  kTimeout = 1,             // the command ran past its timeout (RES-5, FAIL-4)
  kResourceExceeded = 2,    // a hard limit was breached (RES-8, FAIL-3)
  kToolError = 3,           // the sandbox crashed or the tool could not be started (FAIL-2)
  kSandboxUnavailable = 4,  // no backend could provide the sandbox (FAIL-1, SEL-5)
  // Input and environment errors.
  kInvalidArgument = 10,    // bad request, manifest, flag or scenario (never a crash)
  kNotFound = 11,           // no such sandbox / file / template
  kPermissionDenied = 12,   // missing privilege (not root, no CAP_SYS_ADMIN, ...)
  kUnauthenticated = 13,    // no or wrong token (PROD-1)
  kFailedPrecondition = 14, // the operation does not fit the object's state
  kInternal = 15,           // a kernel call failed unexpectedly (errno in the message)
  kUnsupported = 16,        // this host or backend cannot do it ("unsupported on this host")
  kAlreadyExists = 17,
};

// Stable snake_case name of a code, as it appears in JSON and docs.
std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

  // Adds context in front of the message ("creating cgroup: ...").
  Status WithContext(std::string_view context) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// The one errno mapping of the runtime: EPERM/EACCES → kPermissionDenied, ENOENT → kNotFound,
// EINVAL → kInvalidArgument, EEXIST → kAlreadyExists, ENOSYS/EOPNOTSUPP → kUnsupported,
// everything else kInternal. The message is "<what>: <strerror> (errno N)".
Status ErrnoStatus(std::string_view what, int err = errno);

inline Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
inline Status Unsupported(std::string m) { return {Code::kUnsupported, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {Code::kFailedPrecondition, std::move(m)}; }

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status(Code::kInternal, "StatusOr built from OK status");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace sbx

#define SBX_CONCAT_INNER(a, b) a##b
#define SBX_CONCAT(a, b) SBX_CONCAT_INNER(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define RETURN_IF_ERROR(expr)                  \
  do {                                         \
    ::sbx::Status sbx_status_ = (expr);        \
    if (!sbx_status_.ok()) return sbx_status_; \
  } while (0)

// ASSIGN_OR_RETURN(auto x, F()) : declares x from a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) ASSIGN_OR_RETURN_IMPL(SBX_CONCAT(sbx_or_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
