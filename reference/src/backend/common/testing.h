// Helpers for the integration tests of every backend (backend/<name>/*_itest.cc): one runtime
// per test binary and the reason a backend cannot be tested here (BackendEnv), host-side views
// (cgroup files, leak census, the OCI runtime's own container list) and small statistics.
// Tests only.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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

// This process's runtime state directories (/run/sandcheck/<pid>-<hex>).
inline std::vector<std::string> OwnStateDirs() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/run/sandcheck", ec)) {
    if (e.path().filename().string().rfind(std::to_string(getpid()) + "-", 0) == 0) {
      out.push_back(e.path());
    }
  }
  return out;
}

// Containers the OCI runtime `binary` knows below every state dir of ours (root `sub`).
inline size_t ContainersListed(const std::string& binary, const std::string& sub) {
  size_t n = 0;
  for (const std::string& d : OwnStateDirs()) {
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

// Kernel objects visible from the host, for leak checks.
struct Census {
  size_t mounts = 0, cgroups = 0, children = 0, state_entries = 0, processes = 0;
  bool operator==(const Census&) const = default;
};

inline size_t CountDirsBelow(const fs::path& root) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec)) ++n;
  }
  return n;
}

// Only what this test process's runtimes made is counted (other runtimes may be running on the
// machine): mounts whose line names our state directory, cgroup directories named after our
// runtime ("sandcheck-<pid>-...", the runtime's parent; "sbx-<pid>-..." made by runc in the
// hierarchies the runtime does not use), processes whose command line contains `marker` (every
// crun/runc/runsc process and container of ours carries "sbx-<pid>-"), our children, and the
// entries of our state directories.
inline size_t CountOurDirs(const fs::path& root, const std::vector<std::string>& names) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    std::string p = it->path().string();
    for (const auto& name : names) {
      if (p.find(name) != std::string::npos) {
        ++n;
        break;
      }
    }
  }
  return n;
}

inline Census TakeCensus(const std::string& marker) {
  Census c;
  pid_t me = getpid();
  std::string state = "/run/sandcheck/" + std::to_string(me) + "-";
  std::istringstream mi(Slurp("/proc/self/mountinfo"));
  std::string line;
  while (std::getline(mi, line)) {
    if (line.find(state) != std::string::npos) ++c.mounts;
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat = Slurp(e.path() / "stat");
    size_t rp = stat.rfind(')');
    if (rp != std::string::npos) {
      std::istringstream is(stat.substr(rp + 2));
      char st;
      pid_t ppid;
      is >> st >> ppid;
      if (ppid == me) ++c.children;
    }
    if (!marker.empty()) {
      std::string cmd = Slurp(e.path() / "cmdline");
      if (cmd.find(marker) != std::string::npos) ++c.processes;
    }
  }
  std::vector<std::string> names = {"sandcheck-" + std::to_string(me) + "-",
                                    "sbx-" + std::to_string(me) + "-"};
  for (const auto& h : fs::directory_iterator("/sys/fs/cgroup", ec)) {
    if (h.is_directory(ec) && !h.is_symlink(ec)) c.cgroups += CountOurDirs(h.path(), names);
  }
  for (const std::string& d : OwnStateDirs()) c.state_entries += CountDirsBelow(d);
  return c;
}

inline std::ostream& operator<<(std::ostream& os, const Census& c) {
  return os << "{mounts " << c.mounts << ", cgroups " << c.cgroups << ", children " << c.children
            << ", state dirs " << c.state_entries << ", processes " << c.processes << "}";
}

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
