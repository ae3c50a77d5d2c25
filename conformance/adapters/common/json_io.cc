#include "common/json_io.h"

#include <fmt/format.h>

#include <cmath>

namespace sandcheck::adapter {

sbx::StatusOr<Json> ParseObject(std::string_view text) {
  auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return Json::object();
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return sbx::InvalidArgument("input is not valid JSON");
  if (!j.is_object()) return sbx::InvalidArgument("input must be a JSON object");
  return j;
}

sbx::Status CheckKeys(const Json& obj, std::initializer_list<std::string_view> allowed,
                      std::string_view what) {
  if (!obj.is_object()) return sbx::InvalidArgument(fmt::format("{} must be an object", what));
  for (const auto& [key, value] : obj.items()) {
    bool known = false;
    for (auto a : allowed) known = known || key == a;
    if (!known) return sbx::InvalidArgument(fmt::format("{}: unknown key \"{}\"", what, key));
  }
  return sbx::Status::Ok();
}

namespace {

const Json* Find(const Json& obj, std::string_view key) {
  auto it = obj.find(std::string(key));
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

sbx::Status WrongType(std::string_view key, std::string_view want) {
  return sbx::InvalidArgument(fmt::format("\"{}\" must be {}", key, want));
}

}  // namespace

sbx::StatusOr<std::optional<std::string>> OptString(const Json& obj, std::string_view key) {
  const Json* v = Find(obj, key);
  if (!v) return std::optional<std::string>();
  if (!v->is_string()) return WrongType(key, "a string");
  return std::optional<std::string>(v->get<std::string>());
}

sbx::StatusOr<std::optional<double>> OptNumber(const Json& obj, std::string_view key) {
  const Json* v = Find(obj, key);
  if (!v) return std::optional<double>();
  if (!v->is_number()) return WrongType(key, "a number");
  double d = v->get<double>();
  if (!std::isfinite(d)) return WrongType(key, "a finite number");
  return std::optional<double>(d);
}

sbx::StatusOr<std::optional<int64_t>> OptCount(const Json& obj, std::string_view key) {
  const Json* v = Find(obj, key);
  if (!v) return std::optional<int64_t>();
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return WrongType(key, "a count below 2^63");
    return std::optional<int64_t>(static_cast<int64_t>(u));
  }
  if (v->is_number_integer()) {
    int64_t i = v->get<int64_t>();
    if (i < 0) return WrongType(key, "a non-negative integer");
    return std::optional<int64_t>(i);
  }
  if (v->is_number_float()) {
    double d = v->get<double>();
    if (d < 0 || d != std::floor(d) || d > 9.2e18) return WrongType(key, "a non-negative integer");
    return std::optional<int64_t>(static_cast<int64_t>(d));
  }
  return WrongType(key, "a non-negative integer");
}

sbx::StatusOr<std::optional<bool>> OptBool(const Json& obj, std::string_view key) {
  const Json* v = Find(obj, key);
  if (!v) return std::optional<bool>();
  if (!v->is_boolean()) return WrongType(key, "a boolean");
  return std::optional<bool>(v->get<bool>());
}

sbx::StatusOr<std::optional<Json>> OptObject(const Json& obj, std::string_view key) {
  const Json* v = Find(obj, key);
  if (!v) return std::optional<Json>();
  if (!v->is_object()) return WrongType(key, "an object");
  return std::optional<Json>(*v);
}

sbx::StatusOr<std::string> RequireString(const Json& obj, std::string_view key) {
  ASSIGN_OR_RETURN(auto s, OptString(obj, key));
  if (!s) return sbx::InvalidArgument(fmt::format("\"{}\" is required", key));
  return *s;
}

std::string Dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace sandcheck::adapter
