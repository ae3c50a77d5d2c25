// report/ — report.json (this file) and everything rendered from it: JUnit, Markdown, HTML,
// TAP, figures and charts (render.h, chart.h). May include checks/ and every folder below.
//
// report.json: the one source of every report format (schema: docs/report.schema.json, prose:
// reports/README.md). junit.xml, report.md, report.html and report.tap are rendered from the
// JSON alone (render.h), so `sandcheck render report.json` reproduces them anywhere.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checks/expectations.h"
#include "checks/records.h"
#include "drivers/target.h"
#include "host/machine_load.h"

namespace sandcheck {

inline constexpr const char* kReportSchema = "sandcheck-report/1";

struct RunContext {
  std::string run_id;
  std::vector<std::string> command_line;
  double started_unix = 0, finished_unix = 0;
  MachineLoadSample load_start;  // read when the run started
  nlohmann::json machine_load;   // DescribeMachineLoad(start, finish); null: not recorded
  Profile profile = Profile::kDefault;
  std::string target_spec, target_driver, backend;
  std::optional<TargetInfo> info;                      // absent when `info` itself failed
  nlohmann::json fixtures = nlohmann::json::object();  // {"mirror": {...}}
  std::map<std::string, std::string> vars;             // --var
  const Expectations* expectations = nullptr;
  std::vector<std::string> errors;  // infrastructure failures outside scenarios
  int repeat = 1;                   // --repeat N: every scenario was run N times
};

// Builds report.json, including the summary and the exit code of the run.
nlohmann::json BuildReport(const RunContext& ctx, const std::vector<ScenarioRun>& runs);

// Recomputes report["summary"] from report["checks"] and report["errors"] (the rules of
// BuildReport), for reports that are made of checks without scenario runs (nfr, load).
void SummarizeChecks(nlohmann::json& report);

// A step as it appears in report.json.
nlohmann::json StepJson(const Step& s);

// "20250130T120000Z-1a2b": sortable, unique enough for one machine.
std::string NewRunId();

// Dumps JSON for files: 2-space indent, invalid UTF-8 replaced (command output can hold any bytes).
std::string DumpJson(const nlohmann::json& j);

}  // namespace sandcheck
