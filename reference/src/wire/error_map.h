// The one mapping between the runtime's error codes (sbx::Code) and HTTP statuses, used by
// sandboxd to answer and by its client to turn answers back into a Status. docs/sandboxd.md
// shows the same table.
//
// Error bodies are {"error":{"code":"<CodeName>","message":"..."}}; the code string is the
// stable part, the HTTP status follows from it.
#pragma once

#include <string>
#include <string_view>

#include "sbx/status.h"

namespace sbx::wire {

// The HTTP status sandboxd answers for a runtime error code (500 for a code not in the table).
int HttpStatusFor(Code code);

// The Code named by a CodeName() string; nullopt-like kOk when the name is unknown.
Code CodeFromName(std::string_view name);

// The Code an HTTP error status stands for when a body names none (first row of the table
// with that status; 4xx → kInvalidArgument, 5xx → kInternal otherwise).
Code CodeForHttpStatus(int status);

// {"error":{"code":..., "message":...}} (invalid UTF-8 in the message is replaced).
std::string ErrorBody(Code code, std::string_view message);

// The Status carried by an HTTP error answer (status >= 400) with body `body`.
Status StatusFromErrorResponse(int http_status, std::string_view body);

}  // namespace sbx::wire
