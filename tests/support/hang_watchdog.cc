// A watchdog linked into every integration test binary (CMakeLists.txt, sbx_test): when one
// test, or the global set-up or tear-down, has run for SBX_HANG_DUMP_S seconds (default 300,
// half of ci/test's ctest timeout), it writes to stderr what this process and every process
// below it is waiting for: per thread the state, the kernel function it sleeps in (wchan) and
// its kernel stack, then every thread's user stack from gdb (when gdb is installed). Then
// again every 120 s while the same phase lasts. It never ends the test: a slow test that
// finishes still passes, a hung one is killed by ctest's timeout as before, and its output
// (shown by --output-on-failure) now says where it hung. docs/testing.md "Hangs".
//
// Why: a hang in CI that does not reproduce here left nothing but "Timeout 600 s" behind.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  for (char& c : s)
    if (c == '\0') c = ' ';
  return s;
}

std::vector<int> Numbers(const std::string& dir) {
  std::vector<int> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      char* end = nullptr;
      long n = strtol(e->d_name, &end, 10);
      if (end != e->d_name && *end == '\0') out.push_back(static_cast<int>(n));
    }
    closedir(d);
  }
  return out;
}

// The state letter and parent of /proc/PID[/task/TID]/stat (after the comm's closing paren).
std::pair<char, int> StateAndParent(const std::string& stat_path) {
  std::string s = Slurp(stat_path);
  size_t p = s.rfind(')');
  if (p == std::string::npos || p + 4 >= s.size()) return {'?', -1};
  std::istringstream in(s.substr(p + 2));
  char state = '?';
  int ppid = -1;
  in >> state >> ppid;
  return {state, ppid};
}

// This process and every process below it, parents before children.
std::vector<int> Tree(int root) {
  std::multimap<int, int> children;
  for (int pid : Numbers("/proc")) {
    auto [state, ppid] = StateAndParent("/proc/" + std::to_string(pid) + "/stat");
    (void)state;
    children.emplace(ppid, pid);
  }
  std::vector<int> out{root};
  for (size_t i = 0; i < out.size(); ++i) {
    auto [a, b] = children.equal_range(out[i]);
    for (auto it = a; it != b; ++it) out.push_back(it->second);
  }
  return out;
}

void Say(const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t w = write(2, s.data() + off, s.size() - off);
    if (w <= 0) return;
    off += static_cast<size_t>(w);
  }
}

void DumpKernelSide(int self) {
  for (int pid : Tree(self)) {
    std::string base = "/proc/" + std::to_string(pid);
    auto [state, ppid] = StateAndParent(base + "/stat");
    std::ostringstream o;
    o << "-- process " << pid << " (parent " << ppid << ", state " << state
      << "): " << Trim(Slurp(base + "/cmdline")).substr(0, 300) << "\n";
    for (int tid : Numbers(base + "/task")) {
      std::string t = base + "/task/" + std::to_string(tid);
      auto [tstate, unused] = StateAndParent(t + "/stat");
      (void)unused;
      o << "   thread " << tid << " '" << Trim(Slurp(t + "/comm")) << "' state " << tstate
        << ", wchan " << Trim(Slurp(t + "/wchan")) << "\n";
      std::istringstream stack(Slurp(t + "/stack"));
      for (std::string line; std::getline(stack, line);) o << "      " << line << "\n";
    }
    Say(o.str());
  }
}

// Every thread's user stack, from gdb attached for a moment (bounded: 60 s).
void DumpUserStacks(int self) {
  std::string pid = std::to_string(self);
  std::vector<std::string> args = {"gdb", "-nx", "-batch", "-p", pid, "-ex", "thread apply all bt"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, 2, 1);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  pid_t gdb = -1;
  int rc = posix_spawnp(&gdb, "gdb", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    Say("hang watchdog: no user stacks (gdb could not start: " + std::string(strerror(rc)) + ")\n");
    return;
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int st = 0;
  while (waitpid(gdb, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      kill(gdb, SIGKILL);
      waitpid(gdb, &st, 0);
      Say("hang watchdog: gdb took over 60 s; killed\n");
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// The clock and its thread: never deleted (the thread waits on it until the process ends).
class Watch {
 public:
  Watch() {
    const char* env = getenv("SBX_HANG_DUMP_S");
    if (env && *env) limit_s_ = atoi(env);
    if (limit_s_ > 0) std::thread([this] { Loop(); }).detach();  // 0: off
  }
  void Arm(std::string what) {
    std::lock_guard lk(mu_);
    what_ = std::move(what);
    since_ = std::chrono::steady_clock::now();
    ++phase_;
    cv_.notify_all();
  }
  void Disarm() {
    std::lock_guard lk(mu_);
    what_.clear();
    ++phase_;
    cv_.notify_all();
  }

 private:
  void Loop() {
    std::unique_lock lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return !what_.empty(); });
      uint64_t phase = phase_;
      auto next = since_ + std::chrono::seconds(limit_s_);
      while (phase_ == phase) {
        if (cv_.wait_until(lk, next, [&] { return phase_ != phase; })) break;
        std::string what = what_;
        auto ran = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::steady_clock::now() - since_)
                       .count();
        lk.unlock();
        Say("\n=== hang watchdog: " + what + " has run " + std::to_string(ran) +
            " s (SBX_HANG_DUMP_S=" + std::to_string(limit_s_) +
            "); what this process and its children wait for:\n");
        DumpKernelSide(getpid());
        DumpUserStacks(getpid());
        Say("=== hang watchdog: end of dump\n");
        lk.lock();
        next = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      }
    }
  }

  int limit_s_ = 300;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string what_;
  std::chrono::steady_clock::time_point since_;
  uint64_t phase_ = 0;
};

// The listener GoogleTest owns (and deletes at exit): only forwards to the Watch.
class Watchdog : public ::testing::EmptyTestEventListener {
 public:
  explicit Watchdog(Watch* w) : w_(w) {}
  void OnEnvironmentsSetUpStart(const ::testing::UnitTest&) override {
    w_->Arm("the global set-up");
  }
  void OnEnvironmentsSetUpEnd(const ::testing::UnitTest&) override { w_->Disarm(); }
  void OnTestStart(const ::testing::TestInfo& t) override {
    w_->Arm(std::string("test ") + t.test_suite_name() + "." + t.name());
  }
  void OnTestEnd(const ::testing::TestInfo&) override { w_->Disarm(); }
  void OnEnvironmentsTearDownStart(const ::testing::UnitTest&) override {
    w_->Arm("the global tear-down");
  }
  void OnEnvironmentsTearDownEnd(const ::testing::UnitTest&) override { w_->Disarm(); }
  // Static destruction and exit come after this: watched too.
  void OnTestProgramEnd(const ::testing::UnitTest&) override {
    w_->Arm("the exit (static destructors)");
  }

 private:
  Watch* w_;
};

const bool kInstalled = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new Watchdog(new Watch));
  return true;
}();

}  // namespace
