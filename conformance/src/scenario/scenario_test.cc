// Scenario loading: strict keys, variables, defaults, and the built-in six-task scenario.
#include "scenario/scenario.h"

#include <gtest/gtest.h>

#include <functional>

#include "scenario/catalog.h"
#include "scenario/embedded.h"

namespace sandcheck {
namespace {

using nlohmann::json;

json Minimal() {
  return json::parse(R"({
    "format": 1, "name": "mini",
    "variables": {"host": {"default": "a.example", "pattern": "^[a-z.]+$"}},
    "sandbox": {"egress": {"rules": [{"kind": "http", "hosts": ["{{host}}"], "ports": [80]}]},
                "services": {"{{host}}": "mirror"}},
    "tasks": [{"id": "t1", "command": "echo {{host}}",
               "check": {"id": "mini/echo", "requirements": ["SCN-1"], "level": "MUST", "kind": "exit_ok"}}]
  })");
}

sbx::StatusOr<Scenario> Load(const json& j, std::map<std::string, std::string> vars = {}) {
  std::set<std::string> used;
  return LoadScenario(j.dump(), "test.json", vars, &used);
}

TEST(Scenario, LoadsWithDefaultsAndVariables) {
  auto s = Load(Minimal());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->tasks[0].command, "echo a.example");
  EXPECT_EQ(s->tasks[0].label, "t1");  // default: the id
  EXPECT_EQ(s->tasks[0].tries, "t1");  // default: the label
  EXPECT_DOUBLE_EQ(s->tasks[0].timeout_s, 20);
  EXPECT_TRUE(s->after_each.revert);
  EXPECT_EQ(s->after_each.clean_check, "find /work -mindepth 1 | wc -l");
  EXPECT_EQ(s->sandbox.services.at("a.example"), "mirror");  // keys are substituted too
  EXPECT_EQ(s->sandbox.egress["rules"][0]["hosts"][0], "a.example");
  EXPECT_EQ(s->tasks[0].check->params["stdout_contains"], "");  // param default filled in
}

TEST(Scenario, VarOverrideAppliesAndIsValidated) {
  auto s = Load(Minimal(), {{"host", "b.example"}});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->tasks[0].command, "echo b.example");
  auto bad = Load(Minimal(), {{"host", "b.example; rm -rf /"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("does not match"), std::string::npos)
      << bad.status().message();
}

TEST(Scenario, UnknownKeysAreErrorsWithTheirPath) {
  json j = Minimal();
  j["tasks"][0]["comand"] = "typo";
  auto s = Load(j);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), sbx::Code::kInvalidArgument);
  EXPECT_NE(s.status().message().find("tasks[0].comand: unknown key"), std::string::npos)
      << s.status().message();

  j = Minimal();
  j["tasks"][0]["check"]["params"] = {{"stdout_contain", "x"}};
  s = Load(j);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("params.stdout_contain: unknown key"), std::string::npos)
      << s.status().message();

  j = Minimal();
  j["sandbox"]["limits"] = {{"cpu", 500}};
  EXPECT_FALSE(Load(j).ok());
  j = Minimal();
  j["extra"] = 1;
  EXPECT_FALSE(Load(j).ok());
}

TEST(Scenario, RejectsBadValues) {
  std::vector<std::function<void(json&)>> breakers = {
      [](json& j) { j["format"] = 2; },
      [](json& j) { j["name"] = "Bad Name"; },
      [](json& j) { j["tasks"] = json::array(); },
      [](json& j) { j["tasks"][0]["command"] = "echo {{nope}}"; },
      [](json& j) { j["tasks"][0]["command"] = "echo {{host"; },
      [](json& j) { j["tasks"][0]["timeout_s"] = -1; },
      [](json& j) { j["tasks"][0]["check"]["level"] = "MAY"; },
      [](json& j) {
        j["tasks"][0]["check"]["kind"] = "clean_after_revert";
      },  // scenario-level kind
      [](json& j) { j["tasks"][0]["check"]["id"] = "other/echo"; },
      [](json& j) { j["tasks"][0]["check"]["requirements"] = {"scn1"}; },
      [](json& j) { j["tasks"][0]["check"]["requires_pass"] = {"mini/later"}; },
      [](json& j) { j["tasks"].push_back(j["tasks"][0]); },  // duplicate ids
      [](json& j) { j["sandbox"]["egress"]["rules"][0]["kind"] = "udp"; },
      [](json& j) { j["sandbox"]["egress"]["rules"][0]["ports"] = {70000}; },
      [](json& j) {
        j["sandbox"]["services"] = {{"x", "database"}};
      },
      [](json& j) { j["variables"]["host"]["default"] = "UPPER"; },
      [](json& j) { j["variables"]["host"]["pattern"] = "(["; },
  };
  for (size_t i = 0; i < breakers.size(); ++i) {
    json j = Minimal();
    breakers[i](j);
    auto s = Load(j);
    EXPECT_FALSE(s.ok()) << "breaker " << i << " was accepted";
    if (!s.ok()) {
      EXPECT_EQ(s.status().code(), sbx::Code::kInvalidArgument) << i;
    }
  }
}

TEST(Scenario, MalformedJsonNamesLineAndColumn) {
  std::set<std::string> used;
  auto s = LoadScenario("{\n  \"format\": 1,\n  \"name\": \n}", "x.json", {}, &used);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("x.json:4:"), std::string::npos) << s.status().message();
}

TEST(Scenario, SixTaskIsBuiltInAndComplete) {
  auto s = LoadScenarios({"six-task"}, {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const Scenario& six = (*s)[0];
  ASSERT_EQ(six.tasks.size(), 6u);
  EXPECT_EQ(six.sandbox.limits["cpu_millicores"], 500);
  EXPECT_EQ(six.sandbox.limits["memory_bytes"], 256 << 20);
  std::set<std::string> reqs;
  for (const CheckSpec* c : six.AllChecks()) {
    for (const auto& r : c->requirements) reqs.insert(r);
  }
  for (int i = 1; i <= 7; ++i) EXPECT_TRUE(reqs.count("SCN-" + std::to_string(i))) << i;
  EXPECT_EQ(six.tasks[0].command,
            "wget -q -O hello.txt http://pkg-mirror.demo-tools.svc.cluster.local/hello-1.0.txt && "
            "cat hello.txt && ls");
}

TEST(Scenario, UnusedVarIsAnError) {
  auto s = LoadScenarios({"six-task"}, {{"mirror_hots", "x"}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("mirror_hots"), std::string::npos);
  auto ok = LoadScenarios({"six-task"}, {{"mirror_host", "mirror.internal"}});
  ASSERT_TRUE(ok.ok());
  EXPECT_NE((*ok)[0].tasks[0].command.find("http://mirror.internal/"), std::string::npos);
}

// A backend overlay (docs/scenarios.md "Backend overlays"): applied only on its backend, with
// the tasks it does not list skipped (never passed) and every overlay checked whatever the
// backend.
json WithOverlay() {
  json j = Minimal();
  j["tasks"].push_back(json::parse(R"({"id": "t2", "command": "echo two | tr a-z A-Z",
      "check": {"id": "mini/two", "requirements": ["SCN-1"], "level": "MUST", "kind": "expect",
                "params": {"exit": 0, "stdout_contains": "TWO", "stderr_contains": "x"}}})"));
  j["backend_overlays"] = json::parse(R"({"wasm": {
      "why": "no shell there",
      "sandbox": {"services": {}},
      "after_each_task": {"clean_check": "count /work"},
      "tasks": {"t2": {"command": "upper two",
                       "check_params": {"stdout_contains": "TWO!", "stderr_contains": null}}}}})");
  return j;
}

sbx::StatusOr<Scenario> LoadOn(const json& j, const std::string& backend) {
  std::set<std::string> used;
  return LoadScenario(j.dump(), "test.json", {}, &used, backend);
}

TEST(BackendOverlay, OtherBackendsRunTheScenarioAsWritten) {
  for (const char* backend : {"", "native", "oci"}) {
    auto s = LoadOn(WithOverlay(), backend);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->tasks[1].command, "echo two | tr a-z A-Z") << backend;
    EXPECT_EQ(s->tasks[1].check->params["stderr_contains"], json::array({"x"}));
    EXPECT_TRUE(s->tasks[0].backend_skip.empty());
    EXPECT_EQ(s->after_each.clean_check, "find /work -mindepth 1 | wc -l");
    EXPECT_EQ(s->sandbox.services.size(), 1u);
  }
}

TEST(BackendOverlay, AppliesOnItsBackendAndSkipsWhatItDoesNotList) {
  auto s = LoadOn(WithOverlay(), "wasm");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  // t1 is not listed: skipped with the overlay's why, never run (so never passed).
  EXPECT_EQ(s->tasks[0].backend_skip, "not run on the wasm backend: no shell there");
  // t2 runs its overlay command; a check param replaced, one set back to the kind's default.
  EXPECT_TRUE(s->tasks[1].backend_skip.empty());
  EXPECT_EQ(s->tasks[1].command, "upper two");
  EXPECT_EQ(s->tasks[1].check->params["stdout_contains"], json::array({"TWO!"}));
  EXPECT_EQ(s->tasks[1].check->params["exit"], 0);
  EXPECT_EQ(s->tasks[1].check->params["stderr_contains"], json::array());  // the kind's default
  EXPECT_EQ(s->after_each.clean_check, "count /work");
  EXPECT_TRUE(s->sandbox.services.empty());
  EXPECT_TRUE(s->backend_skip.empty());
}

TEST(BackendOverlay, TaskSkipAndScenarioSkipGiveTheirReason) {
  json j = WithOverlay();
  j["backend_overlays"]["wasm"]["tasks"]["t1"] = {{"skip", "nothing to contain"}};
  auto s = LoadOn(j, "wasm");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->tasks[0].backend_skip, "not run on the wasm backend: nothing to contain");

  j["backend_overlays"]["wasm"]["skip"] = true;
  s = LoadOn(j, "wasm");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->backend_skip, "not run on the wasm backend: no shell there");
  s = LoadOn(j, "native");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->backend_skip.empty());
}

TEST(BackendOverlay, EveryOverlayIsCheckedWhateverTheBackend) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* message;
  };
  std::vector<Case> cases = {
      {"unknown task", [](json& o) { o["tasks"]["t9"] = json::object(); },
       "backend_overlays.wasm.tasks.t9: no task of that id"},
      {"unknown key", [](json& o) { o["comand"] = "x"; }, "comand"},
      {"unknown task key", [](json& o) { o["tasks"]["t2"]["cmd"] = "x"; }, "cmd"},
      {"no why", [](json& o) { o.erase("why"); }, "why"},
      {"empty why", [](json& o) { o["why"] = ""; }, "why: empty"},
      {"bad skip", [](json& o) { o["skip"] = "yes"; }, "skip"},
  };
  for (const Case& c : cases) {
    json j = WithOverlay();
    c.edit(j["backend_overlays"]["wasm"]);
    auto s = LoadOn(j, "native");  // checked although the run is not on wasm
    ASSERT_FALSE(s.ok()) << c.what;
    EXPECT_EQ(s.status().code(), sbx::Code::kInvalidArgument) << c.what;
    EXPECT_NE(s.status().message().find(c.message), std::string::npos)
        << c.what << ": " << s.status().message();
  }
  json j = WithOverlay();
  j["backend_overlays"]["Wasm!"] = j["backend_overlays"]["wasm"];
  auto s = LoadOn(j, "wasm");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("not a backend name"), std::string::npos);
}

TEST(BackendOverlay, EveryBuiltInScenarioLoadsOnWasm) {
  for (const char* name : {"six-task", "backends", "egress", "failure", "isolation", "limits"}) {
    auto s = LoadScenarios({name}, {}, "wasm");
    ASSERT_TRUE(s.ok()) << name << ": " << s.status().ToString();
  }
  auto six = LoadScenarios({"six-task"}, {}, "wasm");
  ASSERT_TRUE(six.ok());
  int run = 0;
  for (const TaskSpec& t : (*six)[0].tasks) {
    if (t.backend_skip.empty()) ++run;
  }
  EXPECT_EQ(run, 2);  // cpu and memory; the four network tasks are skips
}

TEST(Catalog, RequirementsCopyIsComplete) {
  // The design's catalogue has 83 IDs in 14 groups; a lost line would silently shrink coverage.
  EXPECT_EQ(Requirements().size(), 83u);
  EXPECT_TRUE(IsKnownRequirement("SCN-7"));
  EXPECT_TRUE(IsKnownRequirement("PROD-5"));
  EXPECT_FALSE(IsKnownRequirement("SCN-8"));
}

}  // namespace
}  // namespace sandcheck
