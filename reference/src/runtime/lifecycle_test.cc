// The lifecycle's logic with a fake backend (a test double of the layer below; the real one is
// exercised by native_itest.cc): stage order, timings, error mapping, destroy always runs.
#include "runtime/lifecycle.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace sbx {
namespace {

struct Journal {
  std::vector<std::string> calls;
};

class FakeSandbox : public backend::Sandbox {
 public:
  FakeSandbox(Journal* j, std::string id, StatusOr<ExecResult> answer)
      : j_(j), id_(std::move(id)), answer_(std::move(answer)) {}
  const std::string& id() const override { return id_; }
  SandboxState state() const override { return SandboxState::kRunning; }
  StatusOr<ExecResult> Exec(const ExecSpec& e) override {
    j_->calls.push_back("exec:" + e.command);
    if (answer_.ok()) {
      ExecResult r = *answer_;
      r.stages.inject_context = 0.001;
      r.stages.execute = 0.002;
      r.stages.collect = 0.003;
      return r;
    }
    return answer_.status();
  }
  StatusOr<double> Revert() override { return 0.0; }
  StatusOr<double> Suspend() override { return 0.0; }
  StatusOr<double> Resume() override { return 0.0; }
  Status PutFile(const std::string&, const std::string&, int) override { return Status::Ok(); }
  void Destroy(StageTimings* t) override {
    j_->calls.push_back("destroy");
    if (t) {
      t->destroy = 0.004;
      t->cleanup = 0.005;
    }
  }

 private:
  Journal* j_;
  std::string id_;
  StatusOr<ExecResult> answer_;
};

class FakeBackend : public backend::Backend {
 public:
  FakeBackend(Journal* j, Status create, StatusOr<ExecResult> answer)
      : j_(j), create_(std::move(create)), answer_(std::move(answer)) {}
  std::string name() const override { return "fake"; }
  Status Probe() override { return Status::Ok(); }
  std::vector<std::string> Features() const override { return {}; }
  StatusOr<std::unique_ptr<backend::Sandbox>> Create(const std::string& id, const SandboxSpec&,
                                                      StageTimings* t, backend::CreateMode mode) override {
    j_->calls.push_back(mode == backend::CreateMode::kOneShot ? "create:oneshot" : "create:other");
    if (!create_.ok()) return create_;
    t->allocate = 0.0005;
    t->initialize = 0.0006;
    return std::unique_ptr<backend::Sandbox>(new FakeSandbox(j_, id, answer_));
  }

 private:
  Journal* j_;
  Status create_;
  StatusOr<ExecResult> answer_;
};

ExecRequest Req(const std::string& cmd) {
  ExecRequest r;
  r.exec.command = cmd;
  return r;
}

TEST(Lifecycle, StagesRunInOrderAndAreAllTimed) {
  Journal j;
  ExecResult ok;
  ok.exit_code = 0;
  FakeBackend b(&j, Status::Ok(), ok);
  ExecResult r = RunOneShot(b, "sb1", Req("true"));
  EXPECT_EQ(j.calls, (std::vector<std::string>{"create:oneshot", "exec:true", "destroy"}));
  EXPECT_EQ(r.status, ExecStatus::kOk);
  EXPECT_EQ(r.backend, "fake");
  EXPECT_EQ(r.sandbox_id, "sb1");
  const StageTimings& s = r.stages;
  EXPECT_DOUBLE_EQ(s.allocate, 0.0005);
  EXPECT_DOUBLE_EQ(s.initialize, 0.0006);
  EXPECT_DOUBLE_EQ(s.inject_context, 0.001);
  EXPECT_DOUBLE_EQ(s.execute, 0.002);
  EXPECT_DOUBLE_EQ(s.collect, 0.003);
  EXPECT_DOUBLE_EQ(s.destroy, 0.004);
  EXPECT_DOUBLE_EQ(s.cleanup, 0.005);
}

TEST(Lifecycle, ProvisionFailureIsSandboxUnavailableAndNothingRuns) {
  Journal j;
  FakeBackend b(&j, Status(Code::kSandboxUnavailable, "no gvisor here"), ExecResult{});
  ExecResult r = RunOneShot(b, "sb2", Req("true"));
  EXPECT_EQ(j.calls, (std::vector<std::string>{"create:oneshot"}));
  EXPECT_EQ(r.status, ExecStatus::kSandboxUnavailable);
  EXPECT_EQ(r.state, SandboxState::kCrashed);
  EXPECT_EQ(r.reason, "no gvisor here");
  EXPECT_EQ(r.error_code, "sandbox_unavailable");
  EXPECT_LT(r.stages.execute, 0);  // a stage that did not run is not reported
}

TEST(Lifecycle, ASandboxDyingUnderTheCommandIsAToolErrorAndIsStillDestroyed) {
  Journal j;
  FakeBackend b(&j, Status::Ok(), Status(Code::kToolError, "sandbox init exited"));
  ExecResult r = RunOneShot(b, "sb3", Req("x"));
  EXPECT_EQ(j.calls.back(), "destroy");  // LC-7, LC-8 on every path
  EXPECT_EQ(r.status, ExecStatus::kToolError);
  EXPECT_EQ(r.state, SandboxState::kCrashed);
  EXPECT_EQ(r.error_code, "tool_error");
}

TEST(Lifecycle, LimitBreachesPassThroughWithTheirState) {
  Journal j;
  ExecResult oom;
  oom.status = ExecStatus::kResourceExceeded;
  oom.state = SandboxState::kCrashed;
  oom.error_code = "memory_limit";
  FakeBackend b(&j, Status::Ok(), oom);
  ExecResult r = RunOneShot(b, "sb4", Req("hog"));
  EXPECT_EQ(r.status, ExecStatus::kResourceExceeded);
  EXPECT_EQ(r.state, SandboxState::kCrashed);
  EXPECT_EQ(r.error_code, "memory_limit");
  EXPECT_EQ(j.calls.back(), "destroy");
}

TEST(Lifecycle, UnavailableResultKeepsToolErrorsApart) {
  EXPECT_EQ(UnavailableResult(Status(Code::kToolError, "x"), "native").status, ExecStatus::kToolError);
  EXPECT_EQ(UnavailableResult(Status(Code::kInvalidArgument, "bad backend"), "native").error_code,
            "invalid_argument");
}

}  // namespace
}  // namespace sbx
