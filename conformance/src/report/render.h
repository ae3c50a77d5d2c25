// Renderers: every format is made from report.json alone (never from the run's memory), so
// `sandcheck render report.json --out DIR` reproduces them. A report that does not have the
// shape of docs/report.schema.json is kInvalidArgument (exit 2), never a crash.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "sbx/status.h"

namespace sandcheck {

std::string RenderJunit(const nlohmann::json& report);     // junit.xml (Jenkins/GitLab/GitHub)
std::string RenderMarkdown(const nlohmann::json& report);  // report.md
std::string RenderHtml(const nlohmann::json& report);      // report.html (self-contained)
std::string RenderTap(const nlohmann::json& report);       // report.tap (TAP 13)
// The demo's figure for one scenario of the report: THE COMMAND TRIES / WHAT IT GETS / REVERT /
// FILES IN /WORK, one row per task, refused or failed rows marked in rose.
std::string RenderTaskFigureSvg(const nlohmann::json& report, const nlohmann::json& scenario);

// Latency CDFs (SVG) of a report's measurements: one figure per measurement name, one line per
// backend and clock (plus the machine's floor, when the report has one), for report.html.
std::string RenderLatencyCdfs(const nlohmann::json& report);
// The latency-target verdicts (checks of kind nfr_latency) as a Markdown table ("" if none).
std::string NfrMarkdownTable(const nlohmann::json& report);

// The command-line table of comparison.md ("" when `command_lines` is null): the rows of
// run/command_lines.h's CommandLinesJson, the warm exec against the runtime CLI, issue 16's goals.
std::string CommandLinesMarkdown(const nlohmann::json& command_lines);

// comparison.md of `sandcheck compare`: the machine, then per latency target every runtime's
// p50/p95 against ours and the floor, then the command-line table. `c` is the comparison JSON.
std::string ComparisonMarkdown(const nlohmann::json& c, const nlohmann::json& host,
                               double when_unix);
// comparison.html: the CDFs of every target and of the command lines, and `markdown` as text.
std::string ComparisonHtml(const nlohmann::json& c, const std::string& markdown);

// Checks the fields the renderers rely on (a light subset of the schema).
sbx::Status CheckReportShape(const nlohmann::json& report);

// Writes junit.xml, report.md, report.html and (if `tap`) report.tap into `dir`.
sbx::Status WriteRenderedReports(const nlohmann::json& report, const std::string& dir, bool tap);

// Shared helpers.
// A check's evidence object, or an empty object when the check has none (never UB on const json).
const nlohmann::json& EvidenceOf(const nlohmann::json& check);
std::string XmlEscape(const std::string& s);     // also for HTML; strips XML-invalid characters
std::string SanitizeUtf8(const std::string& s);  // invalid bytes → U+FFFD; control chars dropped
std::string FormatSeconds(
    const nlohmann::json& seconds);  // 0.47 → "0.47 s", 0.0021 → "2.1 ms", null → "-"
// --repeat N: " · every scenario run N times: K flaky" ("" for a single run), and a check's
// " (3 pass, 2 fail over 5 runs)" ("" when the check was not repeated).
std::string RepeatSummary(const nlohmann::json& report);
std::string RepeatTally(const nlohmann::json& check);
// The checks of `report` that judge task `task_id` of `scenario` (or nullptr).
const nlohmann::json* CheckForTask(const nlohmann::json& report, const std::string& scenario,
                                   const std::string& task_id);

}  // namespace sandcheck
