// Unit tests for process.h: output tails, exit statuses, timeouts that really kill, spawn
// failures reported as errors (not exit 127), and the child hook.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/process.h"

namespace sandcheck::adapter {
namespace {

std::unique_ptr<Supervisor> MakeSupervisor() {
  auto sup = Supervisor::Create(/*subreaper=*/false);
  EXPECT_TRUE(sup.ok()) << sup.status().ToString();
  return std::move(*sup);
}

TEST(TailBufferTest, KeepsOnlyTheEnd) {
  TailBuffer t(4);
  t.Append("ab", 2);
  t.Append("cdef", 4);
  EXPECT_EQ(t.data(), "cdef");
  t.Append("0123456789", 10);
  EXPECT_EQ(t.data(), "6789");
  EXPECT_EQ(t.total(), 16u);
}

TEST(ProcessTest, CapturesOutputAndExitCode) {
  auto sup = MakeSupervisor();
  auto r = adapter::Run(*sup, {"sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_EQ(r->exit_code(), 3);
  EXPECT_FALSE(r->success());
}

TEST(ProcessTest, SignalDeathIs128PlusSignal) {
  auto sup = MakeSupervisor();
  auto r = adapter::Run(*sup, {"sh", "-c", "kill -9 $$"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(WIFSIGNALED(r->wait_status));
  EXPECT_EQ(r->exit_code(), 137);
  EXPECT_NE(DescribeWaitStatus(r->wait_status).find("signal 9"), std::string::npos);
}

TEST(ProcessTest, TimeoutKillsTheChild) {
  auto sup = MakeSupervisor();
  auto start = Clock::now();
  auto r = adapter::Run(*sup, {"sleep", "30"}, RunOptions{.timeout_s = 0.2});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_LT(SecondsSince(start), 20.0);  // killed at its 0.2 s timeout, not after the 30 s sleep
  EXPECT_EQ(r->exit_code(), 137);
}

TEST(ProcessTest, MissingBinaryIsAnErrorNotExit127) {
  auto sup = MakeSupervisor();
  auto r = adapter::Run(*sup, {"/nonexistent/sandcheck-no-such-binary"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), sbx::Code::kUnsupported);
  EXPECT_NE(r.status().message().find("not installed"), std::string::npos);
}

TEST(ProcessTest, ChildHookRunsBeforeExecAndCanFail) {
  auto sup = MakeSupervisor();
  RunOptions opts;
  opts.child_hook = [] { return setenv("SANDCHECK_HOOK", "ran", 1) == 0 ? 0 : errno; };
  auto r = adapter::Run(*sup, {"sh", "-c", "echo $SANDCHECK_HOOK"}, opts);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out, "ran\n");
  opts.child_hook = [] { return EPERM; };
  auto failed = adapter::Run(*sup, {"true"}, opts);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), sbx::Code::kPermissionDenied);
}

TEST(ProcessTest, ChildHasAnEmptySignalMask) {
  // The supervisor blocks SIGCHLD/SIGTERM; a runtime started with them blocked would misbehave.
  auto sup = MakeSupervisor();
  auto r = adapter::Run(*sup, {"sh", "-c", "grep SigBlk /proc/self/status"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out, "SigBlk:\t0000000000000000\n");
}

TEST(ProcessTest, ExtraFdIsPlacedInTheChild) {
  auto sup = MakeSupervisor();
  auto p = MakePipe();
  ASSERT_TRUE(p.ok());
  SpawnSpec spec;
  spec.argv = {"sh", "-c", "echo via-fd-3 >&3"};
  spec.extra_fds = {{p->write.get(), 3}};
  auto pid = Spawn(spec);
  ASSERT_TRUE(pid.ok());
  p->write.Reset();
  TailBuffer tail;
  std::vector<Supervisor::Stream> streams;
  streams.push_back({std::move(p->read), &tail});
  int status = -1;
  EXPECT_EQ(sup->Wait(*pid, DeadlineIn(10), streams, -1, &status), Supervisor::Wake::kExited);
  sup->Drain(streams, DeadlineIn(30));  // ends at the pipe's EOF
  EXPECT_EQ(status, 0);
  EXPECT_EQ(tail.data(), "via-fd-3\n");
}

TEST(ProcessTest, OutputLargerThanThePipeDoesNotDeadlock) {
  auto sup = MakeSupervisor();
  auto r = adapter::Run(*sup, {"sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code(), 0);
  EXPECT_EQ(r->out.size(), 64u * 1024);
}

TEST(ProcessTest, SubreaperAdoptsADaemonisedGrandchild) {
  // What `runc create` does: the init outlives its parent; the adapter must be able to wait.
  auto sup = Supervisor::Create(/*subreaper=*/true);
  ASSERT_TRUE(sup.ok());
  auto r = adapter::Run(**sup, {"sh", "-c", "sleep 0.2 & echo $!"});
  ASSERT_TRUE(r.ok());
  pid_t grandchild = std::atoi(r->out.c_str());
  ASSERT_GT(grandchild, 1);
  std::vector<Supervisor::Stream> none;
  int status = -1;
  EXPECT_EQ((*sup)->Wait(grandchild, DeadlineIn(10), none, -1, &status), Supervisor::Wake::kExited);
  EXPECT_EQ(status, 0);
}

}  // namespace
}  // namespace sandcheck::adapter
