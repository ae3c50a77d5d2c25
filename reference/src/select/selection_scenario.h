// scenarios/selection.json: selection cases as data (schema:
// scenarios/schema/selection.schema.json, format: docs/selection.md §Scenario file). Parsed
// strictly: unknown keys, unknown names, duplicate ids and contradictory worker constraints are
// kInvalidArgument.
//
// Thread-safety: values and pure functions.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "select/selection.h"

namespace sbx::selection {

struct ScenarioCase {
  std::string id;
  std::vector<std::string> requirements;  // "SEL-6", "BK-8", ...
  // "must": follows from TRT-003 for any target; "reference": follows from this runtime's
  // documented choices (docs/selection.md), which another target may make differently.
  std::string level;
  std::optional<BackendKind> preference;
  std::optional<BackendKind> tenant_floor;
  bool allow_upgrade = true;
  Trust trust = Trust::kUnverified;
  // The case holds for EVERY worker that has all of `has` and none of `lacks`.
  BackendSet has, lacks;
  std::optional<BackendKind> expect_backend;  // nullopt: expect sandbox_unavailable
  std::string note;
};

StatusOr<std::vector<ScenarioCase>> ParseSelectionScenario(const nlohmann::json& doc);
StatusOr<std::vector<ScenarioCase>> LoadSelectionScenario(const std::string& path);

// Every worker capability set the case applies to (2^(7-|has|-|lacks|) sets).
std::vector<BackendSet> WorkersFor(const ScenarioCase& c);
Input ToInput(const ScenarioCase& c, const BackendSet& worker);
// Ok if `got` is what the case expects; otherwise kFailedPrecondition saying what differed.
Status CheckOutcome(const ScenarioCase& c, const StatusOr<Decision>& got);

}  // namespace sbx::selection
