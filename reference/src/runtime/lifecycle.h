// The one-shot lifecycle (LC-1..LC-9) over any backend: allocate → initialize → inject context
// → execute → collect → destroy → cleanup, every stage timed, every failure turned into a
// result (the Execution API never fails as a call), destroy and cleanup always run.
#pragma once

#include <string>

#include "backend/backend.h"
#include "sbx/model.h"
#include "sbx/status.h"

namespace sbx {

// `backend_name` is what the result names when the backend fails before it can say.
ExecResult RunOneShot(backend::Backend& backend, const std::string& id, const ExecRequest& req);

// A result for a sandbox that could not be provided (status sandbox_unavailable, or tool_error
// when the status says so), naming the backend and the stable code.
ExecResult UnavailableResult(const Status& s, const std::string& backend_name);

}  // namespace sbx
