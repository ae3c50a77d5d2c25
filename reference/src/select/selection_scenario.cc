// Strict reader of scenarios/selection.json (see selection_scenario.h).
#include "select/selection_scenario.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

namespace sbx::selection {
namespace {

using nlohmann::json;

Status OnlyKeys(const json& obj, const std::set<std::string>& allowed, std::string_view where) {
  if (!obj.is_object()) return InvalidArgument(fmt::format("{}: must be an object", where));
  for (const auto& [key, value] : obj.items()) {
    if (!allowed.count(key))
      return InvalidArgument(fmt::format("{}: unknown key \"{}\"", where, key));
  }
  return Status::Ok();
}

StatusOr<std::string> GetString(const json& obj, const char* key, std::string_view where) {
  auto it = obj.find(key);
  if (it == obj.end()) return InvalidArgument(fmt::format("{}: missing \"{}\"", where, key));
  if (!it->is_string())
    return InvalidArgument(fmt::format("{}: \"{}\" must be a string", where, key));
  return it->get<std::string>();
}

StatusOr<std::optional<BackendKind>> GetOptionalBackend(const json& obj, const char* key,
                                                        std::string_view where) {
  if (!obj.contains(key)) return std::optional<BackendKind>();
  ASSIGN_OR_RETURN(std::string name, GetString(obj, key, where));
  StatusOr<BackendKind> b = ParseBackend(name);
  if (!b.ok()) return b.status().WithContext(fmt::format("{}: \"{}\"", where, key));
  return std::optional<BackendKind>(*b);
}

StatusOr<BackendSet> GetBackendList(const json& obj, const char* key, std::string_view where) {
  BackendSet set;
  auto it = obj.find(key);
  if (it == obj.end()) return set;
  if (!it->is_array())
    return InvalidArgument(fmt::format("{}: \"{}\" must be an array", where, key));
  for (const json& item : *it) {
    if (!item.is_string()) {
      return InvalidArgument(fmt::format("{}: \"{}\" holds a non-string", where, key));
    }
    StatusOr<BackendKind> b = ParseBackend(item.get<std::string>());
    if (!b.ok()) return b.status().WithContext(fmt::format("{}: \"{}\"", where, key));
    if (set.Has(*b)) {
      return InvalidArgument(fmt::format("{}: \"{}\" lists {} twice", where, key, BackendName(*b)));
    }
    set.Add(*b);
  }
  return set;
}

StatusOr<ScenarioCase> ParseCase(const json& j, size_t index) {
  std::string where = fmt::format("cases[{}]", index);
  RETURN_IF_ERROR(OnlyKeys(j,
                           {"id", "requirements", "level", "preference", "tenant_floor",
                            "allow_upgrade", "trust", "worker", "expect", "note"},
                           where));
  ScenarioCase c;
  ASSIGN_OR_RETURN(c.id, GetString(j, "id", where));
  static const std::regex kId("[a-z0-9][a-z0-9-]*");
  if (!std::regex_match(c.id, kId)) {
    return InvalidArgument(fmt::format("{}: id \"{}\" must match [a-z0-9][a-z0-9-]*", where, c.id));
  }
  where = fmt::format("case \"{}\"", c.id);

  auto reqs = j.find("requirements");
  if (reqs == j.end() || !reqs->is_array() || reqs->empty()) {
    return InvalidArgument(fmt::format("{}: \"requirements\" must be a non-empty array", where));
  }
  static const std::regex kReqId("[A-Z]+-[0-9]+");
  for (const json& r : *reqs) {
    if (!r.is_string() || !std::regex_match(r.get<std::string>(), kReqId)) {
      return InvalidArgument(
          fmt::format("{}: requirement {} is not an ID like SEL-6", where, r.dump()));
    }
    c.requirements.push_back(r.get<std::string>());
  }

  ASSIGN_OR_RETURN(c.level, GetString(j, "level", where));
  if (c.level != "must" && c.level != "reference") {
    return InvalidArgument(fmt::format("{}: level \"{}\" is not must|reference", where, c.level));
  }
  ASSIGN_OR_RETURN(c.preference, GetOptionalBackend(j, "preference", where));
  ASSIGN_OR_RETURN(c.tenant_floor, GetOptionalBackend(j, "tenant_floor", where));
  if (j.contains("allow_upgrade")) {
    if (!j["allow_upgrade"].is_boolean()) {
      return InvalidArgument(fmt::format("{}: \"allow_upgrade\" must be a boolean", where));
    }
    c.allow_upgrade = j["allow_upgrade"].get<bool>();
  }
  ASSIGN_OR_RETURN(std::string trust, GetString(j, "trust", where));
  StatusOr<Trust> t = ParseTrust(trust);
  if (!t.ok() || TrustName(*t) != trust) {  // the file uses the canonical names only
    return InvalidArgument(
        fmt::format("{}: trust \"{}\" is not one of first_party, verified, untrusted, unverified",
                    where, trust));
  }
  c.trust = *t;

  if (!j.contains("worker")) return InvalidArgument(fmt::format("{}: missing \"worker\"", where));
  const json& w = j["worker"];
  std::string wwhere = where + ": worker";
  RETURN_IF_ERROR(OnlyKeys(w, {"has", "lacks"}, wwhere));
  if (!w.contains("has")) return InvalidArgument(fmt::format("{}: missing \"has\"", wwhere));
  ASSIGN_OR_RETURN(c.has, GetBackendList(w, "has", wwhere));
  ASSIGN_OR_RETURN(c.lacks, GetBackendList(w, "lacks", wwhere));
  if ((c.has.mask() & c.lacks.mask()) != 0) {
    return InvalidArgument(fmt::format("{}: a backend is both in \"has\" and \"lacks\"", wwhere));
  }

  if (!j.contains("expect")) return InvalidArgument(fmt::format("{}: missing \"expect\"", where));
  const json& e = j["expect"];
  std::string ewhere = where + ": expect";
  RETURN_IF_ERROR(OnlyKeys(e, {"backend", "status"}, ewhere));
  if (e.size() != 1) {
    return InvalidArgument(fmt::format("{}: exactly one of \"backend\" or \"status\"", ewhere));
  }
  if (e.contains("backend")) {
    ASSIGN_OR_RETURN(c.expect_backend, GetOptionalBackend(e, "backend", ewhere));
  } else {
    ASSIGN_OR_RETURN(std::string status, GetString(e, "status", ewhere));
    if (status != "sandbox_unavailable") {
      return InvalidArgument(
          fmt::format("{}: status \"{}\" (only sandbox_unavailable)", ewhere, status));
    }
  }
  if (j.contains("note")) {
    ASSIGN_OR_RETURN(c.note, GetString(j, "note", where));
  }
  return c;
}

}  // namespace

StatusOr<std::vector<ScenarioCase>> ParseSelectionScenario(const json& doc) {
  RETURN_IF_ERROR(OnlyKeys(doc, {"version", "cases"}, "selection scenario"));
  if (!doc.contains("version") || doc["version"] != 1) {
    return InvalidArgument("selection scenario: \"version\" must be 1");
  }
  if (!doc.contains("cases") || !doc["cases"].is_array() || doc["cases"].empty()) {
    return InvalidArgument("selection scenario: \"cases\" must be a non-empty array");
  }
  std::vector<ScenarioCase> cases;
  std::set<std::string> ids;
  for (size_t i = 0; i < doc["cases"].size(); ++i) {
    ASSIGN_OR_RETURN(ScenarioCase c, ParseCase(doc["cases"][i], i));
    if (!ids.insert(c.id).second) {
      return InvalidArgument(fmt::format("selection scenario: duplicate id \"{}\"", c.id));
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

StatusOr<std::vector<ScenarioCase>> LoadSelectionScenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(fmt::format("cannot open {}", path));
  std::stringstream text;
  text << in.rdbuf();
  json doc = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument(fmt::format("{}: not valid JSON", path));
  StatusOr<std::vector<ScenarioCase>> cases = ParseSelectionScenario(doc);
  if (!cases.ok()) return cases.status().WithContext(path);
  return cases;
}

std::vector<BackendSet> WorkersFor(const ScenarioCase& c) {
  std::vector<BackendSet> out;
  const uint8_t free = BackendSet::All().mask() & ~(c.has.mask() | c.lacks.mask());
  // Every subset of the unconstrained backends, added to `has`.
  for (uint8_t sub = free;; sub = (sub - 1) & free) {
    out.push_back(BackendSet::FromMask(c.has.mask() | sub));
    if (sub == 0) break;
  }
  return out;
}

Input ToInput(const ScenarioCase& c, const BackendSet& worker) {
  Input in;
  in.preference = c.preference;
  in.tenant.floor = c.tenant_floor;
  in.tenant.allow_upgrade = c.allow_upgrade;
  in.trust = c.trust;
  in.worker = worker;
  return in;
}

Status CheckOutcome(const ScenarioCase& c, const StatusOr<Decision>& got) {
  std::string want = c.expect_backend ? std::string(BackendName(*c.expect_backend))
                                      : std::string("sandbox_unavailable");
  std::string have = got.ok() ? std::string(BackendName(got->backend)) : got.status().ToString();
  if (c.expect_backend) {
    if (got.ok() && got->backend == *c.expect_backend) return Status::Ok();
  } else if (!got.ok() && got.status().code() == Code::kSandboxUnavailable) {
    return Status::Ok();
  }
  return FailedPrecondition(fmt::format("case \"{}\": want {}, got {}", c.id, want, have));
}

}  // namespace sbx::selection
