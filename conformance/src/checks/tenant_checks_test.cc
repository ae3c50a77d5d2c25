// kind foreign_refused (PROD-1, the pool scenario's other-tenant task): fabricated calls by other
// callers, judged from the owner's side. A refusal must also leave no trace; a target that says
// no and does it anyway fails, one that cannot take another caller at all is a skip.
#include <gtest/gtest.h>

#include "checks/pool_task_test_fixture.h"

namespace sandcheck {
namespace {

constexpr const char* kToken = "0123456789abcdef";

class ForeignTest : public PoolTaskTest {
 protected:
  ForeignTest() : PoolTaskTest("other-tenant", {"tenants"}) {}
  void SetUp() override {
    PoolTaskTest::SetUp();
    TaskRecord& t = Task();
    t.task = Exec("ready\n");
    t.foreign_token = kToken;
    t.foreign_plant = Exec(std::string(kToken) + "\n");
  }
  // One call by `caller`: refused or not, and what the owner saw after it.
  void Call(const std::string& caller, const std::string& op, bool refused, const std::string& look,
            const std::string& exec_out = "", const std::string& look_error = "") {
    TaskRecord::ForeignCall f;
    f.caller = caller;
    f.op = op;
    ForeignAnswer a;
    a.refused = refused;
    a.said = refused ? "HTTP 404: no sandbox" : "HTTP 200";
    if (!refused && op == "exec") a.exec = Exec(exec_out).answer;
    f.answer = a;
    f.call.emplace();
    f.look = Exec(look);
    f.look->error = look_error;
    Task().foreign.push_back(f);
  }
  void AllRefused() {
    const std::string clean = std::string(kToken) + "\nowner-looked\n";
    for (const char* who : {"tenant-b", ""}) {
      for (const char* op : {"exec", "revert", "destroy"}) Call(who, op, true, clean);
    }
  }
  std::pair<std::string, std::string> Judge() { return JudgeCheck("pool/other-tenant-refused"); }
};

TEST_F(ForeignTest, EveryCallRefusedAndTheOwnersSandboxIntactPasses) {
  AllRefused();
  auto [outcome, reason] = Judge();
  EXPECT_EQ(outcome, "pass") << reason;
  EXPECT_NE(reason.find("6 of 6 calls"), std::string::npos) << reason;
}

TEST_F(ForeignTest, ACarriedOutCallFailsEvenWithoutATrace) {
  const std::string clean = std::string(kToken) + "\nowner-looked\n";
  Call("tenant-b", "exec", false, clean, "nothing to see\n");
  auto [outcome, reason] = Judge();
  EXPECT_EQ(outcome, "fail");
  EXPECT_NE(reason.find("tenant tenant-b's exec on the owner's sandbox was carried out"),
            std::string::npos)
      << reason;
}

TEST_F(ForeignTest, ARefusalThatHappenedAnywayFailsOnTheOwnersEvidence) {
  // "Refused", yet the exec's mark is in /work: the target's word does not decide.
  Call("tenant-b", "exec", true, std::string(kToken) + "\nforeign-" + kToken + "\nowner-looked\n");
  auto [outcome, reason] = Judge();
  EXPECT_EQ(outcome, "fail");
  EXPECT_NE(reason.find("holds what that caller's exec wrote"), std::string::npos) << reason;
  // A revert that went through: the canary is gone (the foreign mark alone does not count as it).
  Task().foreign.clear();
  Call("tenant-b", "revert", true, std::string("foreign-") + kToken + "\nowner-looked\n");
  std::tie(outcome, reason) = Judge();
  EXPECT_EQ(outcome, "fail");
  EXPECT_NE(reason.find("the owner's canary is gone"), std::string::npos) << reason;
  // A destroy that went through: the owner's own exec fails.
  Task().foreign.clear();
  Call("", "destroy", true, "", "", "internal: HTTP 404: no sandbox");
  std::tie(outcome, reason) = Judge();
  EXPECT_EQ(outcome, "fail");
  EXPECT_NE(reason.find("a caller with no credential's destroy, the owner's own exec"),
            std::string::npos)
      << reason;
}

TEST_F(ForeignTest, AnExecThatReadTheCanaryFails) {
  Call("tenant-b", "exec", false, std::string(kToken) + "\nowner-looked\n",
       std::string(kToken) + "\n");
  auto [outcome, reason] = Judge();
  EXPECT_EQ(outcome, "fail");
  EXPECT_NE(reason.find("and 1 more"), std::string::npos) << reason;
}

TEST_F(ForeignTest, NoCallMadeIsASkipAndNoCanaryAnError) {
  TaskRecord::ForeignCall f;
  f.caller = "tenant-b";
  f.op = "exec";
  f.not_made = "the adapter does not offer the feature tenants";
  Task().foreign.push_back(f);
  auto [outcome, reason] = Judge();
  EXPECT_EQ(outcome, "skip");
  EXPECT_NE(reason.find("does not offer the feature tenants"), std::string::npos) << reason;
  AllRefused();
  Task().foreign_plant = Exec("");  // the canary never reached /work
  EXPECT_EQ(Judge().first, "error");
}

}  // namespace
}  // namespace sandcheck
