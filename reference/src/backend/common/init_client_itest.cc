// sbx-init in agent mode (the in-sandbox agent of crun/runc containers, issue 16) refuses to
// serve commands unless a seccomp filter is already in force: its commands inherit the
// container's filter and load none of their own, so an agent started without one would run
// tools unfiltered. The serving path itself is tested through real containers (oci_itest:
// PPid 1, the agent out of a tool's reach) and native sandboxes (native_itest).
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <string>

#include "backend/common/init_client.h"

namespace sbx::backend {
namespace {

std::string InitPath() {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "";
  std::string dir(exe, static_cast<size_t>(n));
  dir = dir.substr(0, dir.rfind('/'));
  return dir + "/../bin/sbx-init";
}

// Starts `sbx-init --agent` as PID 1 of a new PID namespace with its control socket on fd 3,
// under an allow-everything seccomp filter or none. Returns the client and the helper's pid.
InitClient StartAgent(bool with_filter, pid_t* helper) {
  int sv[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  std::string init = InitPath();
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);  // only the test holds the runtime's end: its close must reach the agent
    if (unshare(CLONE_NEWPID) != 0) _exit(90);
    pid_t agent = fork();
    if (agent == 0) {
      if (with_filter) {
        struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
        struct sock_fprog prog = {1, &allow};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(91);
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) _exit(92);
      }
      if (dup2(sv[1], 3) != 3) _exit(93);
      syscall(SYS_close_range, 4U, ~0U, 0U);
      execl(init.c_str(), init.c_str(), "--agent", static_cast<char*>(nullptr));
      _exit(94);
    }
    close(sv[1]);
    int st = 0;
    waitpid(agent, &st, 0);
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  }
  close(sv[1]);
  *helper = pid;
  return InitClient(host::UniqueFd(sv[0]), 1000, 1000);
}

class AgentMode : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "LOUD SKIP: a PID namespace needs root";
    if (access(InitPath().c_str(), X_OK) != 0) FAIL() << "no sbx-init at " << InitPath();
  }
};

TEST_F(AgentMode, RefusesToServeWithoutASeccompFilter) {
  pid_t helper = -1;
  InitClient c = StartAgent(/*with_filter=*/false, &helper);
  Status ready = c.WaitReady(10);
  EXPECT_FALSE(ready.ok());
  EXPECT_NE(ready.message().find("agent mode needs the container's seccomp filter"),
            std::string::npos)
      << ready.ToString();
  int st = 0;
  ASSERT_EQ(waitpid(helper, &st, 0), helper);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 127) << "exit status " << st;
}

TEST_F(AgentMode, ServesUnderAFilterAndExitsWhenTheRuntimeGoes) {
  pid_t helper = -1;
  InitClient c = StartAgent(/*with_filter=*/true, &helper);
  Status ready = c.WaitReady(10);
  ASSERT_TRUE(ready.ok()) << ready.ToString();
  // The runtime's end closes (a dead runtime): the agent, PID 1, exits, ending its namespace.
  c.Close();
  int st = 0;
  ASSERT_EQ(waitpid(helper, &st, 0), helper);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "exit status " << st;
}

}  // namespace
}  // namespace sbx::backend
