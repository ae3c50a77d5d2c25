// Helpers for the integration tests of every backend (backend/<name>/*_itest.cc): one runtime
// per test binary and the reason a backend cannot be tested here (BackendEnv), host-side views
// (cgroup files, the OCI runtime's own container list), the leak census (leak_census.h), a helper
// child process (HelperChild) and small statistics.
// Tests only.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backend/common/leak_census.h"
#include "sbx/runtime.h"

namespace sbx::backendtest {

namespace fs = std::filesystem;

// One runtime per test binary, opened once for all its tests, and why `backend` cannot be
// tested here: not root, the runtime does not open, or the backend's probe failed (the reason
// the runtime's info gives). Register it once per binary:
//   const auto* const kEnv = ::testing::AddGlobalTestEnvironment(
//       new BackendEnv("wasm", "it runs in the native isolation"));
// and skip with SBX_SKIP_UNLESS_BACKEND_RUNS in the fixture's SetUp.
class BackendEnv : public ::testing::Environment {
 public:
  BackendEnv(std::string backend, std::string why_root)
      : backend_(std::move(backend)), why_root_(std::move(why_root)) {}
  static Runtime* rt() { return rt_.get(); }
  static const std::string& skip() { return skip_; }
  void SetUp() override {
    if (geteuid() != 0) {
      skip_ = "LOUD SKIP: the " + backend_ + " backend needs root (" + why_root_ + ")";
      return;
    }
    auto rt = Runtime::Open(RuntimeOptions{});
    if (!rt.ok()) {
      skip_ = "LOUD SKIP: cannot open the runtime: " + rt.status().ToString();
      return;
    }
    rt_ = std::move(rt).value();
    nlohmann::json info = rt_->Info();
    if (info["unsupported"].contains(backend_)) {
      skip_ = "LOUD SKIP: the " + backend_ +
              " backend cannot run here: " + info["unsupported"][backend_].get<std::string>();
    }
  }
  void TearDown() override { rt_.reset(); }

 private:
  std::string backend_, why_root_;
  static inline std::unique_ptr<Runtime> rt_;
  static inline std::string skip_;
};

// In a fixture's SetUp: skip the test where the backend cannot run, or fail it when the
// environment variable `must_work` (e.g. "SBX_WASM_MUST_WORK") is set.
#define SBX_SKIP_UNLESS_BACKEND_RUNS(must_work)                                     \
  do {                                                                              \
    if (!::sbx::backendtest::BackendEnv::skip().empty()) {                          \
      if (std::getenv(must_work)) FAIL() << ::sbx::backendtest::BackendEnv::skip(); \
      GTEST_SKIP() << ::sbx::backendtest::BackendEnv::skip();                       \
    }                                                                               \
  } while (0)

// The calls every backend's fixture makes, on `rt_` (set in the fixture's SetUp) and its backend:
//   class Wasm : public backendtest::BackendTest {
//    protected:
//     Wasm() : BackendTest("wasm") {}
//     void SetUp() override { SBX_SKIP_UNLESS_BACKEND_RUNS("SBX_WASM_MUST_WORK"); rt_ = Env::rt();
//     }
//   };
class BackendTest : public ::testing::Test {
 protected:
  explicit BackendTest(std::string backend) : backend_(std::move(backend)) {}

  // A one-shot run of `cmd` (on `backend`, or this fixture's).
  ExecResult Run(const std::string& cmd, Limits limits = {}, double timeout = 30,
                 const std::string& backend = "") {
    ExecRequest req;
    req.sandbox.backend = backend.empty() ? backend_ : backend;
    req.sandbox.limits = limits;
    req.exec.command = cmd;
    req.exec.timeout_s = timeout;
    return rt_->Run(req);
  }
  // A sandbox of this fixture's backend ("" after a failed expectation).
  std::string Create(Limits limits = {}, EgressPolicy egress = {},
                     std::map<std::string, std::string> hosts = {}) {
    auto id = rt_->Create(
        SandboxSpec{.backend = backend_, .limits = limits, .egress = egress, .hosts = hosts});
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : "";
  }
  ExecResult Exec(const std::string& id, const std::string& cmd, double timeout = 30,
                  double grace = 1) {
    auto r = rt_->Exec(id, ExecSpec{.command = cmd, .timeout_s = timeout, .grace_s = grace});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : ExecResult{};
  }
  // The revert's seconds (-1 after a failed expectation).
  double RevertSeconds(const std::string& id) {
    auto s = rt_->Revert(id);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : -1;
  }

  std::string backend_;
  Runtime* rt_ = nullptr;
};

inline std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Output of a host command (for `crun list` and the like).
inline std::string Capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

// Containers the OCI runtime `binary` knows below every state dir of ours (root `sub`).
inline size_t ContainersListed(const std::string& binary, const std::string& sub) {
  size_t n = 0;
  for (const std::string& d : StateDirsOf(getpid())) {
    std::string root = d + "/" + sub;
    if (!fs::exists(root)) continue;
    std::string out = Capture(binary + " --root " + root + " list 2>/dev/null");
    std::istringstream is(out);
    std::string line;
    bool header = true;
    while (std::getline(is, line)) {
      if (header) {
        header = false;
        continue;
      }
      if (!line.empty()) ++n;
    }
  }
  return n;
}

// The tasks (threads) in cgroup directory `dir` and every cgroup below it, from the kernel's
// own lists (`tasks` in v1, `cgroup.threads` in v2): an exact count of what exists. Not
// pids.current: the pids controller charges a fork before it checks pids.max and takes the
// charge back when the fork is refused (kernel/cgroup/pids.c, pids_try_charge), so a sampler
// reads max+1 for an instant while the limit holds (seen: 65 under pids.max 64 in a jailed soak).
inline long CountTasks(const std::string& dir) {
  long n = 0;
  auto count = [&n](const fs::path& d) {
    for (const char* f : {"tasks", "cgroup.threads"}) {
      std::ifstream in(d / f);
      if (!in) continue;
      for (std::string line; std::getline(in, line);) n += line.empty() ? 0 : 1;
      return;
    }
  };
  count(dir);
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec)) count(it->path());
  }
  return n;
}

// The directory of cgroup `name` in a v1 hierarchy (searched below it), or "".
inline std::string FindCgroup(const std::string& controller, const std::string& name) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator("/sys/fs/cgroup/" + controller, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec) && it->path().filename() == name) return it->path();
  }
  return "";
}

// This test binary run again as a helper child that holds sandboxes until it is killed (the
// reaper's tests): only the test `test` (its gtest name), with `env` ("NAME=value") added to the
// environment. Start returns once the child printed "ready <pid>" on stdout, false if it ended
// first. The destructor kills (SIGKILL) and reaps it if Kill did not.
class HelperChild {
 public:
  HelperChild() = default;
  HelperChild(const HelperChild&) = delete;
  HelperChild& operator=(const HelperChild&) = delete;
  ~HelperChild() { Kill(); }

  bool Start(const std::string& test, std::vector<std::string> env) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return false;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::string exe = fs::read_symlink("/proc/self/exe");
    std::string filter = "--gtest_filter=" + test;
    char* argv[] = {exe.data(), filter.data(), nullptr};
    std::vector<char*> envp;
    for (char** e = environ; *e; ++e) envp.push_back(*e);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    int rc = posix_spawn(&pid_, exe.c_str(), &fa, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    if (rc != 0) {
      close(out[0]);
      pid_ = -1;
      return false;
    }
    out_ = fdopen(out[0], "r");
    char line[256];
    while (out_ && fgets(line, sizeof line, out_)) {
      if (std::string(line).rfind("ready ", 0) == 0) return true;
    }
    return false;
  }
  pid_t pid() const { return pid_; }
  void Kill() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      int status;
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
    }
    if (out_) fclose(out_);
    out_ = nullptr;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
};

// Samples `fn` (returning a number) every `period` on a thread until stopped; keeps the max.
class PeakWatcher {
 public:
  PeakWatcher(std::function<long()> fn, std::chrono::milliseconds period)
      : thread_([this, fn, period] {
          while (!stop_) {
            peak_ = std::max(peak_.load(), fn());
            std::this_thread::sleep_for(period);
          }
        }) {}
  ~PeakWatcher() { Stop(); }
  long Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return peak_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<long> peak_{0};
  std::thread thread_;
};

inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// "cpu_seconds X" printed by sbx-cpu (the CPU time read INSIDE the sandbox).
inline double InsideCpuSeconds(const std::string& out) {
  auto pos = out.find("cpu_seconds ");
  return pos == std::string::npos ? -1 : std::atof(out.c_str() + pos + 12);
}

}  // namespace sbx::backendtest
