// common/ — what every folder of the harness may use: strict JSON reading (this file), figures
// (stats.h), bounded child processes (subprocess.h). Includes nothing of the harness.
//
// Strict reading of JSON objects: scenario, expectations and report files have one schema each,
// and a key the reader does not know is an error naming its path, never silently ignored.
//
// Usage:
//   ObjectReader r(j, "tasks[2]");
//   std::string id = r.String("id", "", Required::kYes);
//   double t = r.Number("timeout_s", 20);
//   RETURN_IF_ERROR(r.Finish());   // the first type error, missing key or unknown key
//
// Thread-safety: a reader is used by one thread.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "sbx/status.h"

namespace sandcheck {

using nlohmann::json;

enum class Required { kNo, kYes };

class ObjectReader {
 public:
  // `path` names the object in messages ("tasks[2].check"). A non-object is an error at Finish.
  ObjectReader(const json& j, std::string path);

  bool Has(std::string_view key) const;
  std::string String(std::string_view key, std::string def, Required req = Required::kNo);
  double Number(std::string_view key, double def, Required req = Required::kNo);
  int64_t Integer(std::string_view key, int64_t def, Required req = Required::kNo);
  bool Bool(std::string_view key, bool def, Required req = Required::kNo);
  std::vector<std::string> StringList(std::string_view key, Required req = Required::kNo);
  std::map<std::string, std::string> StringMap(std::string_view key, Required req = Required::kNo);
  // The raw member (an object or array) or nullptr; marks the key as known.
  const json* Object(std::string_view key, Required req = Required::kNo);
  const json* Array(std::string_view key, Required req = Required::kNo);
  // Marks a key as known without reading it.
  void Ignore(std::string_view key);

  // Path of a member, for nested readers ("tasks[2].check").
  std::string PathOf(std::string_view key) const;

  // The first error met so far; then unknown keys. Call once, after reading everything.
  sbx::Status Finish();

  // Records an error found by the caller (e.g. a bad enum value), keeping the first one.
  void Fail(std::string_view key, std::string message);

 private:
  const json* Get(std::string_view key, Required req, json::value_t want, const char* type_name);

  const json& j_;
  std::string path_;
  std::set<std::string, std::less<>> known_;
  sbx::Status first_error_;
};

// Parses JSON text, mapping a syntax error to kInvalidArgument "ORIGIN:LINE:COL: message".
sbx::StatusOr<json> ParseJsonText(std::string_view text, std::string_view origin);

// Reads a whole file (kNotFound / kInvalidArgument with the path in the message).
sbx::StatusOr<std::string> ReadFile(const std::string& path);
// Writes a file atomically (tmp + rename).
sbx::Status WriteFile(const std::string& path, std::string_view content);
// mkdir -p (mode 0755 for what it creates).
sbx::Status MakeDirs(const std::string& path);

// Joins strings with a separator.
std::string Join(const std::vector<std::string>& parts, std::string_view sep);

}  // namespace sandcheck
