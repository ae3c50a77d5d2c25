// scenarios/selection.json agrees with SelectBackend for every case and for every worker
// capability set each case covers; the reader rejects malformed files (unknown keys are errors).
#include "select/selection_scenario.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace sbx::selection {
namespace {

using nlohmann::json;

// The source tree: $SBX_SOURCE_DIR, else derived from this file's path
// (<root>/reference/src/select/selection_scenario_test.cc).
std::string ScenarioPath() {
  if (const char* root = std::getenv("SBX_SOURCE_DIR")) {
    return std::string(root) + "/scenarios/selection.json";
  }
  std::string self = __FILE__;
  size_t at = self.rfind("/reference/src/select/");
  if (at == std::string::npos) return "scenarios/selection.json";
  return self.substr(0, at) + "/scenarios/selection.json";
}

std::vector<ScenarioCase> LoadOrDie() {
  StatusOr<std::vector<ScenarioCase>> cases = LoadSelectionScenario(ScenarioPath());
  EXPECT_TRUE(cases.ok()) << cases.status().ToString();
  return cases.ok() ? *cases : std::vector<ScenarioCase>{};
}

TEST(SelectionScenario, EveryCaseHoldsForEveryWorkerItCovers) {
  std::vector<ScenarioCase> cases = LoadOrDie();
  ASSERT_GE(cases.size(), 30u);
  size_t checks = 0;
  for (const ScenarioCase& c : cases) {
    std::vector<BackendSet> workers = WorkersFor(c);
    ASSERT_FALSE(workers.empty()) << c.id;
    for (const BackendSet& w : workers) {
      ++checks;
      Status s = CheckOutcome(c, SelectBackend(ToInput(c, w)));
      EXPECT_TRUE(s.ok()) << s.message() << " (worker " << w.ToString() << ")";
    }
  }
  EXPECT_GT(checks, cases.size());  // the has/lacks expansion is really exercised
}

// The file has teeth: plausible selection bugs each fail at least one case.
TEST(SelectionScenario, CatchesPlausibleSelectionBugs) {
  using Selector = std::function<StatusOr<Decision>(Input)>;
  const std::vector<std::pair<const char*, Selector>> mutants = {
      {"ignores trust",
       [](Input in) {
         in.trust = Trust::kFirstParty;
         return SelectBackend(in);
       }},
      {"treats unverified as verified",
       [](Input in) {
         if (in.trust == Trust::kUnverified) in.trust = Trust::kVerified;
         return SelectBackend(in);
       }},
      {"ignores the tenant floor",
       [](Input in) {
         in.tenant.floor.reset();
         return SelectBackend(in);
       }},
      {"ignores the preference",
       [](Input in) {
         in.preference.reset();
         return SelectBackend(in);
       }},
      {"never upgrades",
       [](Input in) {
         in.tenant.allow_upgrade = false;
         return SelectBackend(in);
       }},
      {"falls back to what the worker has",
       [](Input in) -> StatusOr<Decision> {
         StatusOr<Decision> r = SelectBackend(in);
         if (r.ok() || in.worker.empty()) return r;
         Decision d;
         d.backend = in.worker.ToVector().back();
         return d;
       }},
      {"upgrades to the strongest",
       [](Input in) -> StatusOr<Decision> {
         StatusOr<Decision> r = SelectBackend(in);
         if (r.ok() && r->upgraded) r->backend = in.worker.ToVector().back();
         return r;
       }},
  };
  const std::vector<ScenarioCase> cases = LoadOrDie();
  for (const auto& [name, select] : mutants) {
    size_t caught = 0;
    for (const ScenarioCase& c : cases) {
      for (const BackendSet& w : WorkersFor(c)) {
        if (!CheckOutcome(c, select(ToInput(c, w))).ok()) ++caught;
      }
    }
    EXPECT_GT(caught, 0u) << "no case catches a selection that " << name;
  }
}

TEST(SelectionScenario, CoversEverySelectionRequirement) {
  std::set<std::string> cited, levels;
  bool unavailable = false, backend = false;
  for (const ScenarioCase& c : LoadOrDie()) {
    cited.insert(c.requirements.begin(), c.requirements.end());
    levels.insert(c.level);
    (c.expect_backend ? backend : unavailable) = true;
  }
  for (const char* id : {"BK-8", "SEL-1", "SEL-2", "SEL-3", "SEL-4", "SEL-5", "SEL-6"}) {
    EXPECT_TRUE(cited.count(id)) << id << " has no case";
  }
  EXPECT_EQ(levels, (std::set<std::string>{"must", "reference"}));
  EXPECT_TRUE(backend);
  EXPECT_TRUE(unavailable);
}

json GoodCase() {
  return json::parse(R"({"id": "x", "requirements": ["SEL-6"], "level": "must",
    "preference": "native", "trust": "untrusted",
    "worker": {"has": ["gvisor"], "lacks": ["microvm"]}, "expect": {"backend": "gvisor"}})");
}

json Doc(const json& c) { return json{{"version", 1}, {"cases", json::array({c})}}; }

TEST(SelectionScenario, ReaderAcceptsAMinimalCase) {
  StatusOr<std::vector<ScenarioCase>> r = ParseSelectionScenario(Doc(GoodCase()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 1u);
  const ScenarioCase& c = (*r)[0];
  EXPECT_EQ(c.preference, BackendKind::kNative);
  EXPECT_FALSE(c.tenant_floor.has_value());
  EXPECT_TRUE(c.allow_upgrade);  // documented default
  EXPECT_EQ(c.trust, Trust::kUntrusted);
  EXPECT_EQ(c.expect_backend, BackendKind::kGvisor);
  EXPECT_EQ(WorkersFor(c).size(), 32u);  // 5 unconstrained backends
}

TEST(SelectionScenario, ReaderRejectsMalformedInput) {
  struct Bad {
    const char* what;
    json doc;
  };
  auto with = [](const char* key, json value) {
    json c = GoodCase();
    c[key] = std::move(value);
    return Doc(c);
  };
  auto without = [](const char* key) {
    json c = GoodCase();
    c.erase(key);
    return Doc(c);
  };
  json two = Doc(GoodCase());
  two["cases"].push_back(GoodCase());
  json top_extra = Doc(GoodCase());
  top_extra["comment"] = "x";
  json v2 = Doc(GoodCase());
  v2["version"] = 2;
  const std::vector<Bad> bad = {
      {"unknown top-level key", top_extra},
      {"version 2", v2},
      {"no cases", json{{"version", 1}, {"cases", json::array()}}},
      {"unknown case key", with("priority", 1)},
      {"unknown backend", with("preference", "firecracker")},
      {"unknown floor", with("tenant_floor", "GVISOR")},
      {"unknown trust", with("trust", "trusted")},
      {"non-canonical trust", with("trust", "first-party")},
      {"missing trust", without("trust")},
      {"missing worker", without("worker")},
      {"missing expect", without("expect")},
      {"missing level", without("level")},
      {"bad level", with("level", "should")},
      {"bad id", with("id", "Has Spaces")},
      {"empty requirements", with("requirements", json::array())},
      {"bad requirement id", with("requirements", json::array({"sel-6"}))},
      {"non-bool allow_upgrade", with("allow_upgrade", "yes")},
      {"unknown worker key", with("worker", json{{"has", {"gvisor"}}, {"maybe", {"oci"}}})},
      {"worker without has", with("worker", json{{"lacks", {"oci"}}})},
      {"has and lacks overlap", with("worker", json{{"has", {"gvisor"}}, {"lacks", {"gvisor"}}})},
      {"duplicate in has", with("worker", json{{"has", {"oci", "oci"}}})},
      {"two expectations",
       with("expect", json{{"backend", "gvisor"}, {"status", "sandbox_unavailable"}})},
      {"empty expectation", with("expect", json::object())},
      {"other status", with("expect", json{{"status", "timeout"}})},
      {"unknown expect key", with("expect", json{{"result", "gvisor"}})},
      {"duplicate id", two},
      {"not an object", json::array()},
  };
  for (const Bad& b : bad) {
    StatusOr<std::vector<ScenarioCase>> r = ParseSelectionScenario(b.doc);
    EXPECT_FALSE(r.ok()) << b.what;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << b.what;
    }
  }
  StatusOr<std::vector<ScenarioCase>> missing =
      LoadSelectionScenario("/nonexistent/selection.json");
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace sbx::selection
