// Unit tests of the command-line table's arithmetic (command_lines.h, issue 16): ratios to bwrap,
// to runsc do and to the floor; the goals are judged on p50 and can fail; skipped rows keep their
// reason; ours warm exec is matched to the runtime CLI of the same backend and target only.
#include "run/command_lines.h"

#include <gtest/gtest.h>

#include "report/render.h"

namespace sandcheck {
namespace {

using nlohmann::json;

CommandLineRow Row(const std::string& id, const std::string& role, const std::string& backend,
                   std::vector<double> samples, std::string skip = "") {
  return {{id, id + " label", role, backend, {"/bin/true"}, false}, std::move(samples),
          std::move(skip)};
}

json Comparison() {
  json rows = json::array();
  rows.push_back({{"target", "ours"}, {"backend", "oci"}, {"p50", 0.004}, {"p95", 0.008}});
  rows.push_back({{"target", "theirs"}, {"backend", "oci"}, {"p50", 0.5}, {"p95", 0.9}});
  rows.push_back({{"target", "ours"}, {"backend", "gvisor"}, {"skip", "not offered"}});
  return {{"targets", {{{"id", "warm-start"}, {"rows", rows}},
                       {{"id", "teardown"},
                        {"rows", {{{"target", "ours"}, {"backend", "oci"}, {"p50", 9.0},
                                   {"p95", 9.0}}}}}}}};
}

const json* Find(const json& rows, const std::string& id) {
  for (const auto& r : rows)
    if (r.value("id", "") == id) return &r;
  return nullptr;
}

TEST(CommandLines, RatiosAreToBwrapToRunscDoAndToTheFloor) {
  std::vector<CommandLineRow> rows = {
      Row("fork-exec", "floor", "", {0.001, 0.001, 0.001}),
      Row("bwrap", "oneshot", "", {0.010, 0.010, 0.010}),
      Row("runsc-do", "oneshot", "gvisor", {0.200, 0.200, 0.200}),
      Row("sandboxctl-run", "oneshot", "default", {0.005, 0.005, 0.005}),
      Row("sandboxctl-run-gvisor", "oneshot", "gvisor", {0.300, 0.300, 0.300}),
  };
  json c = CommandLinesJson(rows, 3, json::object(), "ours");
  const json* run = Find(c["rows"], "sandboxctl-run");
  ASSERT_NE(run, nullptr);
  EXPECT_DOUBLE_EQ((*run)["p50_over_bwrap"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ((*run)["p50_over_floor"].get<double>(), 5.0);
  EXPECT_TRUE((*run)["p50_over_runsc_do"].is_null()) << "runsc do is the gvisor rows' yardstick";
  const json* gv = Find(c["rows"], "sandboxctl-run-gvisor");
  ASSERT_NE(gv, nullptr);
  EXPECT_DOUBLE_EQ((*gv)["p50_over_runsc_do"].get<double>(), 1.5);
  EXPECT_EQ((*gv)["count"], 3);

  // One goal met (0.5×), one not (1.5×): the verdict follows the ratio, both ways.
  ASSERT_EQ(c["goals"].size(), 2u);
  EXPECT_TRUE(c["goals"][0]["met"].get<bool>());
  EXPECT_FALSE(c["goals"][1]["met"].get<bool>());
  std::string md = CommandLinesMarkdown(c);
  EXPECT_NE(md.find("1.50× — **not met**"), std::string::npos) << md;
  EXPECT_NE(md.find("0.50× — met"), std::string::npos) << md;
}

TEST(CommandLines, SkippedRowsKeepTheirReasonAndNoGoalIsJudgedWithoutBothSides) {
  std::vector<CommandLineRow> rows = {
      Row("fork-exec", "floor", "", {0.001}),
      Row("bwrap", "oneshot", "", {}, "no bwrap on PATH"),
      Row("sandboxctl-run", "oneshot", "default", {0.005}),
      Row("crun-exec", "runtime-exec", "oci", {}),  // interrupted before its first sample
  };
  json c = CommandLinesJson(rows, 1, json::object(), "ours");
  EXPECT_EQ((*Find(c["rows"], "bwrap"))["skip"], "no bwrap on PATH");
  EXPECT_FALSE(Find(c["rows"], "crun-exec")->value("skip", "").empty());
  EXPECT_TRUE((*Find(c["rows"], "sandboxctl-run"))["p50_over_bwrap"].is_null());
  EXPECT_TRUE(c["goals"].empty()) << "a goal without bwrap measured would be made up";
  std::string md = CommandLinesMarkdown(c);
  EXPECT_NE(md.find("`bwrap label`: no bwrap on PATH"), std::string::npos) << md;
}

TEST(CommandLines, WarmExecIsSetAgainstTheRuntimeCliOfItsOwnBackendAndTarget) {
  std::vector<CommandLineRow> rows = {
      Row("crun-exec", "runtime-exec", "oci", {0.020, 0.020}),
      Row("runsc-exec", "runtime-exec", "gvisor", {0.050}),
  };
  json c = CommandLinesJson(rows, 2, Comparison(), "ours");
  ASSERT_EQ(c["warm_vs_runtime_cli"].size(), 1u) << c.dump(1);  // gvisor: ours was not measured
  const json& w = c["warm_vs_runtime_cli"][0];
  EXPECT_EQ(w["backend"], "oci");
  EXPECT_DOUBLE_EQ(w["warm_p50"].get<double>(), 0.004);  // ours, warm-start: not theirs, not teardown
  EXPECT_DOUBLE_EQ(w["p50_ratio"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(w["p95_ratio"].get<double>(), 0.4);
  EXPECT_EQ(CommandLinesMarkdown(nullptr), "");
}

}  // namespace
}  // namespace sandcheck
