// Where scenarios and requirement IDs come from.
//  - `--scenario NAME`: $SANDCHECK_SCENARIO_DIR/NAME.json when that exists, else the scenario
//    compiled into the binary (scenarios/NAME.json of the source tree at build time).
//  - `--scenario FILE`: any argument with a '/' or ending in ".json" is a file.
//  - Requirement IDs: conformance/requirements.json (a copy of the design's catalogue), embedded.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sbx/status.h"
#include "scenario/scenario.h"

namespace sandcheck {

struct Requirement {
  std::string id, group, text;
};

// The requirement catalogue, in document order.
const std::vector<Requirement>& Requirements();
bool IsKnownRequirement(const std::string& id);

// Names of the scenarios compiled into the binary, sorted.
std::vector<std::string> BuiltinScenarioNames();
// Names of the latency-target files ("kind": "nfr", docs/nfr.md) compiled into the binary.
std::vector<std::string> BuiltinNfrNames();
// A latency-target file rather than a task scenario?
bool IsNfrDocument(std::string_view text);

// The text of `--scenario NAME|FILE` (same search as LoadScenarios) and where it came from.
struct Source {
  std::string origin, text;
};
sbx::StatusOr<Source> FindScenarioSource(const std::string& arg);

// Loads scenarios by name or file, applying --var overrides. An override no scenario declares,
// an unknown requirement ID or a duplicate scenario is kInvalidArgument; a missing file kNotFound.
sbx::StatusOr<std::vector<Scenario>> LoadScenarios(const std::vector<std::string>& names_or_files,
                                                   const std::map<std::string, std::string>& vars,
                                                   const std::string& backend = "");

}  // namespace sandcheck
