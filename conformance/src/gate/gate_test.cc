// Unit tests of the gate logic (gate.h): percentiles from raw samples, absolute limits, ratio
// gates with a tolerance against a baseline, skips, and malformed input (exit 2 in the CLI).
#include "gate/gate.h"

#include <gtest/gtest.h>

#include "common/stats.h"
#include "scenario/catalog.h"
#include "scenario/nfr_spec.h"

namespace sandcheck {
namespace {

using nlohmann::json;

NfrSpec BuiltinSpec() {
  auto s = LoadNfrByName("nfr", {}, nullptr);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return *s;
}

json Measurement(const std::string& name, const std::string& backend,
                 const std::vector<double>& samples, const std::string& clock = "harness") {
  return {{"name", name}, {"scenario", "nfr"}, {"target", "t"},      {"backend", backend},
          {"unit", "s"},  {"clock", clock},    {"samples", samples}, {"count", samples.size()}};
}

json Report(json measurements, json checks = json::array(), const std::string& host = "h1") {
  return {{"schema", "sandcheck-report/1"},
          {"run_id", "r"},
          {"profile", "default"},
          {"target", {{"name", "t"}}},
          {"host", {{"hostname", host}, {"machine", "x86_64"}, {"cpus", 2}, {"kernel", "6.18"}}},
          {"summary", {{"exit_code", 0}}},
          {"scenarios", json::array()},
          {"checks", checks},
          {"measurements", measurements},
          {"errors", json::array()}};
}

// n samples: (n-1) at `base` and the rest as given (so p95 is controlled).
std::vector<double> Samples(int n, double base, double tail = -1, int tail_count = 0) {
  std::vector<double> v(static_cast<size_t>(n - tail_count), base);
  for (int i = 0; i < tail_count; ++i) v.push_back(tail);
  return v;
}

const GateResult* Find(const GateReport& g, const std::string& id) {
  for (const auto& r : g.gates) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

TEST(Percentile, InterpolatesLinearlyLikeNumpy) {
  std::vector<double> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 5.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 95), 9.55);  // numpy.percentile(range(1,11), 95)
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 10);
  EXPECT_DOUBLE_EQ(Percentile({7}, 95), 7);
  // Order of the samples does not matter.
  EXPECT_DOUBLE_EQ(Percentile({10, 1, 9, 2, 8, 3, 7, 4, 6, 5}, 95), 9.55);
}

TEST(Statistic, NamesAndErrors) {
  EXPECT_DOUBLE_EQ(*Statistic({1, 2, 3, 10}, "mean"), 4);
  EXPECT_DOUBLE_EQ(*Statistic({1, 2, 3}, "p50"), 2);
  EXPECT_FALSE(Statistic({1}, "median").ok());
  EXPECT_FALSE(Statistic({1}, "p0").ok());
  EXPECT_FALSE(Statistic({1}, "p101").ok());
  EXPECT_FALSE(Statistic({}, "p50").ok());
}

TEST(Tolerance, PercentOrFraction) {
  EXPECT_DOUBLE_EQ(*ParseTolerance("10%"), 0.10);
  EXPECT_DOUBLE_EQ(*ParseTolerance("0.25"), 0.25);
  EXPECT_DOUBLE_EQ(*ParseTolerance("150%"), 1.5);
  EXPECT_DOUBLE_EQ(*ParseTolerance("0%"), 0);
  EXPECT_FALSE(ParseTolerance("10").ok());  // ambiguous: 10 % or 1000 %?
  EXPECT_FALSE(ParseTolerance("-5%").ok());
  EXPECT_FALSE(ParseTolerance("ten").ok());
  EXPECT_FALSE(ParseTolerance("").ok());
  EXPECT_FALSE(ParseTolerance("%").ok());
  EXPECT_FALSE(ParseTolerance("5%%").ok());
}

TEST(AbsoluteGate, PassesStrictlyBelowTheLimitOnTheGatedPercentile) {
  NfrSpec spec = BuiltinSpec();
  // 100 samples: 95 at 5 ms, 5 at 50 ms → p95 = 5 ms + 0.05 × 45 ms... computed, not assumed.
  std::vector<double> v = Samples(100, 0.005, 0.050, 5);
  double p95 = Percentile(v, 95);
  auto g = EvaluateGates(Report({Measurement("warm-start", "native", v)}), spec, nullptr, {});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const GateResult* r = Find(*g, "absolute:nfr/warm-start-native");
  ASSERT_NE(r, nullptr);
  EXPECT_DOUBLE_EQ(r->value, p95);
  EXPECT_EQ(r->outcome, p95 < 0.020 ? "pass" : "fail");
  EXPECT_EQ(r->requirement, "NFR-1");
  EXPECT_EQ(g->ExitCode(), p95 < 0.020 ? 0 : 1);
}

TEST(AbsoluteGate, FailsWhenTheTailBreachesEvenIfTheMedianIsFine) {
  NfrSpec spec = BuiltinSpec();
  // p50 1 ms, but 10 % of the samples at 40 ms: p95 = 40 ms ≥ 20 ms.
  auto g =
      EvaluateGates(Report({Measurement("warm-start", "native", Samples(100, 0.001, 0.040, 10))}),
                    spec, nullptr, {});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(Find(*g, "absolute:nfr/warm-start-native")->outcome, "fail");
  EXPECT_EQ(g->ExitCode(), 1);
}

TEST(AbsoluteGate, TheLimitItselfIsABreach) {
  NfrSpec spec = BuiltinSpec();
  auto g = EvaluateGates(Report({Measurement("teardown-reclaim", "native", Samples(10, 0.030))}),
                         spec, nullptr, {});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(Find(*g, "absolute:nfr/teardown-reclaim-native")->outcome, "fail");  // "< 30 ms"
}

TEST(AbsoluteGate, OnlyTheGatedClockCounts) {
  NfrSpec spec = BuiltinSpec();
  // The target says 1 ms, the harness measured 50 ms: the harness clock is gated.
  auto g =
      EvaluateGates(Report({Measurement("warm-start", "native", Samples(20, 0.050)),
                            Measurement("warm-start", "native", Samples(20, 0.001), "target")}),
                    spec, nullptr, {});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(Find(*g, "absolute:nfr/warm-start-native")->outcome, "fail");
}

TEST(AbsoluteGate, RuntimeWideTargetAndPerBackendIds) {
  NfrSpec spec = BuiltinSpec();
  auto g = EvaluateGates(Report({Measurement("orphan-sweep", "runtime", Samples(5, 0.9)),
                                 Measurement("warm-start", "oci", Samples(5, 0.1))}),
                         spec, nullptr, {});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(Find(*g, "absolute:nfr/orphan-sweep")->outcome, "pass");
  EXPECT_EQ(Find(*g, "absolute:nfr/warm-start-oci")->outcome, "fail");
}

TEST(AbsoluteGate, SkippedTargetsSkipAndBrokenRunsFail) {
  NfrSpec spec = BuiltinSpec();
  json checks =
      json::array({{{"id", "nfr/cold-start-microvm-microvm"},
                    {"scenario", "nfr"},
                    {"kind", "nfr_latency"},
                    {"level", "MUST"},
                    {"outcome", "skip"},
                    {"raw_outcome", "skip"},
                    {"reason", "no microvm backend"},
                    {"requirements", {"NFR-2"}},
                    {"blocking", false},
                    {"evidence", {{"target", "cold-start-microvm"}, {"backend", "microvm"}}}},
                   {{"id", "nfr/teardown-reclaim-native"},
                    {"scenario", "nfr"},
                    {"kind", "nfr_latency"},
                    {"level", "MUST"},
                    {"outcome", "fail"},
                    {"raw_outcome", "fail"},
                    {"reason", "exec 3 did not succeed"},
                    {"requirements", {"NFR-4"}},
                    {"blocking", true},
                    {"evidence", {{"target", "teardown-reclaim"}, {"backend", "native"}}}}});
  // The broken run left 2 fast samples: they prove nothing.
  auto g =
      EvaluateGates(Report({Measurement("teardown-reclaim", "native", Samples(2, 0.001))}, checks),
                    spec, nullptr, {});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(Find(*g, "absolute:nfr/cold-start-microvm-microvm")->outcome, "skip");
  EXPECT_EQ(Find(*g, "absolute:nfr/teardown-reclaim-native")->outcome, "fail");
  EXPECT_EQ(Find(*g, "absolute:nfr/wasm-instantiation")->outcome, "skip");  // not in the report
  EXPECT_EQ(g->ExitCode(), 1);
}

TEST(AbsoluteGate, MissingSamplesAndRunErrorsFail) {
  NfrSpec spec = BuiltinSpec();
  json check = {{"id", "nfr/warm-start-native"},
                {"scenario", "nfr"},
                {"kind", "nfr_latency"},
                {"level", "MUST"},
                {"outcome", "pass"},
                {"raw_outcome", "pass"},
                {"reason", "p95 fine"},
                {"requirements", {"NFR-1"}},
                {"blocking", false},
                {"evidence",
                 {{"target", "warm-start"},
                  {"backend", "native"},
                  {"samples_asked", 200},
                  {"value_s", 0.001}}}};
  // One fast sample where the run set out to take 200: it proves nothing.
  auto few = EvaluateGates(
      Report({Measurement("warm-start", "native", Samples(1, 0.001))}, json::array({check})), spec,
      nullptr, {});
  ASSERT_TRUE(few.ok());
  EXPECT_EQ(Find(*few, "absolute:nfr/warm-start-native")->outcome, "fail");
  EXPECT_EQ(few->ExitCode(), 1);
  // All 200: pass.
  auto all = EvaluateGates(
      Report({Measurement("warm-start", "native", Samples(200, 0.001))}, json::array({check})),
      spec, nullptr, {});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(Find(*all, "absolute:nfr/warm-start-native")->outcome, "pass");
  EXPECT_EQ(all->ExitCode(), 0);
  // No samples at all: fail, not skip.
  auto none = EvaluateGates(Report({Measurement("warm-start", "native", {})}), spec, nullptr, {});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(Find(*none, "absolute:nfr/warm-start-native")->outcome, "fail");
  // The same passing measurements in a report that also recorded a target error: fail.
  json with_error =
      Report({Measurement("warm-start", "native", Samples(200, 0.001))}, json::array({check}));
  with_error["errors"] = json::array({"cold-start on oci: create failed"});
  auto err = EvaluateGates(with_error, spec, nullptr, {});
  ASSERT_TRUE(err.ok());
  EXPECT_EQ(Find(*err, "absolute:report-errors")->outcome, "fail");
  EXPECT_EQ(err->ExitCode(), 1);
}

TEST(AbsoluteGate, ACertifyRunAcceptsNoSkippedTarget) {
  NfrSpec spec = BuiltinSpec();
  json skipped =
      json::array({{{"id", "nfr/cold-start-microvm-microvm"},
                    {"scenario", "nfr"},
                    {"kind", "nfr_latency"},
                    {"level", "MUST"},
                    {"outcome", "fail"},
                    {"raw_outcome", "skip"},
                    {"reason", "no microvm backend"},
                    {"requirements", {"NFR-2"}},
                    {"blocking", true},
                    {"evidence", {{"target", "cold-start-microvm"}, {"backend", "microvm"}}}}});
  json report = Report({Measurement("warm-start", "native", Samples(200, 0.001))}, skipped);
  auto normal = EvaluateGates(report, spec, nullptr, {});
  ASSERT_TRUE(normal.ok());
  EXPECT_EQ(Find(*normal, "absolute:nfr/cold-start-microvm-microvm")->outcome, "skip");
  report["profile"] = "certify";
  auto certify = EvaluateGates(report, spec, nullptr, {});
  ASSERT_TRUE(certify.ok());
  EXPECT_EQ(Find(*certify, "absolute:nfr/cold-start-microvm-microvm")->outcome, "fail");
  EXPECT_EQ(certify->ExitCode(), 1);
}

TEST(AbsoluteGate, NothingToGateFails) {
  NfrSpec spec = BuiltinSpec();
  auto g = EvaluateGates(Report(json::array()), spec, nullptr, {});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->Evaluated(), 0);
  EXPECT_EQ(g->ExitCode(), 1);
}

TEST(RatioGate, ToleranceIsTheBoundary) {
  NfrSpec spec = BuiltinSpec();
  json base = Report({Measurement("cold-start", "native", Samples(20, 0.010))});
  GateOptions o;
  o.tolerance = 0.10;
  for (auto [now, outcome] : {std::pair{0.0109, "pass"}, std::pair{0.0110, "pass"},
                              std::pair{0.0112, "fail"}, std::pair{0.008, "pass"}}) {
    json cur = Report({Measurement("cold-start", "native", Samples(20, now))});
    auto g = EvaluateGates(cur, spec, &base, o);
    ASSERT_TRUE(g.ok());
    const GateResult* r = Find(*g, "ratio:nfr/cold-start/native/harness");
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->outcome, outcome) << now << ": " << r->message;
    EXPECT_NEAR(r->limit, 0.011, 1e-12);
  }
}

TEST(RatioGate, StatisticIsComputedFromSamplesNotTheStoredSummary) {
  NfrSpec spec = BuiltinSpec();
  json base = Report({Measurement("cold-start", "native", Samples(20, 0.010))});
  json cur = Report({Measurement("cold-start", "native", Samples(20, 0.020))});
  cur["measurements"][0]["p50"] = 0.010;  // a lie in the summary must not hide the regression
  auto g = EvaluateGates(cur, spec, &base, {});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(Find(*g, "ratio:nfr/cold-start/native/harness")->outcome, "fail");
}

TEST(RatioGate, P95StatisticSeesATailTheMedianDoesNot) {
  NfrSpec spec = BuiltinSpec();
  json base = Report({Measurement("cold-start", "native", Samples(100, 0.010))});
  json cur = Report({Measurement("cold-start", "native", Samples(100, 0.010, 0.050, 10))});
  GateOptions p50, p95;
  p95.statistic = "p95";
  EXPECT_EQ(
      Find(*EvaluateGates(cur, spec, &base, p50), "ratio:nfr/cold-start/native/harness")->outcome,
      "pass");
  EXPECT_EQ(
      Find(*EvaluateGates(cur, spec, &base, p95), "ratio:nfr/cold-start/native/harness")->outcome,
      "fail");
}

TEST(RatioGate, NoiseFloorAndMinimumSamples) {
  NfrSpec spec = BuiltinSpec();
  json base = Report({Measurement("cold-start", "native", Samples(20, 0.0010)),
                      Measurement("warm-start", "native", Samples(3, 0.001))});
  json cur = Report({Measurement("cold-start", "native", Samples(20, 0.0015)),
                     Measurement("warm-start", "native", Samples(3, 0.009))});
  GateOptions o;
  EXPECT_EQ(
      Find(*EvaluateGates(cur, spec, &base, o), "ratio:nfr/cold-start/native/harness")->outcome,
      "fail");            // +50 %
  o.min_delta_s = 0.001;  // but only 0.5 ms: noise
  auto g = EvaluateGates(cur, spec, &base, o);
  EXPECT_EQ(Find(*g, "ratio:nfr/cold-start/native/harness")->outcome, "pass");
  EXPECT_EQ(Find(*g, "ratio:nfr/warm-start/native/harness")->outcome, "skip");  // 3 < 5 samples
}

TEST(RatioGate, MissingOnEitherSideIsASkipAndTheFloorIsOnlyANote) {
  NfrSpec spec = BuiltinSpec();
  json base = Report({Measurement("cold-start", "oci", Samples(20, 0.1)),
                      Measurement("floor", "host", Samples(20, 0.001))});
  json cur = Report({Measurement("cold-start", "native", Samples(20, 0.01)),
                     Measurement("floor", "host", Samples(20, 0.003))});
  auto g = EvaluateGates(cur, spec, &base, {});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(Find(*g, "ratio:nfr/cold-start/native/harness")->outcome, "skip");
  EXPECT_EQ(Find(*g, "ratio:nfr/cold-start/oci/harness")->outcome, "skip");
  EXPECT_EQ(Find(*g, "ratio:nfr/floor/host/harness"), nullptr);
  // One note of this run's floor (AbsoluteGate.TheRunsFloorAndLoadAreNotes), one of its drift.
  ASSERT_EQ(g->notes.size(), 2u);
  EXPECT_NE(g->notes[1].find("+200 %"), std::string::npos) << g->notes[1];
}

TEST(AbsoluteGate, TheRunsFloorAndLoadAreNotesNeverVerdicts) {
  NfrSpec spec = BuiltinSpec();
  json cur = Report({Measurement("warm-start", "native", Samples(20, 0.002)),
                     Measurement("floor", "host", Samples(20, 0.003, 0.009, 1))});
  cur["machine_load"] = {{"seconds", 20.0},   {"cpu_busy", 0.9},     {"iowait", 0.0},
                         {"steal", 0.4},      {"cpu_pressure", 0.5}, {"loadavg_start", 1.0},
                         {"loadavg_end", 7.5}};
  auto g = EvaluateGates(cur, spec, nullptr, {});
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->notes.size(), 2u);
  EXPECT_EQ(g->notes[0], "machine floor in this run (floor): p50 3.0 ms, p95 3.3 ms (n=20)");
  EXPECT_EQ(g->notes[1],
            "machine during the run: CPUs 90 % busy (steal 40 %, iowait 0 %), CPU pressure 50 %, "
            "load 1.00 → 7.50 over 20.0 s");
  // A busy machine changes no verdict: the gate judges the figures it was given.
  EXPECT_EQ(Find(*g, "absolute:nfr/warm-start-native")->outcome, "pass");
  // Reports made before machine_load was recorded (or with null) carry no load note.
  cur.erase("machine_load");
  EXPECT_EQ(EvaluateGates(cur, spec, nullptr, {})->notes.size(), 1u);
  cur["machine_load"] = nullptr;
  EXPECT_EQ(EvaluateGates(cur, spec, nullptr, {})->notes.size(), 1u);
}

TEST(RatioGate, BaselineFromAnotherMachineIsBadInputUnlessAllowed) {
  NfrSpec spec = BuiltinSpec();
  json base = Report({Measurement("cold-start", "native", Samples(20, 0.010))}, json::array(),
                     "other-host");
  json cur = Report({Measurement("cold-start", "native", Samples(20, 0.010))});
  auto g = EvaluateGates(cur, spec, &base, {});
  EXPECT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), sbx::Code::kInvalidArgument);
  GateOptions o;
  o.allow_other_host = true;
  auto g2 = EvaluateGates(cur, spec, &base, o);
  ASSERT_TRUE(g2.ok());
  EXPECT_EQ(g2->ExitCode(), 0);
}

TEST(GateInput, MalformedReportsAreInvalidArgument) {
  NfrSpec spec = BuiltinSpec();
  std::vector<json> bad;
  bad.push_back(json::array());                         // not an object
  bad.push_back(json{{"schema", "something-else/1"}});  // not a report
  json r = Report({Measurement("warm-start", "native", {0.001, 0.002})});
  json r1 = r;
  r1["measurements"][0]["samples"] = {0.001, "fast"};  // not a number
  bad.push_back(r1);
  json r2 = r;
  r2["measurements"][0]["count"] = 5;  // does not match
  bad.push_back(r2);
  json r3 = r;
  r3["measurements"][0].erase("clock");
  bad.push_back(r3);
  json r4 = r;
  r4["measurements"][0]["samples"] = {-0.001, 0.002};  // not a time
  r4["measurements"][0]["count"] = 2;
  bad.push_back(r4);
  json r5 = r;
  r5.erase("checks");
  bad.push_back(r5);
  for (size_t i = 0; i < bad.size(); ++i) {
    auto g = EvaluateGates(bad[i], spec, nullptr, {});
    EXPECT_FALSE(g.ok()) << i;
    if (!g.ok()) {
      EXPECT_EQ(g.status().code(), sbx::Code::kInvalidArgument) << i;
    }
    // The same as a baseline.
    auto g2 = EvaluateGates(r, spec, &bad[i], {});
    EXPECT_FALSE(g2.ok()) << "baseline " << i;
  }
}

TEST(GateJunit, OneTestcasePerGateWithFailures) {
  NfrSpec spec = BuiltinSpec();
  auto g = EvaluateGates(Report({Measurement("warm-start", "native", Samples(10, 0.050))}), spec,
                         nullptr, {});
  ASSERT_TRUE(g.ok());
  std::string x = RenderGateJunit(*g, Report(json::array()));
  EXPECT_NE(x.find("<testcase name=\"absolute:nfr/warm-start-native\""), std::string::npos);
  EXPECT_NE(x.find("<failure message=\"NFR-1 warm-start on native"), std::string::npos) << x;
  EXPECT_NE(x.find("<testsuite name=\"gate.ratio\""), std::string::npos);
}

TEST(NfrSpecLoad, BuiltinTargetsAndStrictness) {
  NfrSpec spec = BuiltinSpec();
  std::set<std::string> reqs;
  for (const auto& t : spec.targets) {
    if (t.limited) reqs.insert(t.requirement);
    EXPECT_FALSE(t.boundary.empty()) << t.id;
  }
  EXPECT_EQ(reqs, (std::set<std::string>{"NFR-1", "NFR-2", "NFR-3", "NFR-4", "NFR-5"}));
  EXPECT_DOUBLE_EQ(spec.Find("warm-start")->limit_s, 0.020);
  EXPECT_DOUBLE_EQ(spec.Find("cold-start-microvm")->limit_s, 0.200);
  EXPECT_DOUBLE_EQ(spec.Find("wasm-instantiation")->limit_s, 0.002);
  EXPECT_DOUBLE_EQ(spec.Find("teardown-reclaim")->limit_s, 0.030);
  EXPECT_DOUBLE_EQ(spec.Find("orphan-sweep")->limit_s, 10.0);
  EXPECT_GE(spec.Find("warm-start")->samples, 200);
  EXPECT_GE(spec.Find("teardown-reclaim")->samples, 200);
  EXPECT_EQ(spec.Find("warm-start")->SamplesFor(30), 30);
  EXPECT_EQ(spec.Find("orphan-sweep")->SamplesFor(1000), spec.Find("orphan-sweep")->max_samples);

  const char* base = R"({"format":1,"kind":"nfr","name":"x","targets":[{"id":"a",
    "requirement":"NFR-1","level":"MUST","limit_ms":20,"samples":5,"max_samples":10,
    "backends":["*"],"method":"warm_exec","command":"true","boundary":"b"}]})";
  EXPECT_TRUE(LoadNfrSpec(base, "t", {}, nullptr).ok());
  std::string unknown = base;
  unknown.replace(unknown.find("\"boundary\""), 0, "\"bogus\":1,");
  EXPECT_FALSE(LoadNfrSpec(unknown, "t", {}, nullptr).ok());
  std::string no_limit = base;
  no_limit.replace(no_limit.find("\"limit_ms\":20,"), 14, "");
  EXPECT_FALSE(LoadNfrSpec(no_limit, "t", {}, nullptr).ok());
  std::string bad_req = base;
  bad_req.replace(bad_req.find("NFR-1"), 5, "NFR-99");
  EXPECT_FALSE(LoadNfrSpec(bad_req, "t", {}, nullptr).ok());
  std::string bad_method = base;
  bad_method.replace(bad_method.find("warm_exec"), 9, "guess");
  EXPECT_FALSE(LoadNfrSpec(bad_method, "t", {}, nullptr).ok());
  std::string no_command = base;
  no_command.replace(no_command.find("\"command\":\"true\","), 17, "");
  EXPECT_FALSE(LoadNfrSpec(no_command, "t", {}, nullptr).ok());
}

}  // namespace
}  // namespace sandcheck
