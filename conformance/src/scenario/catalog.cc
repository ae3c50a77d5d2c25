#include "scenario/catalog.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "common/json_strict.h"
#include "scenario/embedded.h"

namespace sandcheck {
namespace {

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<Requirement> ParseRequirements() {
  std::vector<Requirement> out;
  auto data = FindEmbedded("conformance/requirements.json");
  if (!data) return out;
  json j = json::parse(*data, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j["requirements"].is_array()) return out;
  for (const auto& r : j["requirements"]) {
    out.push_back({r.value("id", ""), r.value("group", ""), r.value("text", "")});
  }
  return out;
}

}  // namespace

sbx::StatusOr<Source> FindScenarioSource(const std::string& arg) {
  bool is_file = arg.find('/') != std::string::npos ||
                 (arg.size() > 5 && arg.compare(arg.size() - 5, 5, ".json") == 0);
  if (is_file) {
    if (!IsFile(arg)) return sbx::NotFound(fmt::format("scenario file {} does not exist", arg));
    ASSIGN_OR_RETURN(std::string text, ReadFile(arg));
    return Source{arg, std::move(text)};
  }
  if (const char* dir = std::getenv("SANDCHECK_SCENARIO_DIR"); dir && *dir) {
    std::string path = fmt::format("{}/{}.json", dir, arg);
    if (IsFile(path)) {
      ASSIGN_OR_RETURN(std::string text, ReadFile(path));
      return Source{path, std::move(text)};
    }
  }
  std::string rel = fmt::format("scenarios/{}.json", arg);
  if (auto data = FindEmbedded(rel)) return Source{"embedded:" + rel, std::string(*data)};
  std::vector<std::string> names = BuiltinScenarioNames();
  for (const auto& n : BuiltinNfrNames()) names.push_back(n);
  return sbx::NotFound(fmt::format("no scenario named '{}' (built in: {}; or give a FILE.json)",
                                   arg, Join(names, ", ")));
}

bool IsNfrDocument(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("kind") && j["kind"] == "nfr";
}

std::vector<std::string> BuiltinNfrNames() {
  std::vector<std::string> names;
  for (const auto& f : EmbeddedFiles()) {
    std::string_view p = f.path;
    if (p.rfind("scenarios/", 0) != 0 || p.find('/', 10) != std::string_view::npos ||
        p.size() <= 15 || p.substr(p.size() - 5) != ".json") {
      continue;
    }
    if (IsNfrDocument(f.data)) names.emplace_back(p.substr(10, p.size() - 15));
  }
  std::sort(names.begin(), names.end());
  return names;
}

const std::vector<Requirement>& Requirements() {
  static const std::vector<Requirement> kReqs = ParseRequirements();
  return kReqs;
}

bool IsKnownRequirement(const std::string& id) {
  const auto& reqs = Requirements();
  return std::any_of(reqs.begin(), reqs.end(), [&](const Requirement& r) { return r.id == id; });
}

std::vector<std::string> BuiltinScenarioNames() {
  std::vector<std::string> names;
  for (const auto& f : EmbeddedFiles()) {
    std::string_view p = f.path;
    if (p.rfind("scenarios/", 0) != 0 || p.find('/', 10) != std::string_view::npos ||
        p.size() <= 15 || p.substr(p.size() - 5) != ".json") {
      continue;
    }
    // scenarios/ also holds data for other tools (selection.json: the backend-selection table);
    // a sandcheck scenario is the object with "format" and "tasks".
    json j = json::parse(f.data, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("format") && j.contains("tasks"))
      names.emplace_back(p.substr(10, p.size() - 15));
  }
  std::sort(names.begin(), names.end());
  return names;
}

sbx::StatusOr<std::vector<Scenario>> LoadScenarios(const std::vector<std::string>& names_or_files,
                                                   const std::map<std::string, std::string>& vars,
                                                   const std::string& backend) {
  std::vector<Scenario> out;
  std::set<std::string> used, seen;
  for (const auto& arg : names_or_files) {
    ASSIGN_OR_RETURN(Source src, FindScenarioSource(arg));
    ASSIGN_OR_RETURN(Scenario s, LoadScenario(src.text, src.origin, vars, &used, backend));
    if (!seen.insert(s.name).second) {
      return sbx::InvalidArgument(fmt::format("scenario '{}' given twice", s.name));
    }
    for (const CheckSpec* c : s.AllChecks()) {
      for (const auto& id : c->requirements) {
        if (!IsKnownRequirement(id)) {
          return sbx::InvalidArgument(
              fmt::format("{}: check {} cites {}, which is not in the requirement catalogue",
                          src.origin, c->id, id));
        }
      }
    }
    out.push_back(std::move(s));
  }
  for (const auto& [k, v] : vars) {
    if (!used.count(k)) {
      std::vector<std::string> declared;
      for (const auto& s : out) {
        for (const auto& var : s.variables) declared.push_back(var.name);
      }
      return sbx::InvalidArgument(
          fmt::format("--var {}: no scenario of this run declares it (declared: {})", k,
                      declared.empty() ? "none" : Join(declared, ", ")));
    }
  }
  return out;
}

}  // namespace sandcheck
