// `sandcheck list`, `sandcheck coverage` and `sandcheck render`: read-only views of the scenarios,
// the requirement catalogue and an existing report.
#include <fmt/format.h>

#include <cstdio>
#include <set>

#include "commands/cli.h"
#include "common/json_strict.h"
#include "report/render.h"
#include "report/report.h"
#include "scenario/catalog.h"
#include "scenario/coverage_notes.h"
#include "scenario/nfr_spec.h"

namespace sandcheck {
namespace {

using nlohmann::json;

constexpr const char* kListHelp = R"(usage: sandcheck list [--scenario NAME|FILE ...] [--json]

Lists the scenarios (built in, or those given) with their variables, tasks and checks; each
check with its level, requirement IDs and the target features it needs.
)";

constexpr const char* kCoverageHelp =
    R"(usage: sandcheck coverage [--scenario NAME|FILE ...] [--json]

Maps every requirement ID of the catalogue (conformance/requirements.json, a copy of
design/requirements.md) to the checks that cite it, over the built-in scenarios (or those
given). IDs that no black-box check can reach, in whole or in part, carry a note
(conformance/coverage_notes.json): how they are verified instead, and why not by sandcheck.
A note is an explanation, never a pass. IDs with neither a check nor a note are gaps.
)";

constexpr const char* kRenderHelp = R"(usage: sandcheck render REPORT.json [--out DIR] [--tap]

Renders junit.xml, report.md, report.html (and report.tap with --tap) from a report.json
into DIR (default: the directory of REPORT.json). Exit 2 if the file is not a report.
)";

// The task scenarios and the latency-target files (docs/nfr.md) asked for, or all built in.
sbx::StatusOr<std::vector<Scenario>> Scenarios(const ParsedArgs& a,
                                               std::vector<NfrSpec>* nfr = nullptr) {
  std::vector<std::string> names = a.All("scenario"), tasks;
  if (names.empty()) {
    tasks = BuiltinScenarioNames();
    names = BuiltinNfrNames();
  } else {
    std::vector<std::string> rest;
    for (const auto& n : names) {
      auto src = FindScenarioSource(n);
      (src.ok() && IsNfrDocument(src->text) ? rest : tasks).push_back(n);
    }
    names = rest;
  }
  for (const auto& n : names) {
    ASSIGN_OR_RETURN(NfrSpec s, LoadNfrByName(n, {}, nullptr));
    if (nfr) nfr->push_back(std::move(s));
  }
  return LoadScenarios(tasks, {});
}

// The checks a latency target gives, as they are named in a report (one per backend).
std::string NfrCheckPattern(const NfrSpec& s, const NfrTarget& t) {
  return t.RuntimeWide() ? NfrCheckId(s, t, "") : NfrCheckId(s, t, "") + "-<backend>";
}

json CheckJson(const CheckSpec& c) {
  return {{"id", c.id},
          {"title", c.title},
          {"level", c.level},
          {"requirements", c.requirements},
          {"features", c.features},
          {"requires_pass", c.requires_pass},
          {"kind", c.kind},
          {"task", c.task_id},
          {"params", c.params}};
}

}  // namespace

int CmdList(const std::vector<std::string>& args) {
  auto parsed = ParseArgs(args, {{"scenario", true, true}, {"json", false}});
  if (!parsed.ok()) return UsageError("list", parsed.status().message());
  if (parsed->help) {
    std::fputs(kListHelp, stdout);
    return kExitPass;
  }
  if (!parsed->positional.empty())
    return UsageError("list", "unexpected argument " + parsed->positional[0]);
  std::vector<NfrSpec> nfr;
  auto scenarios = Scenarios(*parsed, &nfr);
  if (!scenarios.ok()) return UsageError("list", scenarios.status().message());
  if (parsed->Has("json")) {
    json out = json::array();
    for (const NfrSpec& s : nfr) {
      json targets = json::array();
      for (const NfrTarget& t : s.targets) {
        targets.push_back({{"id", t.id},
                           {"title", t.title},
                           {"requirement", t.requirement},
                           {"limit_s", t.limited ? json(t.limit_s) : json(nullptr)},
                           {"percentile", t.percentile},
                           {"clock", t.clock},
                           {"method", NfrMethodName(t.method)},
                           {"samples", t.samples},
                           {"backends", t.backends},
                           {"boundary", t.boundary},
                           {"check", t.limited ? json(NfrCheckPattern(s, t)) : json(nullptr)}});
      }
      out.push_back({{"name", s.name},
                     {"title", s.title},
                     {"origin", s.origin},
                     {"kind", "nfr"},
                     {"targets", targets}});
    }
    for (const auto& s : *scenarios) {
      json checks = json::array(), vars = json::object(), tasks = json::array();
      for (const CheckSpec* c : s.AllChecks()) checks.push_back(CheckJson(*c));
      for (const auto& v : s.variables) {
        vars[v.name] = {
            {"default", v.default_value}, {"pattern", v.pattern}, {"description", v.description}};
      }
      for (const auto& t : s.tasks) {
        tasks.push_back({{"id", t.id},
                         {"label", t.label},
                         {"tries", t.tries},
                         {"command", t.command},
                         {"timeout_s", t.timeout_s}});
      }
      out.push_back({{"name", s.name},
                     {"title", s.title},
                     {"origin", s.origin},
                     {"variables", vars},
                     {"tasks", tasks},
                     {"checks", checks}});
    }
    std::fputs(DumpJson(out).c_str(), stdout);
    return kExitPass;
  }
  for (const auto& s : *scenarios) {
    std::printf("scenario %s: %s\n  from %s\n", s.name.c_str(), s.title.c_str(), s.origin.c_str());
    if (!s.variables.empty()) std::printf("  variables (override with --var NAME=VALUE):\n");
    for (const auto& v : s.variables) {
      std::printf("    %-15s %s\n    %-15s   %s\n", v.name.c_str(), v.default_value.c_str(), "",
                  v.description.c_str());
    }
    std::printf("  tasks:\n");
    for (const auto& t : s.tasks) std::printf("    %-13s %s\n", t.id.c_str(), t.command.c_str());
    std::printf("  checks:\n");
    for (const CheckSpec* c : s.AllChecks()) {
      std::printf("    %-30s %-6s %-28s %s\n", c->id.c_str(), c->level.c_str(),
                  Join(c->requirements, " ").c_str(),
                  c->features.empty() ? "" : ("needs " + Join(c->features, ", ")).c_str());
      if (!c->title.empty()) std::printf("    %-30s %s\n", "", c->title.c_str());
    }
  }
  for (const NfrSpec& s : nfr) {
    std::printf("latency targets %s: %s\n  from %s\n", s.name.c_str(), s.title.c_str(),
                s.origin.c_str());
    for (const NfrTarget& t : s.targets) {
      std::printf(
          "    %-30s %-6s %-8s %s\n", NfrCheckPattern(s, t).c_str(),
          t.limited ? t.level.c_str() : "-", t.limited ? t.requirement.c_str() : "-",
          t.limited
              ? fmt::format("p{:g} < {}, {} samples, {}", t.percentile,
                            FormatSeconds(json(t.limit_s)), t.samples, NfrMethodName(t.method))
                    .c_str()
              : fmt::format("measured only ({} samples, {})", t.samples, NfrMethodName(t.method))
                    .c_str());
    }
  }
  return kExitPass;
}

int CmdCoverage(const std::vector<std::string>& args) {
  auto parsed = ParseArgs(args, {{"scenario", true, true}, {"json", false}});
  if (!parsed.ok()) return UsageError("coverage", parsed.status().message());
  if (parsed->help) {
    std::fputs(kCoverageHelp, stdout);
    return kExitPass;
  }
  if (!parsed->positional.empty())
    return UsageError("coverage", "unexpected argument " + parsed->positional[0]);
  std::vector<NfrSpec> nfr;
  auto scenarios = Scenarios(*parsed, &nfr);
  if (!scenarios.ok()) return UsageError("coverage", scenarios.status().message());
  std::map<std::string, std::vector<std::string>> by_req;
  for (const NfrSpec& s : nfr) {
    for (const NfrTarget& t : s.targets) {
      if (t.limited) by_req[t.requirement].push_back(NfrCheckPattern(s, t));
    }
  }
  for (const auto& s : *scenarios) {
    for (const CheckSpec* c : s.AllChecks()) {
      for (const auto& r : c->requirements) by_req[r].push_back(c->id);
    }
  }
  auto notes = BuiltinCoverageNotes();
  if (!notes.ok()) return UsageError("coverage", notes.status().message());
  std::map<std::string, const CoverageNote*> note_of;
  for (const CoverageNote& n : *notes) note_of[n.id] = &n;
  json rows = json::array(), gaps = json::array(), noted = json::array();
  int covered = 0;
  for (const Requirement& r : Requirements()) {
    auto it = by_req.find(r.id);
    std::vector<std::string> checks = it == by_req.end() ? std::vector<std::string>{} : it->second;
    auto n = note_of.find(r.id);
    json note = nullptr;
    if (n != note_of.end()) {
      note = {{"how", n->second->how},
              {"why_not_black_box", n->second->why_not_black_box},
              {"partial", n->second->partial}};
    }
    if (!checks.empty())
      ++covered;
    else if (!note.is_null())
      noted.push_back(r.id);
    else
      gaps.push_back(r.id);
    rows.push_back(
        {{"id", r.id}, {"group", r.group}, {"text", r.text}, {"checks", checks}, {"note", note}});
  }
  size_t total = Requirements().size();
  if (parsed->Has("json")) {
    std::fputs(DumpJson({{"requirements", rows},
                         {"covered", covered},
                         {"total", total},
                         {"noted", noted},
                         {"gaps", gaps}})
                   .c_str(),
               stdout);
    return kExitPass;
  }
  std::printf("requirement\tchecks\n");
  for (const auto& row : rows) {
    std::vector<std::string> checks = row["checks"];
    std::string text;
    if (!checks.empty()) {
      text = Join(checks, ", ");
      if (!row["note"].is_null()) text += "  (+ note: the rest is not black-box)";
    } else if (!row["note"].is_null()) {
      text = "- (note: no black-box check; see below)";
    } else {
      text = "- (gap)";
    }
    std::printf("%s\t%s\n", row["id"].get<std::string>().c_str(), text.c_str());
  }
  if (!note_of.empty()) {
    std::printf("\nnotes (%zu): what verifies these instead, and why a black-box check cannot\n",
                note_of.size());
    for (const auto& row : rows) {
      if (row["note"].is_null()) continue;
      const json& n = row["note"];
      std::printf(
          "  %s%s\n    why not black-box: %s\n    how: %s\n", row["id"].get<std::string>().c_str(),
          n["partial"].get<bool>() ? " (partial: checks cover the rest)" : "",
          n["why_not_black_box"].get<std::string>().c_str(), n["how"].get<std::string>().c_str());
    }
  }
  std::vector<std::string> gap_list = gaps, noted_list = noted;
  std::printf(
      "\ncovered by a check: %d of %zu requirement IDs\nexplained by a note only (%zu): %s\n"
      "gaps (%zu): %s\n",
      covered, total, noted_list.size(), Join(noted_list, " ").c_str(), gap_list.size(),
      Join(gap_list, " ").c_str());
  return kExitPass;
}

int CmdRender(const std::vector<std::string>& args) {
  auto parsed = ParseArgs(args, {{"out"}, {"tap", false}});
  if (!parsed.ok()) return UsageError("render", parsed.status().message());
  if (parsed->help) {
    std::fputs(kRenderHelp, stdout);
    return kExitPass;
  }
  if (parsed->positional.size() != 1) return UsageError("render", "give exactly one REPORT.json");
  const std::string& path = parsed->positional[0];
  auto text = ReadFile(path);
  if (!text.ok()) return UsageError("render", text.status().message());
  auto j = ParseJsonText(*text, path);
  if (!j.ok()) return UsageError("render", j.status().message());
  std::string dir = parsed->Get("out");
  if (dir.empty()) {
    size_t slash = path.rfind('/');
    dir = slash == std::string::npos ? "." : path.substr(0, slash);
  }
  if (sbx::Status st = WriteRenderedReports(*j, dir, parsed->Has("tap")); !st.ok()) {
    return UsageError("render", fmt::format("{}: {}", path, st.message()),
                      st.code() == sbx::Code::kInvalidArgument ? kExitUsage : kExitTarget);
  }
  std::printf("rendered %s into %s\n", path.c_str(), dir.c_str());
  return kExitPass;
}

}  // namespace sandcheck
