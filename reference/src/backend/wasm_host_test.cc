// The wasm module host (reference/wasm/, docs/wasm.md) run directly, outside any sandbox: its
// WASI layer and its command handling. Every escape a module can try out of the preopened
// directory must fail, and the limits it enforces itself must end the run the way the backend
// reads them. The fixture module is fixtures/wasm/sbx_wasm_tools.c, compiled ahead of time
// into build/tools/sbx-wasm-host-tools. Without wabt and wasi-libc it is not built: a loud skip,
// a failure with SBX_WASM_MUST_WORK=1 (ci/test).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "backend/oci_spawn.h"

namespace sbx::backend {
namespace {

namespace fs = std::filesystem;

std::string HostPath() {
  return (fs::canonical("/proc/self/exe").parent_path().parent_path() / "tools" /
          "sbx-wasm-host-tools")
      .string();
}

class WasmHost : public ::testing::Test {
 protected:
  void SetUp() override {
    host_ = HostPath();
    if (access(host_.c_str(), X_OK) != 0) {
      if (std::getenv("SBX_WASM_MUST_WORK")) FAIL() << "no wasm host at " << host_;
      GTEST_SKIP() << "LOUD SKIP: no wasm host at " << host_ << " (needs wabt and wasi-libc)";
    }
    char tmpl[] = "/tmp/wasm-host-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    work_ = root_ + "/work";
    fs::create_directory(work_);
    // What lies just outside the preopened directory: an escape would read or make these.
    std::ofstream(root_ + "/secret") << "outside\n";
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }

  RunOutput Run(const std::string& command, std::vector<std::string> extra = {}) {
    SpawnPlan plan;
    plan.argv = {host_};
    plan.argv.insert(plan.argv.end(), extra.begin(), extra.end());
    for (const char* a : {"--dir", work_.c_str(), "-c", command.c_str()}) plan.argv.push_back(a);
    auto out = RunCommand(plan, 30);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? *out : RunOutput{};
  }

  std::string host_, root_, work_;
};

bool Exited(const RunOutput& o, int code) {
  return WIFEXITED(o.status) && WEXITSTATUS(o.status) == code;
}

TEST_F(WasmHost, RunsACommandLineWithQuotesAndNoShell) {
  auto o = Run("echo one 'two words' \"three\" fo\\ ur");
  EXPECT_TRUE(Exited(o, 0)) << o.Describe();
  EXPECT_EQ(o.out, "one two words three fo ur\n");
  for (const char* shell : {"echo a | cat", "echo a > /work/f", "true; true", "echo $HOME",
                            "echo `id`", "sleep 1 &"}) {
    o = Run(shell);
    EXPECT_TRUE(Exited(o, 127)) << shell << ": " << o.Describe();
    EXPECT_NE(o.err.find("not a shell"), std::string::npos) << shell << ": " << o.err;
  }
  EXPECT_FALSE(fs::exists(work_ + "/f"));
}

TEST_F(WasmHost, TheCommandAndItsEnvironmentComeOnTheScriptDescriptor) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  std::string script = "export GREETING='it'\\''s here'\nexport EMPTY=''\nenv";
  ASSERT_EQ(write(p[1], script.data(), script.size()), static_cast<ssize_t>(script.size()));
  close(p[1]);
  SpawnPlan plan{.argv = {host_, "--dir", work_, "--script-fd", "3"}};
  plan.extra_fds = {{p[0], 3}};
  auto out = RunCommand(plan, 30);
  close(p[0]);
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(Exited(*out, 0)) << out->Describe();
  EXPECT_NE(out->out.find("GREETING=it's here\n"), std::string::npos) << out->out;
  EXPECT_NE(out->out.find("EMPTY=\n"), std::string::npos) << out->out;
  // A pre-spawned host that is dropped (EOF before any command) exits quietly.
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  close(p[1]);
  plan.extra_fds = {{p[0], 3}};
  out = RunCommand(plan, 30);
  close(p[0]);
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(Exited(*out, 0)) << out->Describe();
  EXPECT_EQ(out->err, "");
}

TEST_F(WasmHost, FilesLiveInTheOnePreopenedDirectory) {
  EXPECT_TRUE(Exited(Run("write /work/a.txt 5"), 0));
  EXPECT_TRUE(Exited(Run("write sub.txt 3"), 0));  // relative to /work
  std::ifstream in(work_ + "/a.txt");
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "xxxxx");
  auto o = Run("cat /work/a.txt");
  EXPECT_EQ(o.out, "xxxxx");
  o = Run("count");
  EXPECT_EQ(o.out, "2\n");
  o = Run("ls /work");
  EXPECT_NE(o.out.find("a.txt\n"), std::string::npos);
}

TEST_F(WasmHost, EveryWayOutOfWorkIsRefused) {
  // The fixture tries absolute paths, `..`, /proc, and absolute and relative symlinks out (and
  // creating files and directories past /work): each must fail.
  auto o = Run("escape");
  EXPECT_TRUE(Exited(o, 0)) << o.out << o.err;
  EXPECT_NE(o.out.find("no way out"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("LEAK"), std::string::npos) << o.out;
  EXPECT_FALSE(fs::exists(root_ + "/escape-marker"));
  EXPECT_FALSE(fs::exists(root_ + "/escape-dir"));
  // A symlink planted by someone else (in the image or by an earlier tool) does not lead out.
  fs::create_symlink(root_ + "/secret", work_ + "/planted");
  fs::create_symlink("../secret", work_ + "/planted-rel");
  for (const char* p : {"cat /work/planted", "cat /work/planted-rel", "cat ../secret",
                        "cat /work/../secret", "cat /etc/passwd"}) {
    o = Run(p);
    EXPECT_TRUE(Exited(o, 1)) << p << ": " << o.Describe();
    EXPECT_EQ(o.out.find("outside"), std::string::npos) << p << ": " << o.out;
  }
}

TEST_F(WasmHost, NoSockets) {
  auto o = Run("wget http://203.0.113.7/");
  EXPECT_TRUE(Exited(o, 1)) << o.Describe();
  EXPECT_NE(o.err.find("no network"), std::string::npos) << o.err;
}

TEST_F(WasmHost, GrowingPastTheMemoryCapEndsTheRunBySigkill) {
  // 100 pages = 6.25 MiB: 20 MiB cannot fit. The host kills itself: the one death the backend
  // reads as resource_exceeded, and one no module can cause otherwise.
  auto o = Run("sbx-memhog 20", {"--max-pages", "100"});
  EXPECT_TRUE(WIFSIGNALED(o.status) && WTERMSIG(o.status) == SIGKILL) << o.Describe();
  EXPECT_NE(o.err.find("memory limit"), std::string::npos) << o.err;
  o = Run("sbx-memhog 4", {"--max-pages", "100"});
  EXPECT_TRUE(Exited(o, 0)) << o.Describe();
  o = Run("grow 100000", {"--max-pages", "100"});
  EXPECT_TRUE(WIFSIGNALED(o.status) && WTERMSIG(o.status) == SIGKILL) << o.Describe();
  // Without a cap, the module's own maximum refuses a huge grow: the module sees -1.
  o = Run("grow 100000");
  EXPECT_TRUE(Exited(o, 1)) << o.Describe();
  EXPECT_EQ(o.out, "-1\n");
}

TEST_F(WasmHost, ATrapEndsTheRunWithItsReason) {
  auto o = Run("trap");
  EXPECT_TRUE(Exited(o, 134)) << o.Describe();
  EXPECT_NE(o.err.find("wasm: trap:"), std::string::npos) << o.err;
  o = Run("no-such-tool");
  EXPECT_TRUE(Exited(o, 127)) << o.Describe();
}

// In-engine interruption (wasm_host_main.c): the deadline, the CPU budget and SIGTERM trap the
// running instance; the host says why and dies by the signal that tells the backend.
bool KilledBy(const RunOutput& o, int sig) { return WIFSIGNALED(o.status) && WTERMSIG(o.status) == sig; }

TEST_F(WasmHost, TheDeadlineInterruptsAnEndlessLoopInTheEngine) {
  auto o = Run("spin", {"--deadline-ms", "200"});
  EXPECT_TRUE(KilledBy(o, SIGALRM)) << o.Describe();
  EXPECT_NE(o.err.find("wasm: interrupted: the deadline of 200 ms passed"), std::string::npos) << o.err;
  // The backend's per-command line sets it too, and wins over the flag.
  o = Run("#sbx-wasm deadline_ms=150 cpu_ms=0\nspin", {"--deadline-ms", "100000"});
  EXPECT_TRUE(KilledBy(o, SIGALRM)) << o.Describe();
  EXPECT_NE(o.err.find("deadline of 150 ms"), std::string::npos) << o.err;
  // A command that ends in time is not touched.
  o = Run("#sbx-wasm deadline_ms=20000 cpu_ms=20000\necho fine");
  EXPECT_TRUE(Exited(o, 0)) << o.Describe();
  EXPECT_EQ(o.out, "fine\n");
}

TEST_F(WasmHost, TheCpuBudgetInterruptsInTheEngineByCpuTime) {
  struct rusage before{}, after{};
  getrusage(RUSAGE_CHILDREN, &before);
  auto o = Run("spin", {"--cpu-ms", "200"});
  getrusage(RUSAGE_CHILDREN, &after);
  EXPECT_TRUE(KilledBy(o, SIGXCPU)) << o.Describe();
  EXPECT_NE(o.err.find("the CPU budget of 200 ms is spent"), std::string::npos) << o.err;
  // Counted on the CPU clock: the child used at least the budget.
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  double cpu = secs(after.ru_utime) + secs(after.ru_stime) - secs(before.ru_utime) -
               secs(before.ru_stime);
  EXPECT_GE(cpu, 0.19);
  // A sleeping module spends no CPU: the deadline, not the budget, ends it.
  o = Run("sleep 30", {"--cpu-ms", "50", "--deadline-ms", "300"});
  EXPECT_TRUE(KilledBy(o, SIGALRM)) << o.Describe();
}

TEST_F(WasmHost, AnInterruptionInsideAnImportWaitsForItsEndAndABlockingOneGivesUp) {
  // `sleep 30` sits in poll_oneoff (a WASI import): the deadline is deferred to the import's
  // end, and the import's sleep gives up at once, so the run ends at the deadline, not in 30 s.
  auto t0 = std::chrono::steady_clock::now();
  auto o = Run("sleep 30", {"--deadline-ms", "200"});
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(KilledBy(o, SIGALRM)) << o.Describe();
  EXPECT_LT(s, 20) << "the sleep inside the import was not cut short";
  // A module's own exit code is never read as an interruption: only a signal is.
  o = Run("#sbx-wasm deadline_ms=20000 cpu_ms=0\nfalse");
  EXPECT_TRUE(Exited(o, 1)) << o.Describe();
}

TEST_F(WasmHost, SigtermInterruptsTheRunningInstance) {
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(out[1], 2);
    execl(host_.c_str(), host_.c_str(), "--dir", work_.c_str(), "-c", "spin say", nullptr);
    _exit(127);
  }
  close(out[1]);
  // Wait for the event (the loop has begun), never for time.
  std::string seen;
  char buf[64];
  ssize_t n;
  while (seen.find("spinning\n") == std::string::npos && (n = read(out[0], buf, sizeof buf)) > 0)
    seen.append(buf, static_cast<size_t>(n));
  ASSERT_EQ(seen, "spinning\n");
  kill(pid, SIGTERM);
  while ((n = read(out[0], buf, sizeof buf)) > 0) seen.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_NE(seen.find("wasm: interrupted: terminated"), std::string::npos) << seen;
}

TEST_F(WasmHost, ABadSettingsLineIsRefused) {
  for (const char* bad : {"#sbx-wasm fuel=1\ntrue", "#sbx-wasm deadline_ms=ten\ntrue",
                          "#sbx-wasm deadline_ms=-5x\ntrue"}) {
    auto o = Run(bad);
    EXPECT_TRUE(Exited(o, 127)) << bad << ": " << o.Describe();
    EXPECT_NE(o.err.find("#sbx-wasm setting"), std::string::npos) << bad << ": " << o.err;
  }
}

TEST_F(WasmHost, MeasuresItsOwnInstantiation) {
  // NFR-3 where it happens (docs/performance.md): the figures are printed, not judged here.
  SpawnPlan plan{.argv = {host_, "--dir", work_, "--bench-instantiate", "20"}};
  auto out = RunCommand(plan, 30);
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(Exited(*out, 0)) << out->Describe();
  EXPECT_EQ(out->out.rfind("instantiate_us n=20 p50=", 0), 0u) << out->out;
}

}  // namespace
}  // namespace sbx::backend
