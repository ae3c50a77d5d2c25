// Bounded helper runs: output captured, deadline enforced on the whole process group.
#include "common/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

namespace sandcheck {
namespace {

using Clock = std::chrono::steady_clock;

TEST(Subprocess, StdinStdoutStderrExit) {
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", "cat; echo oops >&2; exit 3"};
  o.stdin_data = "{\"a\":1}\n";
  auto r = RunSubprocess(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->timed_out);
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->out, "{\"a\":1}\n");
  EXPECT_EQ(r->err, "oops\n");
}

TEST(Subprocess, ExtraEnvironment) {
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", "printf %s \"$SANDCHECK_PROTOCOL\""};
  o.extra_env["SANDCHECK_PROTOCOL"] = "1";
  auto r = RunSubprocess(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out, "1");
}

TEST(Subprocess, TimeoutKillsTheWholeGroup) {
  char tmpl[] = "/tmp/sandcheck-subprocess-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string pidfile = std::string(tmpl) + "/pid";
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", "sleep 100 & echo $! > " + pidfile + "; wait"};
  // The shell must have started the sleep and written its pid before the deadline, or there is
  // nothing to check: a slow machine gets another try with a longer deadline.
  pid_t bg = 0;
  for (double timeout = 0.5; bg <= 0 && timeout <= 16; timeout *= 2) {
    std::remove(pidfile.c_str());
    o.timeout_s = timeout;
    auto t0 = Clock::now();
    auto r = RunSubprocess(o);
    double took = std::chrono::duration<double>(Clock::now() - t0).count();
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->timed_out);
    EXPECT_LT(took, timeout + 30.0) << "the deadline did not end it (the sleep lasts 100 s)";
    std::ifstream(pidfile) >> bg;
  }
  ASSERT_GT(bg, 0);
  // The background sleep was in the group: it is gone (once killed, init adopts and reaps it:
  // wait for that, up to 30 s; a survivor never goes).
  bool gone = false;
  for (auto deadline = Clock::now() + std::chrono::seconds(30); !gone;) {
    gone = ::kill(bg, 0) != 0;
    if (gone || Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "pid " << bg << " survived the timeout";
  std::remove(pidfile.c_str());
  ::rmdir(tmpl);
}

TEST(Subprocess, DaemonHoldingStdoutDoesNotHang) {
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", "echo '{}'; sleep 30 & exit 0"};
  o.timeout_s = 10;
  auto t0 = Clock::now();
  auto r = RunSubprocess(o);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->timed_out);
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->out, "{}\n");
  // Returned without waiting for the daemon (30 s) or the deadline (10 s).
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 8.0);
}

TEST(Subprocess, LargeOutputAndMissingProgram) {
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", "head -c 3000000 /dev/zero"};
  auto r = RunSubprocess(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out.size(), 3000000u);
  o.argv = {"/nonexistent/adapter", "info"};
  auto missing = RunSubprocess(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), sbx::Code::kNotFound);
}

TEST(Subprocess, SignalIsReported) {
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", "kill -9 $$"};
  auto r = RunSubprocess(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->term_signal, SIGKILL);
  EXPECT_EQ(r->exit_code, -1);
}

}  // namespace
}  // namespace sandcheck
