// Strict JSON reading for the adapter protocol (unknown keys are errors, types are checked) and
// the one place the adapter writes its answer. nlohmann::json throws; nothing here does.
//
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "sbx/status.h"

namespace sandcheck::adapter {

using Json = nlohmann::json;

// Parses one JSON object (the whole text; an empty text is the empty object).
sbx::StatusOr<Json> ParseObject(std::string_view text);

// Fails with kInvalidArgument naming the first key of `obj` that is not in `allowed`.
sbx::Status CheckKeys(const Json& obj, std::initializer_list<std::string_view> allowed,
                      std::string_view what);

// Typed getters. A missing key (or null) gives nullopt; a wrong type is kInvalidArgument.
sbx::StatusOr<std::optional<std::string>> OptString(const Json& obj, std::string_view key);
sbx::StatusOr<std::optional<double>> OptNumber(const Json& obj, std::string_view key);
// A non-negative integer (JSON integer, or a float with no fractional part).
sbx::StatusOr<std::optional<int64_t>> OptCount(const Json& obj, std::string_view key);
sbx::StatusOr<std::optional<bool>> OptBool(const Json& obj, std::string_view key);
// An object (nullopt if missing or null).
sbx::StatusOr<std::optional<Json>> OptObject(const Json& obj, std::string_view key);

// Required string.
sbx::StatusOr<std::string> RequireString(const Json& obj, std::string_view key);

// Serialises `value` for stdout: one line, invalid UTF-8 replaced (command output is bytes).
std::string Dump(const Json& value);

}  // namespace sandcheck::adapter
