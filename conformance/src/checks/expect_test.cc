// Over 600 lines on purpose: every word of the expectation vocabulary, each shown to fail.
// The `expect` kind (scenarios isolation, limits, failure, backends): loading its parameters
// strictly, and judging fabricated evidence — every condition must be able to fail.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>

#include "checks/checks.h"
#include "checks/verdict.h"
#include "host/host_scan.h"
#include "scenario/catalog.h"
#include "scenario/coverage_notes.h"
#include "scenario/scenario.h"

namespace sandcheck {
namespace {

using nlohmann::json;

// A one-task scenario whose check is `expect` with `params` (and the task's extra fields; a
// "features" key among them goes to the check).
std::string Doc(const json& params, json task_extra = json::object(),
                const std::string& command = "true") {
  json task = {{"id", "t"},
               {"command", command},
               {"check",
                {{"id", "x/t"},
                 {"requirements", {"FS-1"}},
                 {"level", "MUST"},
                 {"kind", "expect"},
                 {"params", params}}}};
  if (task_extra.contains("features")) {
    task["check"]["features"] = task_extra["features"];
    task_extra.erase("features");
  }
  task.update(task_extra);
  json doc = {{"format", 1}, {"name", "x"}, {"sandbox", json::object()}, {"tasks", {task}}};
  return doc.dump();
}

sbx::StatusOr<Scenario> Load(const json& params, const json& task_extra = json::object(),
                             const std::string& command = "true") {
  return LoadScenario(Doc(params, task_extra, command), "test", {}, nullptr);
}

std::string LoadError(const json& params, const json& task_extra = json::object(),
                      const std::string& command = "true") {
  auto s = Load(params, task_extra, command);
  return s.ok() ? "" : s.status().message();
}

TEST(ExpectParams, DefaultsAreFilledAndListsAcceptAString) {
  auto s = Load({{"stdout_contains", "a"}, {"json", {{"/n", {{"max", 3}}}}}});
  ASSERT_TRUE(s.ok()) << s.status().message();
  const json& p = s->tasks[0].check->params;
  EXPECT_EQ(p["status"], json({"ok"}));
  EXPECT_EQ(p["stdout_contains"], json({"a"}));
  EXPECT_TRUE(p["exit"].is_null());
  EXPECT_EQ(p["max_seconds"], 0.0);
  EXPECT_TRUE(p["then"].is_null());
  // With any_of, the status is left to the alternatives.
  auto a = Load({{"any_of", {{{"status", "timeout"}}, {{"status", "ok"}}}}});
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->tasks[0].check->params["status"], json::array());
}

TEST(ExpectParams, BadParamsAreRefusedWithTheirPath) {
  EXPECT_NE(LoadError({{"status", "crashed"}}).find("status: 'crashed'"), std::string::npos);
  EXPECT_NE(LoadError({{"exit", 0}, {"exit_nonzero", true}}).find("not both"), std::string::npos);
  EXPECT_NE(LoadError({{"stdout_matches", "("}}).find("not a valid regex"), std::string::npos);
  EXPECT_NE(LoadError({{"json", {{"no-slash", 1}}}}).find("JSON pointer"), std::string::npos);
  EXPECT_NE(LoadError({{"json", {{"/a", {{"least", 1}}}}}}).find("min"), std::string::npos);
  EXPECT_NE(LoadError({{"stdout_contians", "x"}}).find("unknown key 'stdout_contians'"),
            std::string::npos);
  EXPECT_NE(LoadError({{"then", {{"exit", 0}}}}).find("command"), std::string::npos);
  EXPECT_NE(LoadError({{"any_of", {{{"status", "ok"}}}}}).find("at least two"), std::string::npos);
  EXPECT_NE(LoadError({{"any_of", {{{"then", {{"command", "x"}}}}, {{"status", "ok"}}}}})
                .find("unknown key 'then'"),
            std::string::npos);
  EXPECT_NE(LoadError({{"host_absent", {{"process", "short"}}}}).find("8 characters"),
            std::string::npos);
  // Keys that need a sandbox of the task's own, or a revert.
  EXPECT_NE(LoadError({{"may_refuse", true}}).find("sandbox of its own"), std::string::npos);
  EXPECT_EQ(LoadError({{"may_refuse", true}}, {{"sandbox", json::object()}}), "");
  EXPECT_NE(LoadError({{"must_refuse", true}}).find("sandbox of its own"), std::string::npos);
  EXPECT_NE(LoadError({{"beacon", {{"path", "/beat-0123456789"}}}}).find("sandbox of its own"),
            std::string::npos);
  EXPECT_EQ(LoadError({{"beacon", {{"path", "/beat-0123456789"}}}}, {{"sandbox", json::object()}}),
            "");
  EXPECT_NE(LoadError({{"beacon", {{"path", "beat"}}}}, {{"sandbox", json::object()}})
                .find("9 characters"),
            std::string::npos);
  EXPECT_NE(LoadError({{"beacon", {{"path", "/beat-0123456789"}, {"wait_s", 0.1}}}},
                      {{"sandbox", json::object()}})
                .find("0.5..30"),
            std::string::npos);
  EXPECT_NE(LoadError({{"host_absent", {{"process", "sleep 1234567"}, {"after", "destroy"}}}})
                .find("'destroy' needs"),
            std::string::npos);
  EXPECT_NE(
      LoadError({{"then", {{"command", "echo ok"}, {"after_revert", true}}}}, {{"revert", false}})
          .find("does not revert"),
      std::string::npos);
}

TEST(ExpectParams, TaskSandboxInheritsAndOverrides) {
  std::string text = R"({"format":1,"name":"x",
    "sandbox":{"limits":{"pids":10},"services":{"m.example":"mirror"},"env":{"A":"1"}},
    "tasks":[{"id":"t","command":"true","sandbox":{"limits":{"fds":5},"trust":"untrusted",
              "secrets":{"S":"v"}}}]})";
  auto s = LoadScenario(text, "test", {}, nullptr);
  ASSERT_TRUE(s.ok()) << s.status().message();
  const SandboxTemplate& sb = *s->tasks[0].sandbox;
  EXPECT_EQ(sb.limits, json({{"fds", 5}}));          // replaced as a whole
  EXPECT_EQ(sb.services.at("m.example"), "mirror");  // inherited
  EXPECT_EQ(sb.env.at("A"), "1");
  EXPECT_EQ(sb.trust, "untrusted");
  EXPECT_EQ(sb.secrets.at("S"), "v");
  auto bad = LoadScenario(R"({"format":1,"name":"x","sandbox":{},
    "tasks":[{"id":"t","command":"true","sandbox":{"trust":"maybe"}}]})",
                          "test", {}, nullptr);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("trust"), std::string::npos);
}

TEST(ExpectParams, HarnessValuesAreLeftForTheRunAndRecorded) {
  auto s = Load({{"output_not_contains", "{{harness.canary_content}}"}}, json::object(),
                "cat {{harness.canary_tmp}}");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->tasks[0].command, "cat {{harness.canary_tmp}}");
  EXPECT_EQ(s->tasks[0].harness_values, (std::set<std::string>{"canary_content", "canary_tmp"}));
  EXPECT_NE(LoadError(json::object(), json::object(), "cat {{harness.nope}}")
                .find("unknown harness value 'harness.nope'"),
            std::string::npos);
  json j = {{"a {{harness.token}}", "{{harness.token}}-{{harness.missing}}"}};
  SubstituteHarness(j, {{"token", "T"}});
  EXPECT_EQ(j, json({{"a T", "T-{{harness.missing}}"}}));
}

// Judges fabricated evidence of the one task.
class ExpectJudge : public ::testing::Test {
 protected:
  std::pair<std::string, std::string> Judge(const json& params, ExecAnswer a,
                                            const std::function<void(TaskRecord&)>& more = {}) {
    auto s = Load(params, !task_extra_.is_null() ? task_extra_
                          : params.contains("may_refuse") || params.contains("must_refuse") ||
                                  params.contains("beacon")
                              ? json{{"sandbox", json::object()}}
                              : json::object());
    EXPECT_TRUE(s.ok()) << s.status().message();
    scenario_ = std::move(*s);
    ScenarioRun run;
    run.scenario = &scenario_;
    run.harness = harness_;
    TaskRecord r;
    r.spec = &scenario_.tasks[0];
    r.ran = true;
    r.task.emplace();
    r.task->is_exec = true;
    r.task->phase = "task";
    r.task->wall_seconds = 0.5;
    r.task->answer = std::move(a);
    if (more) more(r);
    run.tasks.push_back(std::move(r));
    JudgeScenario(run, info_);
    evidence_ = run.checks[0].evidence;
    return {OutcomeName(run.checks[0].raw), run.checks[0].reason};
  }

  static ExecAnswer Out(const std::string& out, const std::string& err = "", int exit = 0,
                        const std::string& status = "ok") {
    ExecAnswer a;
    a.status = status;
    a.exit_code = exit;
    a.stdout_text = out;
    a.stderr_text = err;
    return a;
  }

  Scenario scenario_;
  TargetInfo info_;
  json evidence_;
  json task_extra_;  // more keys of the task (null: none)
  std::map<std::string, std::string> harness_ = {{"token", "T0K"}};
};

TEST_F(ExpectJudge, EveryConditionCanPassAndFail) {
  struct Case {
    json params;
    ExecAnswer good, bad;
  };
  std::vector<Case> cases = {
      {{{"status", "timeout"}}, Out("", "", 137, "timeout"), Out("")},
      {{{"status", {"ok", "tool_error"}}}, Out("", "", 1, "tool_error"), Out("", "", 0, "timeout")},
      {{{"state", "CRASHED"}},
       [] {
         auto a = Out("");
         a.state = "CRASHED";
         return a;
       }(),
       Out("")},
      {{{"exit", 139}}, Out("", "", 139), Out("", "", 0)},
      {{{"exit_nonzero", true}}, Out("", "", 127), Out("", "", 0)},
      {{{"stdout_contains", {"a", "b"}}}, Out("a b"), Out("a")},
      {{{"stdout_not_contains", "secret"}}, Out("public"), Out("a secret")},
      {{{"stderr_contains", "oops"}}, Out("", "oops"), Out("oops", "")},
      {{{"output_not_contains", "{{harness.token}}"}}, Out("x", "y"), Out("x", "T0K")},
      {{{"stdout_equals", "ok"}}, Out("ok\n"), Out("ok ok\n")},
      {{{"stdout_matches", "^0\\n"}}, Out("0\nx"), Out("10\n")},
      {{{"stdout_not_matches", "(^|\\n)/"}}, Out("A=/x\n"), Out("A=1\n/run/s\n")},
      {{{"output_matches", "not found"}}, Out("", "sh: x: not found"), Out("", "other")},
      {{{"output_not_matches", "T0K|secret"}}, Out("fine"), Out("", "secret")},
      {{{"json", {{"/n", 3}, {"/w/~1usr", false}}}},
       Out("noise\n{\"n\":3,\"w\":{\"/usr\":false}}\n"),
       Out("{\"n\":3,\"w\":{\"/usr\":true}}\n")},
      {{{"json", {{"/n", {{"min", 1}, {"max", 10}}}}}}, Out("{\"n\":10}"), Out("{\"n\":11}")},
      {{{"json", {{"/n", 1}}}}, Out("{\"n\":1.0}"), Out("no json here {\"n\":1}")},
      {{{"max_seconds", 1.0}}, Out(""), Out("")},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    auto& c = cases[i];
    EXPECT_EQ(Judge(c.params, c.good).first, "pass") << i << " " << c.params.dump();
    auto slow = [&](TaskRecord& r) {
      if (c.params.contains("max_seconds")) r.task->wall_seconds = 1.5;
    };
    auto bad = Judge(c.params, c.bad, slow);
    EXPECT_EQ(bad.first, "fail") << i << " " << c.params.dump();
    EXPECT_FALSE(bad.second.empty());
  }
}

TEST_F(ExpectJudge, AnyOfPassesWhenOneAlternativeHolds) {
  json p = {{"any_of",
             {{{"status", "resource_exceeded"}},
              {{"status", "ok"}, {"json", {{"/peak_procs", {{"max", 128}}}}}}}}};
  EXPECT_EQ(Judge(p, Out("", "", -1, "resource_exceeded")).first, "pass");
  EXPECT_EQ(Judge(p, Out("{\"peak_procs\":128}")).first, "pass");
  auto r = Judge(p, Out("{\"peak_procs\":400}"));
  EXPECT_EQ(r.first, "fail");
  EXPECT_NE(r.second.find("none of the alternatives"), std::string::npos);
  EXPECT_NE(r.second.find("/peak_procs is 400"), std::string::npos);
}

// RES-4, issue 32: the figure is the command's own count; the target's usage report may only
// make the verdict stricter (max(reported, measured) against the upper bound), never pass one
// the command's count fails.
TEST_F(ExpectJudge, FigureIsTheCommandsCountAndTheReportOnlyMakesItStricter) {
  json p = {{"figure", {{"usage", "pids_peak"}, {"json", "/peak_procs"}, {"max", 128}}}};
  // A limit twice too loose whose report was rewritten to look in range: the bomb's own count
  // decides.
  ExecAnswer low_report = Out("{\"peak_procs\":250}");
  low_report.extra["usage"] = {{"pids_peak", 120}};
  auto lr = Judge(p, low_report);
  EXPECT_EQ(lr.first, "fail") << lr.second;
  EXPECT_NE(lr.second.find("250"), std::string::npos) << lr.second;
  // The report above the limit fails a count that looks fine (stricter: the larger one).
  ExecAnswer over = Out("{\"peak_procs\":100}");
  over.extra["usage"] = {{"pids_peak", 256}};
  auto ov = Judge(p, over);
  EXPECT_EQ(ov.first, "fail");
  EXPECT_NE(ov.second.find("usage.pids_peak of 256 is the larger"), std::string::npos) << ov.second;
  // A faithful runtime that reports correct figures passes ...
  ExecAnswer both = Out("{\"peak_procs\":124}");
  both.extra["usage"] = {{"pids_peak", 128}};
  auto b = Judge(p, both);
  EXPECT_EQ(b.first, "pass") << b.second;
  EXPECT_NE(b.second.find("the target's usage.pids_peak: 128"), std::string::npos) << b.second;
  // ... and so does one that reports nothing (absent, or -1: not measured): the count decides.
  EXPECT_EQ(Judge(p, Out("{\"peak_procs\":128}")).first, "pass");
  ExecAnswer unknown = Out("{\"peak_procs\":120}");
  unknown.extra["usage"] = {{"pids_peak", -1}};
  EXPECT_EQ(Judge(p, unknown).first, "pass");
  unknown.extra["usage"] = {{"pids_peak", -1}};
  EXPECT_EQ(Judge(p, Out("{\"peak_procs\":400}")).first, "fail");
  // No count from the command: the report alone cannot pass it.
  ExecAnswer only_report = Out("no json");
  only_report.extra["usage"] = {{"pids_peak", 64}};
  auto none = Judge(p, only_report);
  EXPECT_EQ(none.first, "fail");
  EXPECT_NE(none.second.find("no pids_peak to judge"), std::string::npos)
      << none.second;
  EXPECT_NE(none.second.find("alone cannot pass it"), std::string::npos) << none.second;
  // The lower bound is the command's count's: a high report does not lift a count that
  // stayed low (a limit half the one asked for).
  json q = {{"figure", {{"usage", "pids_peak"}, {"json", "/peak_procs"}, {"min", 96}, {"max", 128}}}};
  ExecAnswer halved = Out("{\"peak_procs\":60}");
  halved.extra["usage"] = {{"pids_peak", 120}};
  auto h = Judge(q, halved);
  EXPECT_EQ(h.first, "fail") << h.second;
  EXPECT_NE(h.second.find("expected >= 96"), std::string::npos) << h.second;
  // A figure that names no command count is judged on the report.
  json r = {{"figure", {{"usage", "pids_peak"}, {"max", 128}}}};
  ExecAnswer rep = Out("");
  rep.extra["usage"] = {{"pids_peak", 100}};
  EXPECT_EQ(Judge(r, rep).first, "pass");
  auto nothing = Judge(r, Out(""));
  EXPECT_EQ(nothing.first, "fail");
  EXPECT_NE(nothing.second.find("reports no usage.pids_peak"), std::string::npos);
  EXPECT_NE(LoadError({{"figure", {{"usage", "pids_peak"}}}}).find("min and/or max"),
            std::string::npos);
  EXPECT_NE(LoadError({{"figure", {{"max", 1}}}}).find("usage, json and/or last_match"),
            std::string::npos);
}

// RES-4, issue 32: a sandbox ended as resource_exceeded counts as "the pids limit bit" only
// with the bomb's own evidence (the limits scenario's fork-bomb check, as written there).
TEST_F(ExpectJudge, ForkBombEndedNeedsPidsEvidence) {
  json p = {{"any_of",
             {{{"status", "resource_exceeded"},
               {"figure",
                {{"usage", "pids_peak"},
                 {"last_match", "first fork refused at peak (\\d+)"},
                 {"min", 64},
                 {"max", 128}}}},
              {{"status", "ok"},
               {"json", {{"/fork_failures", {{"min", 1}}}}},
               {"figure",
                {{"usage", "pids_peak"}, {"json", "/peak_procs"}, {"min", 96}, {"max", 128}}}}}}};
  // Ended for another reason, with nothing to show: fail.
  auto ended = Judge(p, Out("", "", -1, "resource_exceeded"));
  EXPECT_EQ(ended.first, "fail") << ended.second;
  // Ended right after the limit bit: the bomb's line says so.
  auto bit = Judge(p, Out("sbx-forkbomb: first fork refused at peak 117\n", "", -1,
                          "resource_exceeded"));
  EXPECT_EQ(bit.first, "pass") << bit.second;
  // Ended after a refusal far below the limit (a lower limit, or another cause).
  EXPECT_EQ(Judge(p, Out("sbx-forkbomb: first fork refused at peak 20\n", "", -1,
                         "resource_exceeded"))
                .first,
            "fail");
  // Held: refused forks and a peak near the limit.
  EXPECT_EQ(Judge(p, Out("sbx-forkbomb: first fork refused at peak 120\n"
                         "{\"peak_procs\":125,\"fork_failures\":900}\n"))
                .first,
            "pass");
}

TEST_F(ExpectJudge, FigureFromTheLastProgressLine) {
  // A quota must bite at the size asked for: the writer's last progress line says how far it
  // got before it was stopped (a quota twice too large lets it get twice as far).
  json p = {{"figure", {{"last_match", "progress (\\d+) MiB"}, {"min", 16}, {"max", 34}}}};
  auto at = Judge(p, Out("progress 1 MiB\nprogress 2 MiB\nprogress 31 MiB\n"));
  EXPECT_EQ(at.first, "pass") << at.second;
  EXPECT_NE(at.second.find("31"), std::string::npos);
  auto doubled = Judge(p, Out("progress 1 MiB\nprogress 63 MiB\n"));
  EXPECT_EQ(doubled.first, "fail");
  EXPECT_NE(doubled.second.find("63"), std::string::npos);
  EXPECT_EQ(Judge(p, Out("progress 8 MiB\n")).first, "fail");  // a quota half the size
  auto none = Judge(p, Out("wrote 0 MiB\n"));
  EXPECT_EQ(none.first, "fail");
  EXPECT_NE(none.second.find("line matching"), std::string::npos);
  // The target's usage report cannot pass what the progress line fails (issue 32).
  json q = {{"figure",
             {{"usage", "disk_peak_bytes"}, {"last_match", "progress (\\d+) MiB"}, {"max", 34}}}};
  ExecAnswer reported = Out("progress 60 MiB\n");
  reported.extra["usage"] = {{"disk_peak_bytes", 30}};
  EXPECT_EQ(Judge(q, reported).first, "fail");
  EXPECT_NE(LoadError({{"figure", {{"last_match", "progress \\d+"}, {"max", 1}}}})
                .find("exactly one group"),
            std::string::npos);
  EXPECT_NE(LoadError({{"figure", {{"last_match", "(x"}, {"max", 1}}}}).find("not a valid regex"),
            std::string::npos);
  EXPECT_NE(LoadError({{"figure", {{"json", "/a"}, {"last_match", "(\\d+)"}, {"max", 1}}}})
                .find("not both"),
            std::string::npos);
}

TEST_F(ExpectJudge, ThenIsJudgedAndMustHaveRun) {
  json p = {{"then", {{"command", "ps"}, {"stdout_not_contains", "sleep 1"}}}};
  auto with_then = [](const std::string& out) {
    return [out](TaskRecord& r) {
      r.then.emplace();
      r.then->command = "ps";
      r.then->is_exec = true;
      r.then->answer = Out(out);
    };
  };
  EXPECT_EQ(Judge(p, Out(""), with_then("PID COMMAND\n")).first, "pass");
  EXPECT_EQ(evidence_["then"]["command"], "ps");
  auto bad = Judge(p, Out(""), with_then("2 sleep 1\n"));
  EXPECT_EQ(bad.first, "fail");
  EXPECT_NE(bad.second.find("next, 'ps'"), std::string::npos);
  EXPECT_EQ(Judge(p, Out("")).first, "fail");  // not run
}

TEST_F(ExpectJudge, HostScansFailWhenSomethingIsLeft) {
  json p = {{"host_absent", {{"process", "sleep 1234567"}}}};
  auto scan = [](json found) {
    return [found](TaskRecord& r) {
      r.host_scans.push_back({{"process", "sleep 1234567"},
                              {"found", found},
                              {"waited_seconds", 2.0},
                              {"after", "task"}});
    };
  };
  EXPECT_EQ(Judge(p, Out(""), scan(json::array())).first, "pass");
  auto bad = Judge(p, Out(""), scan({{{"pid", 42}, {"cmdline", "sleep 1234567"}}}));
  EXPECT_EQ(bad.first, "fail");
  EXPECT_NE(bad.second.find("pid 42"), std::string::npos);
  // A target elsewhere: the scan is not done, and the check says so.
  auto remote = Judge(p, Out(""), [](TaskRecord& r) { r.host_note = "not scanned: elsewhere"; });
  EXPECT_EQ(remote.first, "pass");
  EXPECT_NE(remote.second.find("not scanned"), std::string::npos);
}

TEST_F(ExpectJudge, AScanAfterTheDestroyNeedsTheProcessSeenBeforeIt) {
  // (The judge reads the scans the runner made; the scenario's `after` only tells the runner.)
  json p = {{"host_absent", {{"process", "sleep 1234567"}}}};
  auto scans = [](json before, json after) {
    return [before, after](TaskRecord& r) {
      r.host_scans.push_back({{"process", "sleep 1234567"},
                              {"found", before},
                              {"waited_seconds", 0.0},
                              {"after", "before-destroy"}});
      r.host_scans.push_back({{"process", "sleep 1234567"},
                              {"found", after},
                              {"waited_seconds", 2.0},
                              {"after", "destroy"}});
    };
  };
  const json seen = {{{"pid", 42}, {"cmdline", "sleep 1234567"}}};
  auto ok = Judge(p, Out(""), scans(seen, json::array()));
  EXPECT_EQ(ok.first, "pass") << ok.second;
  EXPECT_NE(ok.second.find("seen on this host before the destroy (pid 42)"), std::string::npos);
  EXPECT_EQ(Judge(p, Out(""), scans(seen, seen)).first, "fail");
  // Never seen on the host (a guest's, gVisor's processes): its absence after is no evidence.
  auto blind = Judge(p, Out(""), scans(json::array(), json::array()));
  EXPECT_EQ(blind.first, "skip");
  EXPECT_NE(blind.second.find("cannot judge"), std::string::npos) << blind.second;
}

TEST_F(ExpectJudge, ABeaconMustBeHeardWhileTheSandboxLivesAndNotAfterItsDestroy) {
  json p = {{"beacon", {{"path", "/beat-0123456789"}, {"wait_s", 1.5}}}};
  auto beacon = [](json b) { return [b](TaskRecord& r) { r.beacon = b; }; };
  auto counted = [&](int before, int after) {
    return beacon(
        {{"path", "/beat-0123456789"}, {"before", before}, {"after", after}, {"wait_s", 1.5}});
  };
  auto ok = Judge(p, Out(""), counted(3, 0));
  EXPECT_EQ(ok.first, "pass") << ok.second;
  EXPECT_NE(ok.second.find("3 times while the sandbox lived and 0"), std::string::npos);
  EXPECT_EQ(Judge(p, Out(""), counted(3, 1)).first, "pass");  // one in flight at the destroy
  auto survivor = Judge(p, Out(""), counted(3, 7));
  EXPECT_EQ(survivor.first, "fail");
  EXPECT_NE(survivor.second.find("7 beats of the beacon"), std::string::npos) << survivor.second;
  // Never heard while the sandbox lived: silence afterwards proves nothing.
  auto deaf = Judge(p, Out(""), counted(1, 0));
  EXPECT_EQ(deaf.first, "skip");
  EXPECT_NE(deaf.second.find("cannot judge"), std::string::npos) << deaf.second;
  // No mirror of the harness's own: a skip saying so; never counted: a failure, not a pass.
  auto none = Judge(p, Out(""), beacon({{"note", "the harness has no mirror of its own"}}));
  EXPECT_EQ(none.first, "skip");
  EXPECT_NE(none.second.find("no mirror"), std::string::npos);
  EXPECT_EQ(Judge(p, Out("")).first, "fail");
  EXPECT_EQ(Judge(p, Out(""), beacon({{"path", "/beat-0123456789"}, {"before", 4}})).first, "fail");
}

TEST_F(ExpectJudge, MustRefusePassesOnlyARefusal) {
  json p = {{"must_refuse", true}};
  auto asked = [](TaskRecord& r) { r.own_request = {{"backend", "kubernetes"}}; };
  // It ran: whatever it printed, a request no worker can provision must not run.
  auto ran = Judge(p, Out("probed\n"), asked);
  EXPECT_EQ(ran.first, "fail");
  EXPECT_NE(ran.second.find("does not offer backend 'kubernetes'"), std::string::npos)
      << ran.second;
  // Refused at its first command, nothing run.
  ExecAnswer gone = Out("");
  gone.status = "sandbox_unavailable";
  EXPECT_EQ(Judge(p, gone, asked).first, "pass");
  // Refused at create: only as sandbox_unavailable.
  auto refused = [](std::string why) {
    return [why](TaskRecord& r) {
      r.own_request = {{"backend", "kubernetes"}};
      r.create_refused = why;
    };
  };
  EXPECT_EQ(Judge(p, Out(""), refused("sandbox_unavailable: no worker has kubernetes")).first,
            "pass");
  EXPECT_EQ(Judge(p, Out(""), refused("internal: the adapter crashed")).first, "fail");
}

TEST_F(ExpectJudge, BackendIsJudgedWhenReportedAndSkippedOtherwise) {
  json p = {{"backend_in", {"gvisor", "microvm"}}};
  ExecAnswer on_gvisor = Out(""), on_native = Out("");
  on_gvisor.extra["backend"] = "gvisor";
  on_native.extra["backend"] = "native";
  EXPECT_EQ(Judge(p, on_gvisor).first, "pass");
  EXPECT_EQ(Judge(p, on_native).first, "fail");
  auto unknown = Judge(p, Out(""));
  EXPECT_EQ(unknown.first, "skip");
  EXPECT_NE(unknown.second.find("does not report which backend"), std::string::npos);
  // Other failures are still failures, reported backend or not.
  EXPECT_EQ(Judge(p, Out("", "", 1)).first, "skip");  // exit is not checked by default
  EXPECT_EQ(Judge({{"backend_in", {"gvisor"}}, {"exit", 0}}, Out("", "", 1)).first, "fail");
}

// What sbx-probe prints, with the kernel and namespace facts given.
std::string Probe(const json& kernel_id, const json& namespaces) {
  return json{{"uid", 1000}, {"kernel_id", kernel_id}, {"namespaces", namespaces}}.dump() + "\n";
}

TEST_F(ExpectJudge, KernelIsJudgedFromTheSandboxsEvidenceNotTheAnswer) {
  const json host = {{"boot_id", "aaaa"}, {"btime", 1000}, {"version", "Linux version 6.18"}};
  const json ns = {{"pid", 1}, {"mnt", 2}, {"net", 3}, {"ipc", 4}, {"uts", 5}};
  harness_["host_kernel"] = host.dump();
  harness_["host_namespaces"] = ns.dump();
  const json gvisor = {{"boot_id", nullptr}, {"btime", 5000}, {"version", "Linux version 4.4.0"}};
  json own = {{"kernel", "own"}, {"backend_in", {"gvisor", "microvm"}}};
  // A plain container that says "gvisor" fails; gVisor's own kernel passes, said or not.
  ExecAnswer impostor = Out(Probe(host, ns));
  impostor.extra["backend"] = "gvisor";
  auto r = Judge(own, impostor);
  EXPECT_EQ(r.first, "fail");
  EXPECT_NE(r.second.find("host's own kernel, not a kernel of its own: its boot_id aaaa is the host's"), std::string::npos)
      << r.second;
  ExecAnswer real = Out(Probe(gvisor, json::object()));
  real.extra["backend"] = "gvisor";
  EXPECT_EQ(Judge(own, real).first, "pass");
  auto unsaid = Judge(own, Out(Probe(gvisor, json::object())));
  EXPECT_EQ(unsaid.first, "pass") << unsaid.second;  // evidence judges where the answer is silent
  // The answer can only make it stricter: another kernel named "native" is still a failure.
  ExecAnswer says_native = Out(Probe(gvisor, json::object()));
  says_native.extra["backend"] = "native";
  EXPECT_EQ(Judge(own, says_native).first, "fail");
  // No evidence is never a pass.
  auto none = Judge(own, Out("no probe here\n"));
  EXPECT_EQ(none.first, "fail");
  EXPECT_NE(none.second.find("no evidence of the sandbox's kernel"), std::string::npos);
  EXPECT_EQ(Judge({{"kernel", "own"}}, Out(Probe(json::object(), ns))).first, "fail");
  // "host": the first-party case.
  EXPECT_EQ(Judge({{"kernel", "host"}}, Out(Probe(host, ns))).first, "pass");
  EXPECT_EQ(Judge({{"kernel", "host"}}, Out(Probe(gvisor, ns))).first, "fail");
}

TEST_F(ExpectJudge, NamespacesApartComparesInodesOnTheHostsKernel) {
  const json host = {{"boot_id", "aaaa"}, {"btime", 1000}, {"version", "Linux version 6.18"}};
  harness_["host_kernel"] = host.dump();
  harness_["host_namespaces"] = json{{"pid", 1}, {"mnt", 2}, {"net", 3}}.dump();
  json p = {{"namespaces_apart", {"pid", "mnt", "net"}}};
  EXPECT_EQ(Judge(p, Out(Probe(host, {{"pid", 11}, {"mnt", 12}, {"net", 13}}))).first, "pass");
  auto shared = Judge(p, Out(Probe(host, {{"pid", 1}, {"mnt", 12}, {"net", 13}})));
  EXPECT_EQ(shared.first, "fail");
  EXPECT_NE(shared.second.find("shares the harness's pid namespace"), std::string::npos)
      << shared.second;
  auto hidden = Judge(p, Out(Probe(host, {{"pid", nullptr}, {"mnt", 12}, {"net", 13}})));
  EXPECT_EQ(hidden.first, "fail");
  EXPECT_NE(hidden.second.find("cannot judge"), std::string::npos) << hidden.second;
  // On a kernel of its own, the inodes are that kernel's: they cannot be the harness's.
  const json guest = {{"boot_id", "bbbb"}, {"btime", 7000}, {"version", "Linux version 6.1"}};
  EXPECT_EQ(Judge(p, Out(Probe(guest, {{"pid", 1}, {"mnt", 2}, {"net", 3}}))).first, "pass");
}

// EGR-1, issue 32: egress is judged by what the harness's sink and mirror recorded, never by
// what the probe printed; the probe's report only proves every way out was tried.
TEST_F(ExpectJudge, EgressIsJudgedByTheSinkAndTheMirrorNotByTheOutput) {
  harness_["sink_connect"] = "--connect tcp:127.0.0.1:5 --connect udp:[::1]:6";
  json p = {{"sink_untouched", true}};
  const std::string tried =
      R"({"connect":{"tcp:127.0.0.1:5":"ECONNREFUSED","udp:[::1]:6":"EADDRNOTAVAIL"}})";
  auto quiet = [](TaskRecord& r) { r.sink_log = std::vector<std::string>{}; };
  auto held = Judge(p, Out(tried), quiet);
  EXPECT_EQ(held.first, "pass") << held.second;
  EXPECT_NE(held.second.find("none of 2 attempts"), std::string::npos) << held.second;
  // The sink heard it: a fail whatever the probe says (it printed "refused" for everything).
  auto reached = Judge(p, Out(tried), [](TaskRecord& r) {
    r.sink_log = std::vector<std::string>{"tcp 127.0.0.1:5 from 127.0.0.1:4242"};
  });
  EXPECT_EQ(reached.first, "fail");
  EXPECT_NE(reached.second.find("recorded 'tcp 127.0.0.1:5 from 127.0.0.1:4242'"),
            std::string::npos)
      << reached.second;
  // No report of the attempts (the probe did not run, or a target left one out): not a pass.
  auto untried = Judge(p, Out(R"({"connect":{"tcp:127.0.0.1:5":"ECONNREFUSED"}})"), quiet);
  EXPECT_EQ(untried.first, "fail");
  EXPECT_NE(untried.second.find("no attempt at udp:[::1]:6"), std::string::npos) << untried.second;
  EXPECT_EQ(Judge(p, Out("probed\n"), quiet).first, "fail");
  // No sink in the run: cannot judge, never a pass.
  auto no_sink = Judge(p, Out(tried));
  EXPECT_EQ(no_sink.first, "fail");
  EXPECT_NE(no_sink.second.find("cannot judge"), std::string::npos) << no_sink.second;

  // The mirror: nothing at all, or nothing for the names given.
  json untouched = {{"mirror_untouched", true}};
  auto logged = [](std::vector<std::string> lines) {
    return [lines](TaskRecord& r) { r.mirror_log = lines; };
  };
  EXPECT_EQ(Judge(untouched, Out(""), logged({})).first, "pass");
  auto got = Judge(untouched, Out(""), logged({"GET /x host=a.example:8080"}));
  EXPECT_EQ(got.first, "fail");
  EXPECT_NE(got.second.find("mirror logged 'GET /x host=a.example:8080'"), std::string::npos);
  json not_for = {{"mirror_not_for", {"A.example"}}};
  EXPECT_EQ(Judge(not_for, Out(""), logged({"GET /x host=b.example"})).first, "pass");
  EXPECT_EQ(Judge(not_for, Out(""), logged({"GET /x host=a.EXAMPLE:80"})).first, "fail");
  // No local mirror: judged by the output alone (the evidence says so).
  EXPECT_EQ(Judge(untouched, Out("")).first, "pass");
  EXPECT_NE(evidence_["mirror_log"].get<std::string>().find("no local mirror"), std::string::npos);
}

// Issue 32, limits per sandbox: a task with a neighbour is judged only if the neighbour really
// held its load; a neighbour that failed is "cannot judge", never a pass.
TEST_F(ExpectJudge, ANeighbourMustHoldItsLoad) {
  task_extra_ = {{"sandbox", json::object()},
                 {"neighbour", {{"command", "sbx-memhog --hold 200"},
                                {"stdout_contains", "holding 200 MiB"}}}};
  json p = {{"stdout_contains", "done 160 MiB"}};
  auto neighbour = [](std::string out, std::string status = "ok") {
    return [out, status](TaskRecord& r) {
      r.neighbour.emplace();
      r.neighbour->phase = "neighbour";
      r.neighbour->answer.status = status;
      r.neighbour->answer.exit_code = 0;
      r.neighbour->answer.stdout_text = out;
    };
  };
  auto held = Judge(p, Out("done 160 MiB"), neighbour("holding 200 MiB pid 4"));
  EXPECT_EQ(held.first, "pass") << held.second;
  EXPECT_NE(held.second.find("beside a neighbour sandbox that held its load"), std::string::npos);
  auto weak = Judge(p, Out("done 160 MiB"), neighbour("sbx-memhog: the holder died"));
  EXPECT_EQ(weak.first, "fail");
  EXPECT_NE(weak.second.find("cannot judge"), std::string::npos) << weak.second;
  EXPECT_EQ(Judge(p, Out("done 160 MiB"), neighbour("holding 200 MiB", "timeout")).first, "fail");
  EXPECT_EQ(Judge(p, Out("done 160 MiB")).first, "fail");  // never ran
  // The task's own condition still decides when the neighbour held.
  EXPECT_EQ(Judge(p, Out("allocated 48 MiB"), neighbour("holding 200 MiB")).first, "fail");
}

TEST(ExpectParams, ANeighbourNeedsASandboxOfTheTasksOwn) {
  json nb = {{"command", "sbx-memhog --hold 200"}};
  auto ok = Load(json::object(), {{"sandbox", json::object()}, {"neighbour", nb}});
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  ASSERT_TRUE(ok->tasks[0].neighbour.has_value());
  EXPECT_EQ(ok->tasks[0].neighbour->command, "sbx-memhog --hold 200");
  EXPECT_EQ(ok->tasks[0].neighbour->timeout_s, 20);
  EXPECT_NE(LoadError(json::object(), {{"neighbour", nb}}).find("only for a task with a sandbox"),
            std::string::npos);
  EXPECT_NE(LoadError(json::object(), {{"sandbox", json::object()}, {"neighbour", {{"cmd", "x"}}}})
                .find("neighbour"),
            std::string::npos);
}

TEST(ExpectParams, SinkUntouchedNeedsTheSinksValues) {
  auto s = Load({{"sink_untouched", true}});
  ASSERT_TRUE(s.ok()) << s.status().message();
  // A run without a sink (a target elsewhere) does not run the task, and says why.
  EXPECT_EQ(s->tasks[0].harness_values, (std::set<std::string>{"sink_connect"}));
  EXPECT_NE(LoadError({{"mirror_not_for", 3}}).find("mirror_not_for"), std::string::npos);
}

TEST(ExpectParams, KernelAndNamespacesNeedTheHostsValues) {
  auto s = Load({{"kernel", "own"}, {"namespaces_apart", {"pid"}}});
  ASSERT_TRUE(s.ok()) << s.status().message();
  // The reader writes in the local-only harness values, so a target elsewhere skips the task.
  EXPECT_EQ(s->tasks[0].harness_values, (std::set<std::string>{"host_kernel", "host_namespaces"}));
  EXPECT_NE(LoadError({{"kernel", "guest"}}).find("'own' or 'host'"), std::string::npos);
  EXPECT_NE(LoadError({{"namespaces_apart", {"pidd"}}}).find("namespaces_apart"), std::string::npos);
}

TEST_F(ExpectJudge, ARefusalPassesOnlyWhereAllowed) {
  json p = {{"may_refuse", true}, {"backend_in", {"gvisor"}}};
  auto refused = Judge(p, Out(""), [](TaskRecord& r) {
    r.task.reset();
    r.create_refused = "sandbox_unavailable: untrusted code needs gvisor or microvm";
  });
  EXPECT_EQ(refused.first, "pass");
  EXPECT_NE(refused.second.find("refused"), std::string::npos);
  // Any other failure of the create is not SEL-5's refusal.
  auto failed = Judge(p, Out(""), [](TaskRecord& r) {
    r.task.reset();
    r.create_refused = "internal: HTTP 403: create.tenant: not the authenticated tenant";
  });
  EXPECT_EQ(failed.first, "fail");
  EXPECT_NE(failed.second.find("not as sandbox_unavailable"), std::string::npos) << failed.second;
}

TEST_F(ExpectJudge, AMissingEmptySurvivorsListNamesTheSurvivors) {
  json p = {{"stdout_contains", {"\"survivors\":[]"}}};
  auto r = Judge(p, Out("{\"survivors\":[\"tmp-file\",\"process\"],\"checked\":[]}\n"));
  EXPECT_EQ(r.first, "fail");
  EXPECT_NE(r.second.find("(survivors: tmp-file, process)"), std::string::npos) << r.second;
  EXPECT_EQ(Judge(p, Out("{\"survivors\":[],\"checked\":[]}\n")).first, "pass");
}

TEST_F(ExpectJudge, AnswerHasLooksIntoExtraKeys) {
  json p = {{"answer_has", {"stages.execute", "stages.cleanup"}}};
  ExecAnswer a = Out("");
  a.extra["stages"] = {{"execute", 0.1}, {"cleanup", 0.0}};
  EXPECT_EQ(Judge(p, a).first, "pass");
  // -1 is "not measured": the key is there, the figure is not (a check that passed on it could
  // not fail for any target that always writes every key).
  a.extra["stages"]["cleanup"] = -1;
  auto unmeasured = Judge(p, a);
  EXPECT_EQ(unmeasured.first, "fail");
  EXPECT_NE(unmeasured.second.find("'stages.cleanup' as -1 (not measured)"), std::string::npos)
      << unmeasured.second;
  a.extra["stages"].erase("cleanup");
  auto bad = Judge(p, a);
  EXPECT_EQ(bad.first, "fail");
  EXPECT_NE(bad.second.find("'stages.cleanup'"), std::string::npos);
  // A stage longer than the whole call (milliseconds sent as seconds) is not a measurement.
  json q = {{"answer_has", {"stages.execute"}}};
  ExecAnswer ms = Out("");
  ms.extra["stages"] = {{"execute", 310.0}};
  auto longer = Judge(q, ms);
  EXPECT_EQ(longer.first, "fail");
  EXPECT_NE(longer.second.find("longer than the whole call"), std::string::npos) << longer.second;
}

TEST_F(ExpectJudge, AnswerMinCatchesMadeUpFigures) {
  json p = {{"answer_min", {{"stages.execute", 0.25}}}};
  ExecAnswer a = Out("");
  a.extra["stages"] = {{"execute", 0.31}};
  auto ok = Judge(p, a);
  EXPECT_EQ(ok.first, "pass") << ok.second;
  a.extra["stages"]["execute"] = 0.0;  // a runtime that reports zeros for a command that slept
  auto zero = Judge(p, a);
  EXPECT_EQ(zero.first, "fail");
  EXPECT_NE(zero.second.find("'stages.execute' is 0, less than 0.25"), std::string::npos)
      << zero.second;
  a.extra.erase("stages");
  EXPECT_NE(Judge(p, a).second.find("no number at 'stages.execute'"), std::string::npos);
  EXPECT_NE(LoadError({{"answer_min", {{"stages.execute", "fast"}}}}).find("expected a number"),
            std::string::npos);
}

// LC-1, issue 32: the stages are parts of the call: together they take no longer than the whole
// call by the harness's clock (StageBudget: + 5 % + 20 ms), and none alone does either.
TEST_F(ExpectJudge, StagesSumToNoMoreThanTheCall) {
  json p = {{"answer_has", {"stages.inject_context", "stages.execute", "stages.collect"}}};
  // The call took 0.5 s by the harness's clock (the fixture's wall time).
  ExecAnswer a = Out("");
  a.extra["stages"] = {{"inject_context", 0.001}, {"execute", 0.31}, {"collect", 0.002}};
  auto ok = Judge(p, a);
  EXPECT_EQ(ok.first, "pass") << ok.second;
  EXPECT_NE(ok.second.find("add up to 0.313 s"), std::string::npos) << ok.second;
  // Each stage 0.1 s longer than it took: none alone is longer than the call, the sum is.
  ExecAnswer padded = Out("");
  padded.extra["stages"] = {{"inject_context", 0.101}, {"execute", 0.41}, {"collect", 0.102}};
  auto pd = Judge(p, padded);
  EXPECT_EQ(pd.first, "fail") << pd.second;
  EXPECT_NE(pd.second.find("add up to 0.613 s, more than the whole call took"), std::string::npos)
      << pd.second;
  // Stages timed from the start of the call (timestamps, not durations): the same.
  ExecAnswer cumulative = Out("");
  cumulative.extra["stages"] = {{"inject_context", 0.01}, {"execute", 0.32}, {"collect", 0.33}};
  EXPECT_EQ(Judge(p, cumulative).first, "fail");
  // Exactly the call, within the stated margin for two clocks: pass.
  ExecAnswer whole = Out("");
  whole.extra["stages"] = {{"inject_context", 0.01}, {"execute", 0.5}, {"collect", 0.01}};
  EXPECT_EQ(Judge(p, whole).first, "pass");
  // One stage longer than the call (+ the margin) fails alone.
  ExecAnswer one = Out("");
  one.extra["stages"] = {{"inject_context", 0.0}, {"execute", 0.55}, {"collect", 0.0}};
  auto o = Judge(p, one);
  EXPECT_EQ(o.first, "fail");
  EXPECT_NE(o.second.find("longer than the whole call"), std::string::npos) << o.second;
  EXPECT_DOUBLE_EQ(sandcheck::eval::StageBudget(1.0), 1.07);
}

TEST(HostScan, MatchesWholeWordsOnly) {
  EXPECT_TRUE(CmdlineHolds("sleep 1234567", "sleep 1234567"));
  EXPECT_TRUE(CmdlineHolds("/bin/sleep 1234567", "sleep 1234567"));
  EXPECT_TRUE(CmdlineHolds("sh -c setsid sleep 1234567 & while", "sleep 1234567"));
  EXPECT_FALSE(CmdlineHolds("sleep 12345677", "sleep 1234567"));
  EXPECT_FALSE(CmdlineHolds("nosleep 1234567", "sleep 1234567"));
  EXPECT_FALSE(CmdlineHolds("", "sleep 1234567"));
}

TEST(HostScan, FindsARealProcessAndSeesItGo) {
  std::string secs = std::to_string(3000000 + ::getpid() % 1000);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execlp("sleep", "sleep", secs.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // exec takes a moment: scan until the process shows (up to 30 s, not a number of scans).
  json found = ScanHostProcesses("sleep " + secs, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (found["found"].empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    found = ScanHostProcesses("sleep " + secs, 0);
  }
  ASSERT_EQ(found["found"].size(), 1u) << found.dump();
  EXPECT_EQ(found["found"][0]["pid"], pid);
  ::kill(pid, SIGKILL);
  int st;
  ::waitpid(pid, &st, 0);
  EXPECT_TRUE(ScanHostProcesses("sleep " + secs, 1)["found"].empty());
}

TEST(CoverageNotes, BuiltInNotesParseAndAgreeWithTheChecks) {
  auto notes = BuiltinCoverageNotes();
  ASSERT_TRUE(notes.ok()) << notes.status().message();
  auto scenarios = LoadScenarios(BuiltinScenarioNames(), {});
  ASSERT_TRUE(scenarios.ok()) << scenarios.status().message();
  std::set<std::string> checked;
  for (const auto& s : *scenarios) {
    for (const CheckSpec* c : s.AllChecks())
      checked.insert(c->requirements.begin(), c->requirements.end());
  }
  for (const CoverageNote& n : *notes) {
    // A partial note is about what the checks do not reach; a full note stands in for checks
    // that do not exist. Either way round would misstate the coverage.
    EXPECT_EQ(n.partial, checked.count(n.id) > 0) << n.id;
  }
}

TEST(CoverageNotes, StrictParsing) {
  EXPECT_TRUE(
      ParseCoverageNotes(R"({"notes":{"FS-1":{"how":"a","why_not_black_box":"b"}}})", "t").ok());
  for (const char* bad : {
           R"({"notes":{"XX-1":{"how":"a","why_not_black_box":"b"}}})",
           R"({"notes":{"FS-1":{"how":"","why_not_black_box":"b"}}})",
           R"({"notes":{"FS-1":{"how":"a"}}})",
           R"({"notes":{"FS-1":{"how":"a","why_not_black_box":"b","extra":1}}})",
           R"({"notez":{}})",
       }) {
    EXPECT_FALSE(ParseCoverageNotes(bad, "t").ok()) << bad;
  }
}

// SNAP-3 (issue 32): a suspend is judged by a heartbeat against the harness's clock, never by the
// target's answers to suspend and resume.
TEST(ExpectParams, SuspendedNeedsTheTasksSuspendAFollowUpAndTheFeature) {
  json p = {{"suspended", json::object()}, {"then", {{"command", "cat /work/hb"}}}};
  json task = {{"suspend", {{"hold_s", 3}}}, {"features", {"suspend"}}};
  auto s = Load(p, task);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->tasks[0].suspend->hold_s, 3);
  EXPECT_EQ(s->tasks[0].check->params["suspended"],
            json({{"beats", "/beats"}, {"per_second", "/per_second"}}));
  EXPECT_NE(LoadError(p, {{"features", {"suspend"}}}).find("needs the task's `suspend`"),
            std::string::npos);
  EXPECT_NE(LoadError(p, {{"suspend", {{"hold_s", 3}}}}).find("the feature 'suspend'"),
            std::string::npos);
  EXPECT_NE(LoadError({{"suspended", json::object()}}, task).find("needs the task's"),
            std::string::npos);
  EXPECT_NE(LoadError(p, {{"suspend", {{"hold_s", 0.1}}}, {"features", {"suspend"}}})
                .find("hold_s: 0.5..30"),
            std::string::npos);
  EXPECT_NE(LoadError({{"suspended", {{"beats", "beats"}}}, {"then", {{"command", "x"}}}}, task)
                .find("a JSON pointer"),
            std::string::npos);
}

class SuspendJudge : public ExpectJudge {
 protected:
  // The control printed `control_out` and ended at t=100 s (harness clock); the suspend took
  // 0.05 s from 100.05, the hold ran to `resume_at`, the resume took 0.05 s, and the follow-up
  // started at `then_at` and printed `then_out`.
  std::pair<std::string, std::string> Run(const std::string& control_out,
                                          const std::string& then_out, double resume_at = 103.1,
                                          double then_at = 103.2) {
    task_extra_ = {{"suspend", {{"hold_s", 3}}}, {"features", {"suspend"}}};
    info_.features = {"suspend"};
    json p = {{"suspended", json::object()}, {"then", {{"command", "read the heartbeat"}}}};
    return Judge(p, Out("{\"beats\":5}\n"), [&](TaskRecord& r) {
      r.suspend_control.emplace();
      r.suspend_control->is_exec = true;
      r.suspend_control->started_unix = 99;
      r.suspend_control->wall_seconds = 1;
      r.suspend_control->answer = Out(control_out);
      r.suspend.emplace();
      r.suspend->started_unix = 100.05;
      r.suspend->wall_seconds = 0.05;
      r.resume.emplace();
      r.resume->started_unix = resume_at;
      r.resume->wall_seconds = 0.05;
      r.then.emplace();
      r.then->is_exec = true;
      r.then->started_unix = then_at;
      r.then->answer = Out(then_out);
    });
  }
  // 20 beats in the control's second: its last reading was 40.
  static constexpr const char* kControl = R"({"beats":20,"per_second":20})";
};

TEST_F(SuspendJudge, AFrozenHeartbeatPasses) {
  // 20 beats/s; 3.2 s between the control and the follow-up, 3 s of it suspended: 0.2 s awake.
  auto [outcome, reason] = Run(kControl, R"({"beats":45,"per_second":20})");
  EXPECT_EQ(outcome, "pass") << reason;
  EXPECT_NE(reason.find("the heartbeat gained 5 beats"), std::string::npos) << reason;
  EXPECT_EQ(evidence_["suspended"]["beats_before"], 40);
}

TEST_F(SuspendJudge, AHeartbeatThatKeptBeatingFails) {
  // A suspend that did nothing: 64 beats in 3.2 s at 20 beats/s.
  auto [outcome, reason] = Run(kControl, R"({"beats":104,"per_second":20})");
  EXPECT_EQ(outcome, "fail");
  EXPECT_NE(reason.find("kept beating while suspended"), std::string::npos) << reason;
}

TEST_F(SuspendJudge, ASandboxRestartedInsteadOfResumedFails) {
  auto [o1, r1] = Run(kControl, R"({"beats":3,"per_second":20})");
  EXPECT_EQ(o1, "fail");
  EXPECT_NE(r1.find("went back"), std::string::npos) << r1;
  auto [o2, r2] = Run(kControl, R"({"beats":40,"per_second":0})");
  EXPECT_EQ(o2, "fail");
  EXPECT_NE(r2.find("no longer beats"), std::string::npos) << r2;
}

TEST_F(SuspendJudge, NoFiguresCannotBeJudgedAndNeverPass) {
  auto [outcome, reason] = Run(kControl, "45\n");
  EXPECT_EQ(outcome, "fail");
  EXPECT_NE(reason.find("cannot judge"), std::string::npos) << reason;
}

TEST_F(SuspendJudge, ARuntimeThatEndsBackgroundProcessesIsASkipNotAFailure) {
  // Background processes end with their command (our microvm backend): nothing to see.
  auto [outcome, reason] = Run(R"({"beats":5,"per_second":0})", R"({"beats":5,"per_second":0})");
  EXPECT_EQ(outcome, "skip") << reason;
  EXPECT_NE(reason.find("ends a command's background processes"), std::string::npos) << reason;
}

TEST_F(SuspendJudge, AShortHoldIsJudgedOnTheAwakeTimeOnly) {
  // A slow resume (the hold ended at 101, the follow-up at 104): 3 s awake allow more beats.
  auto [outcome, reason] = Run(kControl, R"({"beats":100,"per_second":20})", 101.0, 104.0);
  EXPECT_EQ(outcome, "pass") << reason;
}

}  // namespace
}  // namespace sandcheck
