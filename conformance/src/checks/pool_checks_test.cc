// kind pool_walk (the pool scenario): fabricated walks, each rule shown to fail on the pool
// defect it names and to pass a runtime that makes every sandbox new — and one that reuses a
// trusted sandbox for the same tenant and tool, clean.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>

#include "checks/checks.h"
#include "checks/pool_task_test_fixture.h"
#include "scenario/catalog.h"
#include "scenario/scenario.h"

namespace sandcheck {
namespace {

using nlohmann::json;

// One step: who, and the instance it ran in ({"mnt":…, "init_start":…} for a real kernel;
// booted_unix only, for a gVisor-like kernel).
struct Fake {
  std::string tenant, tool, trust;
  json instance;
  std::vector<std::string> survivors_of;  // earlier tokens whose canaries it "found"
  std::string env;                        // "" = its own
  std::vector<std::string> seen_extra;    // other SBX_POOL_* values a process held
};

class PoolWalkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = LoadScenarios({"pool"}, {});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    scenario_ = std::move((*s)[0]);
    info_.features = {"tenants", "trust"};
    run_.scenario = &scenario_;
    run_.harness = {{"token", "tok"}};
    TaskRecord rec;
    for (const auto& t : scenario_.tasks) {
      if (t.walk) rec.spec = &t;
    }
    ASSERT_NE(rec.spec, nullptr) << "the pool scenario has no walk task";
    rec.ran = true;
    rec.walk_seed = "seed";
    rec.walk_host_identity = json{{"boot_id", "host"}, {"mnt", 1},        {"pid", 2},
                                  {"net", 3},          {"init_start", 1}, {"booted_unix", 100.0}}
                                 .dump();
    run_.tasks.push_back(std::move(rec));
  }

  void Walk(const std::vector<Fake>& steps) {
    TaskRecord& rec = run_.tasks[0];
    std::vector<std::string> tokens;
    for (size_t i = 0; i < steps.size(); ++i) {
      const Fake& f = steps[i];
      WalkStep w;
      w.tenant = f.tenant;
      w.tool = f.tool;
      w.trust = f.trust;
      w.token = fmt::format("tokp{}", i);
      w.sandbox = fmt::format("sb{}", i);
      w.create.emplace();
      w.exec.emplace();
      w.exec->is_exec = true;
      std::string earlier;
      for (const auto& t : tokens) earlier += " " + t;
      w.exec->command =
          "sbx-probe --instance; for t in" + earlier + "; do sbx-canary check $t 0; done";
      std::string out = json{{"instance", f.instance}}.dump() + "\n";
      out += "env " + (f.env.empty() ? w.token + " s" + w.token : f.env) + "\n";
      out += "seen SBX_POOL_SECRET=s" + w.token + "\nseen SBX_POOL_STEP=" + w.token + "\n";
      for (const auto& x : f.seen_extra) out += "seen " + x + "\n";
      for (const auto& t : tokens) {
        bool found =
            std::find(f.survivors_of.begin(), f.survivors_of.end(), t) != f.survivors_of.end();
        out += json{{"survivors", found ? json::array({"tmp-file"}) : json::array()},
                    {"checked", {"tmp-file"}}}
                   .dump() +
               "\n";
      }
      w.exec->answer.stdout_text = out + "probed\n";
      w.exec->answer.exit_code = 0;
      w.destroy.emplace();
      tokens.push_back(w.token);
      rec.walk.push_back(std::move(w));
    }
  }

  std::map<std::string, std::string> Judge() {
    JudgeScenario(run_, info_);
    std::map<std::string, std::string> out;
    for (const auto& c : run_.checks) {
      if (c.spec->kind == "pool_walk") out[c.spec->id.substr(5)] = OutcomeName(c.raw);
    }
    return out;
  }
  std::string Reason(const std::string& name) {
    for (const auto& c : run_.checks) {
      if (c.spec->id == "pool/" + name) return c.reason;
    }
    return "";
  }

  static json Kernel(int mnt, int start) {
    return {{"boot_id", "host"}, {"mnt", mnt},          {"pid", mnt + 1},
            {"net", mnt + 2},    {"init_start", start}, {"booted_unix", 100.0}};
  }
  // gVisor: no boot_id or mount namespace; PID and network inodes that change per command.
  static json Sentry(double booted, int pid_ns) {
    return {{"boot_id", nullptr}, {"mnt", nullptr},  {"pid", pid_ns},
            {"net", pid_ns + 1},  {"init_start", 6}, {"booted_unix", booted}};
  }

  Scenario scenario_;
  TargetInfo info_;
  ScenarioRun run_;
};

const std::map<std::string, std::string> kAllPass = {{"reset-before-reuse", "pass"},
                                                     {"context-injected", "pass"},
                                                     {"tenants-apart", "pass"},
                                                     {"untrusted-discarded", "pass"}};

TEST_F(PoolWalkTest, EverySandboxNewPasses) {
  Walk({{"a", "t1", "first_party", Kernel(10, 100)},
        {"b", "t1", "first_party", Kernel(20, 200)},
        {"a", "t1", "untrusted", Sentry(1000.0, 285)},
        {"a", "t1", "untrusted", Sentry(1001.2, 285)}});
  EXPECT_EQ(Judge(), kAllPass) << Reason("reset-before-reuse");
}

TEST_F(PoolWalkTest, CleanReuseBySameTenantAndToolPasses) {
  Walk({{"a", "t1", "first_party", Kernel(10, 100)},
        {"a", "t1", "first_party", Kernel(10, 100)},
        {"b", "t1", "first_party", Kernel(20, 200)}});
  auto want = kAllPass;
  want["untrusted-discarded"] = "skip";  // none drawn
  EXPECT_EQ(Judge(), want);
  EXPECT_NE(Reason("untrusted-discarded").find("drew no untrusted"), std::string::npos);
  EXPECT_NE(Reason("tenants-apart").find("1 served again"), std::string::npos);
}

TEST_F(PoolWalkTest, HandOverToAnotherTenantFailsOnlyTenantsApart) {
  Walk({{"a", "t1", "first_party", Kernel(10, 100)}, {"b", "t1", "first_party", Kernel(10, 100)}});
  auto got = Judge();
  EXPECT_EQ(got["tenants-apart"], "fail");
  EXPECT_EQ(got["reset-before-reuse"], "pass");
  EXPECT_NE(Reason("tenants-apart").find("another tenant (POOL-4)"), std::string::npos);
}

TEST_F(PoolWalkTest, HandOverToAnotherToolOrClassFails) {
  Walk({{"a", "t1", "first_party", Kernel(10, 100)}, {"a", "t2", "first_party", Kernel(10, 100)}});
  EXPECT_EQ(Judge()["tenants-apart"], "fail");
  EXPECT_NE(Reason("tenants-apart").find("another tool (LC-10)"), std::string::npos);
}

TEST_F(PoolWalkTest, TrustedHandedToUntrustedFailsTenantsApart) {
  Walk({{"a", "t1", "first_party", Kernel(10, 100)}, {"a", "t1", "untrusted", Kernel(10, 100)}});
  EXPECT_EQ(Judge()["tenants-apart"], "fail");
  EXPECT_NE(Reason("tenants-apart").find("trust classes (POOL-1)"), std::string::npos);
}

TEST_F(PoolWalkTest, UntrustedServedTwiceFailsByBootTimeAndTheSandboxId) {
  // gVisor-like: the only fact a command reads that tells sandboxes apart is when their kernel
  // booted, and sandboxes restored from one checkpoint share even that: one instance only when
  // the target also named one sandbox.
  Walk({{"a", "t1", "untrusted", Sentry(1000.0, 285)},
        {"a", "t1", "untrusted", Sentry(1000.01, 485)}});
  EXPECT_EQ(Judge()["untrusted-discarded"], "pass");  // two sandboxes by id, the same evidence
  run_.tasks[0].walk[1].sandbox = run_.tasks[0].walk[0].sandbox;
  auto got = Judge();
  EXPECT_EQ(got["untrusted-discarded"], "fail");
  EXPECT_EQ(got["tenants-apart"], "pass");
  // A real kernel's evidence needs no id: a new id for a reused container is still one instance.
  run_.tasks[0].walk.clear();
  Walk({{"a", "t1", "untrusted", Kernel(10, 100)}, {"a", "t1", "untrusted", Kernel(10, 100)}});
  EXPECT_EQ(Judge()["untrusted-discarded"], "fail");
}

TEST_F(PoolWalkTest, CarriedCanaryOrEnvironmentFailsReset) {
  Walk({{"a", "t1", "first_party", Kernel(10, 100)},
        {"a", "t1", "first_party", Kernel(10, 100), {"tokp0"}}});
  EXPECT_EQ(Judge()["reset-before-reuse"], "fail");
  run_.tasks[0].walk.clear();
  Walk({{"a", "t1", "first_party", Kernel(10, 100)},
        {"a", "t1", "first_party", Kernel(10, 100), {}, "", {"SBX_POOL_STEP=tokp0"}}});
  auto got = Judge();
  EXPECT_EQ(got["reset-before-reuse"], "fail");
  EXPECT_EQ(got["context-injected"], "pass");
}

TEST_F(PoolWalkTest, MissingSecretFailsContext) {
  Walk({{"a", "t1", "first_party", Kernel(10, 100)},
        {"a", "t1", "first_party", Kernel(10, 100), {}, "tokp1 "}});
  auto got = Judge();
  EXPECT_EQ(got["context-injected"], "fail");
  EXPECT_EQ(got["reset-before-reuse"], "pass");
}

TEST_F(PoolWalkTest, NoInstanceEvidenceOrTheHostsIsASkipNeverAPass) {
  Walk({{"a", "t1", "first_party", json::object()}, {"b", "t1", "first_party", json::object()}});
  auto got = Judge();
  EXPECT_EQ(got["tenants-apart"], "skip");
  EXPECT_EQ(got["untrusted-discarded"], "skip");
  run_.tasks[0].walk.clear();
  json host = json::parse(run_.tasks[0].walk_host_identity);
  Walk({{"a", "t1", "first_party", host}, {"b", "t1", "first_party", host}});
  got = Judge();
  EXPECT_EQ(got["tenants-apart"], "skip");
  EXPECT_NE(Reason("tenants-apart").find("harness's host"), std::string::npos);
}

TEST_F(PoolWalkTest, AProbeThatDidNotAnswerIsNotAPass) {
  Walk({{"a", "t1", "first_party", Kernel(10, 100)}, {"b", "t1", "first_party", Kernel(20, 200)}});
  run_.tasks[0].walk[1].exec->answer.stdout_text = "";
  run_.tasks[0].walk[1].exec->answer.exit_code = 127;
  auto got = Judge();
  for (const auto& [id, outcome] : got) EXPECT_EQ(outcome, "fail") << id;
}

TEST_F(PoolWalkTest, NoUntrustedSandboxMadeIsASkip) {
  Walk({{"a", "t1", "first_party", Kernel(10, 100)}});
  WalkStep refused;
  refused.tenant = "a";
  refused.tool = "t1";
  refused.trust = "untrusted";
  refused.refused = "permission_denied: untrusted code needs gvisor";
  run_.tasks[0].walk.push_back(refused);
  auto got = Judge();
  EXPECT_EQ(got["untrusted-discarded"], "skip");
  EXPECT_NE(Reason("untrusted-discarded").find("refused"), std::string::npos);
}

// PROD-5 (kind fresh_vs_revert, the pool scenario's fresh-per-task): both ways must give a clean
// sandbox, and delete-and-create is timed against revert.
class FreshTest : public PoolTaskTest {
 protected:
  FreshTest() : PoolTaskTest("fresh-per-task", {"tenants", "trust", "revert", "destroy"}) {}
  static Step Op(double s) {
    Step st;
    st.wall_seconds = s;
    return st;
  }
  void Rounds(int n, const std::string& fresh_survivors = "", double create_s = 0.02,
              const std::string& planted = "\"tmp-file\"") {
    TaskRecord& t = Task();
    t.task = Exec("ready\n");
    for (int i = 0; i < n; ++i) {
      TaskRecord::FreshRound r;
      const std::string plant = "{\"planted\":[" + planted + "],\"not_planted\":{},\"port\":0}\n";
      r.plant_revert = Exec(plant);
      r.revert = Op(0.005);
      r.check_revert = Exec("{\"survivors\":[],\"checked\":[\"tmp-file\"]}\n");
      r.plant_fresh = Exec(plant);
      r.destroy = Op(0.002);
      r.create = Op(create_s);
      r.check_fresh =
          Exec("{\"survivors\":[" + fresh_survivors + "],\"checked\":[\"tmp-file\"]}\n");
      t.fresh.push_back(r);
    }
  }
  std::pair<std::string, std::string> Judge() { return JudgeCheck("pool/fresh-per-task"); }
};

TEST_F(FreshTest, BothWaysCleanPassesWithTheFigures) {
  Rounds(3);
  auto [outcome, reason] = Judge();
  EXPECT_EQ(outcome, "pass") << reason;
  EXPECT_NE(reason.find("destroy + create + first request p50 0.032 s"), std::string::npos)
      << reason;
}

TEST_F(FreshTest, ADestroyThatKeepsTheSandboxFails) {
  Rounds(3, "\"home-file\",\"process\"");
  auto [outcome, reason] = Judge();
  EXPECT_EQ(outcome, "fail");
  EXPECT_NE(reason.find("in the NEW sandbox) the sandbox still shows home-file, process"),
            std::string::npos)
      << reason;
}

TEST_F(FreshTest, SlowerThanTheBoundFailsAndNothingPlantedCannotPass) {
  Rounds(3, "", 45.0);
  EXPECT_EQ(Judge().first, "fail");
  Task().fresh.clear();
  Rounds(1, "", 0.02, "");
  auto [outcome, reason] = Judge();
  EXPECT_EQ(outcome, "fail");
  EXPECT_NE(reason.find("nothing was planted"), std::string::npos) << reason;
}

// kind pool_grows (POOL-6): bursts of pooled runs, each run warm when its sandbox's PID 1
// started before the harness's call.
class GrowsTest : public PoolTaskTest {
 protected:
  GrowsTest() : PoolTaskTest("grows", {}) {}
  // One burst per entry: `size` runs of 0.02 s each, the first `warm` of them in a sandbox whose
  // PID 1 had run 0.35 s when the probe looked, the others 0.01 s.
  void Bursts(const std::vector<int>& warm, int size = 6) {
    TaskRecord& t = Task();
    t.task = Exec("{}\n");
    for (size_t k = 0; k < warm.size(); ++k) {
      std::vector<Step> burst;
      for (int i = 0; i < size; ++i) {
        const double age = i < warm[k] ? 0.35 : 0.01;
        burst.push_back(Exec(fmt::format("{{\"instance\":{{\"boot_id\":\"b\",\"mnt\":{},"
                                         "\"init_age_s\":{}}}}}\n",
                                         k * 100 + static_cast<size_t>(i), age),
                             0.02));
      }
      t.bursts.push_back(burst);
    }
  }
  std::pair<std::string, std::string> Judge() { return JudgeCheck("pool/size-adapts"); }
};

TEST_F(GrowsTest, APoolThatFollowsDemandPasses) {
  Bursts({1, 2, 3, 3, 4});
  auto [outcome, reason] = Judge();
  EXPECT_EQ(outcome, "pass") << reason;
  EXPECT_NE(reason.find("2 of the second burst warm, up to 4 of a later one"), std::string::npos)
      << reason;
  EXPECT_NE(reason.find("1/6, 2/6, 3/6, 3/6, 4/6"), std::string::npos) << reason;
}

TEST_F(GrowsTest, APoolThatServesAWholeBurstPasses) {
  Bursts({6, 6, 6, 6, 6});
  EXPECT_EQ(Judge().first, "pass");
}

TEST_F(GrowsTest, AFixedPoolFailsWhateverItsSize) {
  Bursts({0, 1, 1, 1, 1});  // a shelf of one, made on first use
  auto [outcome, reason] = Judge();
  EXPECT_EQ(outcome, "fail") << reason;
  EXPECT_NE(reason.find("1 of the second burst warm and never more"), std::string::npos) << reason;
  Task().bursts.clear();
  Bursts({3, 3, 3, 2, 3});  // three, from the start
  EXPECT_EQ(Judge().first, "fail");
}

TEST_F(GrowsTest, NoWarmRunIsASkipAndNoPooledRunsIsASkipWithTheReason) {
  Bursts({0, 0, 0, 0, 0});
  auto [outcome, reason] = Judge();
  EXPECT_EQ(outcome, "skip");
  EXPECT_NE(reason.find("no pooled run was served warm"), std::string::npos) << reason;
  Task().bursts.clear();
  Task().bursts_note = "no pooled one-shot runs: UNSUPPORTED: exit 64";
  std::tie(outcome, reason) = Judge();
  EXPECT_EQ(outcome, "skip");
  EXPECT_NE(reason.find("exit 64"), std::string::npos) << reason;
}

TEST_F(GrowsTest, OnlyABootTimeIsASkip) {
  // gVisor's sandboxes show neither a boot_id nor a mount namespace; restored from one
  // checkpoint they all show its boot time, so every run would look warm.
  Bursts({6, 6, 6, 6, 6});
  for (auto& burst : Task().bursts) {
    for (auto& run : burst)
      run.answer.stdout_text = "{\"instance\":{\"init_age_s\":5,\"booted_unix\":500.0}}\n";
  }
  auto [outcome, reason] = Judge();
  EXPECT_EQ(outcome, "skip") << reason;
  EXPECT_NE(reason.find("cannot tell a warm sandbox from a new one"), std::string::npos) << reason;
}

TEST_F(GrowsTest, RunsWithoutAPid1AgeCannotPass) {
  Bursts({1, 2, 3, 4, 5});
  for (auto& burst : Task().bursts) {
    for (size_t i = 0; i < 3; ++i) burst[i].answer.stdout_text = "{\"instance\":{}}\n";
  }
  auto [outcome, reason] = Judge();
  EXPECT_EQ(outcome, "error") << reason;
  EXPECT_NE(reason.find("15 of 30 pooled runs showed no PID 1 age"), std::string::npos) << reason;
  Task().bursts.clear();
  Bursts({1, 2, 3, 4, 5});
  // A PID 1 older than a slow call only by less than the call took is not warm.
  for (auto& burst : Task().bursts) {
    for (auto& run : burst) run.wall_seconds = 0.5;
  }
  EXPECT_EQ(Judge().first, "skip");
  Task().bursts.clear();
  Bursts({1, 2});
  EXPECT_EQ(Judge().first, "error");
}

}  // namespace
}  // namespace sandcheck
