// scenario/ (internal): reading the `expect` vocabulary (docs/scenarios.md, kind `expect`),
// shared by the loader (scenario.cc).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "sbx/status.h"

namespace sandcheck {

// Where an expectation of the `expect` kind sits: the task's own, its `then` command's, or one
// alternative of `any_of`. They share one vocabulary; some keys belong to one level only.
enum class ExpectLevel { kTask, kThen, kAlternative };

// Reads an expectation object into its normalised form: every key present, lists for "string or
// list", defaults filled in.
sbx::StatusOr<nlohmann::json> ReadExpectation(const nlohmann::json& in, const std::string& path,
                                              ExpectLevel level);

// A name matches `re` as a whole.
bool MatchesName(const std::string& s, const char* re);

}  // namespace sandcheck
