// Test-only: the pool scenario loaded with ONE of its tasks run, for the checks judged from one
// task's record (pool/fresh-per-task, pool/other-tenant-refused). Derive, pass the task id and
// the features the target offers, fill Task() and call Judge().
#pragma once

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "checks/checks.h"
#include "scenario/catalog.h"
#include "scenario/scenario.h"

namespace sandcheck {

class PoolTaskTest : public ::testing::Test {
 protected:
  PoolTaskTest(std::string task_id, std::vector<std::string> features)
      : task_id_(std::move(task_id)), features_(std::move(features)) {}

  void SetUp() override {
    auto s = LoadScenarios({"pool"}, {});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    scenario_ = std::move((*s)[0]);
    info_.features = features_;
    run_.scenario = &scenario_;
    for (const auto& t : scenario_.tasks) {
      TaskRecord rec;
      rec.spec = &t;
      rec.ran = t.id == task_id_;
      if (!rec.ran) rec.skip_reason = "not this test's";
      run_.tasks.push_back(std::move(rec));
    }
  }
  TaskRecord& Task() {
    for (auto& t : run_.tasks) {
      if (t.spec->id == task_id_) return t;
    }
    throw std::runtime_error("the pool scenario has no task " + task_id_);
  }
  // An exec that answered `out` with exit 0 in `s` seconds.
  static Step Exec(const std::string& out, double s = 0.01) {
    Step st;
    st.is_exec = true;
    st.answer.exit_code = 0;
    st.answer.stdout_text = out;
    st.wall_seconds = s;
    return st;
  }
  // {outcome, reason} of `check_id` after judging the run.
  std::pair<std::string, std::string> JudgeCheck(const std::string& check_id) {
    JudgeScenario(run_, info_);
    for (const auto& c : run_.checks) {
      if (c.spec->id == check_id) return {OutcomeName(c.raw), c.reason};
    }
    return {"", ""};
  }

  std::string task_id_;
  std::vector<std::string> features_;
  Scenario scenario_;
  TargetInfo info_;
  ScenarioRun run_;
};

}  // namespace sandcheck
