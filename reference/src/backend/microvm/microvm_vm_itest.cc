// Over 600 lines on purpose: one golden VM booted once serves every test of the VM layer (a
// boot costs seconds under TCG), so they share this file.
// The microVM layer against a real QEMU (docs/microvm.md): a golden VM booted once (1 GiB, the
// "sandbox" tool image appended as /sandbox), clones restored from it, commands through the guest
// agent. Skips, saying why, when QEMU or an image is missing, unless SBX_MICROVM_MUST_WORK=1
// (then those are failures).
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/microvm/microvm_cpio.h"
#include "backend/microvm/microvm_spawn.h"
#include "backend/microvm/microvm_vm.h"
#include "host/cgroup.h"
#include "host/image.h"
#include "net/netns.h"
#include "net/rtnl.h"

namespace sbx::microvm {
namespace {

using Clock = std::chrono::steady_clock;

std::string SelfDir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  buf[n] = 0;
  return std::filesystem::path(buf).parent_path().string();
}

bool MustWork() {
  const char* v = getenv("SBX_MICROVM_MUST_WORK");
  return v && std::string(v) == "1";
}

bool OnPath(const std::string& prog) {
  const char* path = getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string cand = p.substr(start, end - start) + "/" + prog;
    if (access(cand.c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

// Our QEMU children (by parent pid and name), to prove none is left behind.
std::vector<pid_t> QemuChildren() {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  pid_t self = getpid();
  while (dirent* e = readdir(d)) {
    pid_t pid = static_cast<pid_t>(atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream f("/proc/" + std::string(e->d_name) + "/stat");
    std::string stat;
    std::getline(f, stat);
    auto l = stat.find('('), r = stat.rfind(')');
    if (l == std::string::npos || r == std::string::npos) continue;
    std::string comm = stat.substr(l + 1, r - l - 1);
    int ppid = 0;
    char state = 0;
    if (sscanf(stat.c_str() + r + 1, " %c %d", &state, &ppid) != 2) continue;
    if (ppid == self && comm.rfind("qemu-system", 0) == 0) out.push_back(pid);
  }
  closedir(d);
  return out;
}

size_t Entries(const std::string& dir) {
  std::error_code ec;
  size_t n = 0;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); ++it)
    n++;
  return n;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

ExecRequest Shell(std::string line) {
  ExecRequest r;
  r.shell = std::move(line);
  return r;
}

class MicroVmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!OnPath("qemu-system-x86_64")) {
      skip_reason_ = "qemu-system-x86_64 not on PATH (apt-get install qemu-system-x86)";
      return;
    }
    const char* env_store = getenv("SBX_IMAGE_STORE");
    std::string store = env_store ? env_store : SelfDir() + "/../images";
    if (access((store + "/refs/microvm-guest").c_str(), R_OK) != 0) {
      skip_reason_ = "no guest image: " + store +
                     "/refs/microvm-guest is missing (build target sbx_microvm_image; it needs the "
                     "kernel package from a Debian mirror)";
      return;
    }
    if (access((store + "/refs/sandbox").c_str(), R_OK) != 0) {
      skip_reason_ =
          "no tool image: " + store + "/refs/sandbox is missing (build target sbx_images)";
      return;
    }
    char root[] = "/tmp/sbx-mvtest-XXXXXX";
    ASSERT_NE(mkdtemp(root), nullptr);
    root_ = root;
    std::filesystem::create_directories(root_ + "/cache");
    std::filesystem::create_directories(root_ + "/vms");
    auto cfg = ConfigFromImageStore(store, root_ + "/cache");
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    // The guest's initramfs + the tool image's rootfs under sandbox/ (the agent's /sandbox root).
    host::ImageStore images(store, root_ + "/cache");
    auto sandbox = images.Get("sandbox");
    ASSERT_TRUE(sandbox.ok()) << sandbox.status().ToString();
    auto tc = Clock::now();
    Status cs = WriteNewcTree(sandbox->rootfs_dir, "sandbox", root_ + "/sandbox.cpio");
    ASSERT_TRUE(cs.ok()) << cs.ToString();
    cs = ConcatFiles({cfg->initramfs, root_ + "/sandbox.cpio"}, root_ + "/initrd.cpio");
    ASSERT_TRUE(cs.ok()) << cs.ToString();
    struct stat ist {};
    stat((root_ + "/initrd.cpio").c_str(), &ist);
    std::printf("[ microvm  ] initramfs with /sandbox: %lld bytes, made in %.0f ms\n",
                static_cast<long long>(ist.st_size),
                std::chrono::duration<double, std::milli>(Clock::now() - tc).count());
    cfg->initramfs = root_ + "/initrd.cpio";
    cfg->memory_mb = kMemoryMb;
    cfg->state_root = root_ + "/vms";
    auto t = Template::Boot(*cfg, root_ + "/vms/template");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tmpl_ = std::move(*t).release();
    std::printf("[ microvm  ] golden VM: %s (guest kernel %s, cgroup %s, agent %s, root %d)\n",
                tmpl_->stages().ToString().c_str(), tmpl_->guest_kernel().c_str(),
                tmpl_->guest_cgroup().c_str(), tmpl_->agent_version().c_str(), tmpl_->has_root());
    struct stat st {};
    if (stat(tmpl_->state_path().c_str(), &st) == 0)
      std::printf("[ microvm  ] template state %lld bytes\n", static_cast<long long>(st.st_size));
  }

  static void TearDownTestSuite() {
    if (tmpl_) {
      std::string vms = tmpl_->config().state_root;
      delete tmpl_;
      tmpl_ = nullptr;
      EXPECT_EQ(Entries(vms), 0u) << "state directories left in " << vms;
    }
    EXPECT_TRUE(QemuChildren().empty()) << "QEMU processes left behind";
    if (!root_.empty()) std::filesystem::remove_all(root_);
  }

  void SetUp() override {
    if (!skip_reason_.empty()) {
      if (MustWork()) FAIL() << "SBX_MICROVM_MUST_WORK=1 but: " << skip_reason_;
      GTEST_SKIP() << "microVM tests skipped: " << skip_reason_;
    }
    ASSERT_NE(tmpl_, nullptr) << "the golden VM did not boot (see the suite set-up failure)";
  }

  void TearDown() override {
    if (tmpl_) {
      EXPECT_EQ(Entries(tmpl_->config().state_root), 1u)
          << "only the template's directory may remain";
    }
    EXPECT_TRUE(QemuChildren().empty()) << "a test left a QEMU process";
  }

  static std::unique_ptr<Vm> NewClone() {
    auto vm = Vm::Clone(*tmpl_);
    EXPECT_TRUE(vm.ok()) << vm.status().ToString();
    return vm.ok() ? std::move(*vm) : nullptr;
  }

  static constexpr uint32_t kMemoryMb = 1024;
  static inline std::string skip_reason_;
  static inline std::string root_;
  static inline Template* tmpl_ = nullptr;
};

TEST_F(MicroVmTest, GoldenBootSavedATemplate) {
  struct stat st {};
  ASSERT_EQ(stat(tmpl_->ram_path().c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), uint64_t{kMemoryMb} << 20);
  EXPECT_TRUE(tmpl_->has_root());
  EXPECT_EQ(tmpl_->dir(), root_ + "/vms/template");
  EXPECT_EQ(access(tmpl_->json_path().c_str(), R_OK), 0);
  ASSERT_EQ(stat(tmpl_->state_path().c_str(), &st), 0);
  EXPECT_GT(st.st_size, 0);
  EXPECT_LT(st.st_size, 4 << 20) << "x-ignore-shared: the RAM must not be in the state file";
  EXPECT_EQ(tmpl_->guest_cgroup(), "v2");
  EXPECT_GT(tmpl_->stages().Get("boot"), 0);
}

TEST_F(MicroVmTest, CloneRunsEchoHello) {
  auto vm = NewClone();
  ASSERT_TRUE(vm);
  std::printf("[ microvm  ] clone: %s\n", vm->stages().ToString().c_str());
  ExecRequest r;
  r.argv = {"echo", "hello"};
  auto res = vm->Exec(r);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->stdout_data, "hello\n");
  ASSERT_TRUE(res->exit_code.has_value());
  EXPECT_EQ(*res->exit_code, 0);
  EXPECT_FALSE(res->oom);
  EXPECT_FALSE(res->timed_out);
  // One network device, down until CONFIGURE; its backend goes nowhere (no tap given).
  auto net = vm->Exec(Shell("ls /sys/class/net; cat /sys/class/net/eth0/operstate"));
  ASSERT_TRUE(net.ok()) << net.status().ToString();
  EXPECT_EQ(net->stdout_data, "eth0\nlo\ndown\n");
}

TEST_F(MicroVmTest, ExitCodesStderrSignalsAndStartErrors) {
  auto vm = NewClone();
  ASSERT_TRUE(vm);
  auto res = vm->Exec(Shell("echo oops >&2; exit 7"));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->exit_code.value_or(-1), 7);
  EXPECT_EQ(res->stderr_data, "oops\n");
  EXPECT_EQ(res->stdout_data, "");

  res = vm->Exec(Shell("kill -TERM $$"));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_FALSE(res->exit_code.has_value());
  EXPECT_EQ(res->signal.value_or(0), SIGTERM);

  ExecRequest missing;
  missing.argv = {"/no/such/program"};
  res = vm->Exec(missing);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->exit_code.value_or(-1), 127);
  EXPECT_NE(res->start_error.find("No such file"), std::string::npos) << res->start_error;

  ExecRequest bad_cwd;
  bad_cwd.argv = {"true"};
  bad_cwd.cwd = "/no/such/dir";
  res = vm->Exec(bad_cwd);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->exit_code.value_or(-1), 127);
  EXPECT_NE(res->start_error.find("cannot change to /no/such/dir"), std::string::npos)
      << res->start_error;

  ExecRequest with_env;
  with_env.argv = {"sh", "-c", "pwd; echo $GREETING; cat"};
  with_env.env = {"PATH=/bin:/usr/bin", "GREETING=hi there"};
  with_env.cwd = "/tmp";
  with_env.stdin_data = "from stdin\n";
  res = vm->Exec(with_env);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->stdout_data, "/tmp\nhi there\nfrom stdin\n");

  ExecRequest big;
  big.shell = "head -c 300000 /dev/zero";
  big.output_limit = 100000;
  res = vm->Exec(big);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->stdout_data.size(), 100000u);
  EXPECT_TRUE(res->stdout_truncated);
  EXPECT_EQ(res->exit_code.value_or(-1), 0);
}

TEST_F(MicroVmTest, ClonesDoNotShareWrites) {
  auto a = NewClone();
  auto b = NewClone();
  ASSERT_TRUE(a && b);
  auto w = a->Exec(
      Shell("echo secret > /tmp/only-in-a; echo root-fs > /work/only-in-a; cat /tmp/only-in-a"));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->stdout_data, "secret\n");
  auto r = b->Exec(Shell("ls /tmp/only-in-a /work/only-in-a"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->exit_code.value_or(0), 0) << r->stdout_data;
  // And a clone made after the write does not see it either (the template is untouched).
  auto c = NewClone();
  ASSERT_TRUE(c);
  r = c->Exec(Shell("test -e /tmp/only-in-a || test -e /work/only-in-a"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code.value_or(0), 1);
}

TEST_F(MicroVmTest, RngDiffersBetweenClonesAfterReseed) {
  auto read_rng = [](Vm& vm) {
    auto r = vm.Exec(Shell("head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'"));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->stdout_data : std::string();
  };
  auto a = NewClone();
  auto b = NewClone();
  ASSERT_TRUE(a && b);
  std::string ra = read_rng(*a), rb = read_rng(*b);
  EXPECT_EQ(ra.size(), 64u);
  EXPECT_NE(ra, rb) << "two reseeded clones read the same bytes from /dev/urandom";

  // Without the reseed, what do clones read? Printed, not asserted: the kernel may reseed by
  // itself when enough time has passed since the template was saved.
  auto na = Vm::Clone(*tmpl_, Vm::Options{.reseed = false});
  auto nb = Vm::Clone(*tmpl_, Vm::Options{.reseed = false});
  ASSERT_TRUE(na.ok() && nb.ok());
  std::string xa = read_rng(**na), xb = read_rng(**nb);
  std::printf("[ microvm  ] without reseed two clones read %s bytes\n",
              xa == xb ? "the SAME" : "different");
}

TEST_F(MicroVmTest, GuestClockIsRightAfterRestore) {
  auto vm = NewClone();
  ASSERT_TRUE(vm);
  // The template was saved seconds (or minutes) ago: the restored clock was behind by that much.
  std::printf("[ microvm  ] guest clock was %.0f ms behind before set-clock\n",
              vm->clock_skew_ms());
  auto r = vm->Exec(Shell("date +%s"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  long guest = atol(r->stdout_data.c_str());
  long host = static_cast<long>(time(nullptr));
  EXPECT_LE(std::labs(host - guest), 2) << "guest " << guest << " host " << host;
}

TEST_F(MicroVmTest, MemoryLimitOomIsReported) {
  auto vm = NewClone();
  ASSERT_TRUE(vm);
  ExecRequest r;
  // dd allocates its 64 MiB block and fills it: past a 32 MiB limit.
  r.shell = "dd if=/dev/zero of=/dev/null bs=64M count=1";
  r.memory_limit = 32ull << 20;
  auto res = vm->Exec(r);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_TRUE(res->oom) << "exit " << res->exit_code.value_or(-1) << " signal "
                        << res->signal.value_or(0) << " stderr " << res->stderr_data;
  EXPECT_EQ(res->signal.value_or(0), SIGKILL);
  EXPECT_LE(res->peak_memory, 33ull << 20);
  // Within the limit, the same command is fine, and the VM still serves.
  r.memory_limit = 128ull << 20;
  res = vm->Exec(r);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_FALSE(res->oom);
  EXPECT_EQ(res->exit_code.value_or(-1), 0) << res->stderr_data;
  EXPECT_GE(res->peak_memory, 64ull << 20);
}

TEST_F(MicroVmTest, TimeoutKillsTheCommand) {
  auto vm = NewClone();
  ASSERT_TRUE(vm);
  ExecRequest r;
  r.shell = "sleep 100 & sleep 100";  // a background child too: the whole cgroup goes
  r.timeout_ms = 1000;
  auto t0 = Clock::now();
  auto res = vm->Exec(r);
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_TRUE(res->timed_out);
  EXPECT_EQ(res->signal.value_or(0), SIGKILL);
  EXPECT_LT(s, 10.0);
  auto after = vm->Exec(Shell("cat /proc/[0-9]*/comm | grep -cx sleep || true"));
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->stdout_data, "0\n") << "a sleep survived the timeout";
}

TEST_F(MicroVmTest, StopAndResume) {
  auto vm = NewClone();
  ASSERT_TRUE(vm);
  auto before = vm->Exec(Shell("cat /proc/uptime"));
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  ASSERT_TRUE(vm->Stop().ok());
  auto s = vm->RunState();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, "paused");
  ASSERT_TRUE(vm->Resume().ok());
  s = vm->RunState();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, "running");
  auto r = vm->Exec(Shell("echo resumed"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_data, "resumed\n");
}

TEST_F(MicroVmTest, DestroyLeavesNothing) {
  auto vm = NewClone();
  ASSERT_TRUE(vm);
  pid_t pid = vm->pid();
  std::string dir = vm->dir();
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(std::filesystem::exists(dir));
  ASSERT_TRUE(vm->Destroy().ok());
  EXPECT_FALSE(std::filesystem::exists("/proc/" + std::to_string(pid)));
  EXPECT_FALSE(std::filesystem::exists(dir));
  EXPECT_TRUE(QemuChildren().empty());
  auto r = vm->Exec(Shell("true"));
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(vm->Destroy().ok()) << "idempotent";
}

// An owner that dies without Destroy (a crash): PR_SET_PDEATHSIG takes its QEMU down with it.
TEST_F(MicroVmTest, QemuDiesWithItsOwner) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(p[0]);
    auto vm = Vm::Clone(*tmpl_);
    std::string msg =
        vm.ok() ? std::to_string((*vm)->pid()) + " " + (*vm)->dir() : "0 " + vm.status().ToString();
    ssize_t w = write(p[1], msg.data(), msg.size());
    (void)w;
    _exit(0);  // no destructor: the Vm is abandoned with its QEMU running
  }
  close(p[1]);
  std::string msg;
  char buf[512];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
  close(p[0]);
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  pid_t qemu = static_cast<pid_t>(atol(msg.c_str()));
  ASSERT_GT(qemu, 0) << msg;
  std::string dir = msg.substr(msg.find(' ') + 1);
  // Wait for the event (its exit), not for a time: a pidfd becomes readable when it is gone.
  int pfd = static_cast<int>(syscall(SYS_pidfd_open, qemu, 0));
  if (pfd >= 0) {
    pollfd pf{pfd, POLLIN, 0};
    EXPECT_EQ(poll(&pf, 1, 10000), 1) << "QEMU " << qemu << " outlived its owner";
    close(pfd);
  } else {
    EXPECT_EQ(errno, ESRCH) << "pidfd_open";
  }
  // The abandoned state directory is the crash's leftover; a backend's start-up sweep removes
  // these (not in this phase). Here the test does.
  ASSERT_EQ(dir.rfind(tmpl_->config().state_root, 0), 0u) << dir;
  std::filesystem::remove_all(dir);
}

TEST_F(MicroVmTest, BadBytesToTheAgentGiveClearErrors) {
  auto vm = NewClone();
  ASSERT_TRUE(vm);
  // Garbage that is not a frame: the agent says so (an id-0 ERROR) and resynchronises.
  ASSERT_TRUE(vm->SendRawForTesting("this is not a frame\n\x01\x02\xff").ok());
  ASSERT_TRUE(vm->Ping().ok());
  ASSERT_FALSE(vm->agent_complaints().empty());
  EXPECT_NE(vm->agent_complaints()[0].find("bad frame"), std::string::npos)
      << vm->agent_complaints()[0];
  // A header with a wrong version, and one announcing 2 GiB: errors, then the agent goes on.
  std::string bad_version = "SBXV";
  bad_version += std::string("\x09\x01\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00", 12);
  std::string huge = "SBXV";
  huge += std::string("\x01\x02\x00\x00\x06\x00\x00\x00\x00\x00\x00\x80", 12);
  ASSERT_TRUE(vm->SendRawForTesting(bad_version + huge).ok());
  ASSERT_TRUE(vm->Ping().ok());
  // Well-framed but wrong requests: each gets its own error, named.
  struct Case {
    uint8_t type;
    std::vector<proto::Field> fields;
    const char* want;
  } cases[] = {
      {0x42, {}, "unknown request type"},
      {proto::kExec, {proto::StrField(proto::kArgv, std::string("a\0b", 3))}, "NUL"},
      {proto::kExec, {}, "argv or shell"},
      {proto::kExec,
       {proto::StrField(proto::kShell, "true"), proto::StrField(proto::kTimeoutMs, "xy")},
       "timeout_ms"},
      {proto::kExec,
       {proto::StrField(proto::kShell, "true"), proto::StrField(proto::kEnv, "NOEQUALS")},
       "NAME=VALUE"},
      {proto::kExec,
       {proto::StrField(proto::kShell, "true"), proto::Field{99, "?"}},
       "unknown exec field"},
      {proto::kSetClock,
       {proto::U64Field(proto::kRealtimeNs, 1), proto::StrField(proto::kSeed, "short")},
       "seed"},
      {proto::kSetClock, {}, "realtime_ns"},
      {proto::kPing, {proto::Field{1, "x"}}, "no fields"},
  };
  for (auto& c : cases) {
    auto r = vm->RequestRawForTesting(c.type, c.fields);
    ASSERT_FALSE(r.ok()) << "type " << int(c.type);
    EXPECT_EQ(r.status().code(), Code::kToolError);
    EXPECT_NE(r.status().message().find(c.want), std::string::npos) << r.status().message();
  }
  // A field header that runs past the payload.
  std::string trunc = "SBXV";
  trunc +=
      std::string("\x01\x02\x00\x00\x77\x00\x00\x00\x08\x00\x00\x00\x01\x00\xff\x00\x00\x00zz", 20);
  ASSERT_TRUE(vm->SendRawForTesting(trunc).ok());
  ASSERT_TRUE(vm->Ping().ok());
  auto r = vm->Exec(Shell("echo still fine"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_data, "still fine\n");
}

TEST_F(MicroVmTest, CloneStartToFirstOutput) {
  constexpr int kClones = 20;
  std::vector<double> clone_ms, first_output_ms, exec_ms;
  std::vector<double> pss_mb, private_mb;
  for (int i = 0; i < kClones; i++) {
    auto t0 = Clock::now();
    auto vm = Vm::Clone(*tmpl_);
    ASSERT_TRUE(vm.ok()) << vm.status().ToString();
    double c = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    ExecRequest r;
    r.argv = {"echo", "hello"};
    auto t1 = Clock::now();
    auto res = (*vm)->Exec(r);
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    ASSERT_EQ(res->stdout_data, "hello\n");
    double total = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    clone_ms.push_back(c);
    first_output_ms.push_back(total);
    exec_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t1).count());
    auto mem = (*vm)->Memory();
    if (mem.ok()) {
      pss_mb.push_back(static_cast<double>(mem->pss_kb) / 1024.0);
      private_mb.push_back(static_cast<double>(mem->private_dirty_kb) / 1024.0);
    }
    if (i == 0)
      std::printf("[ microvm  ] first clone stages: %s\n", (*vm)->stages().ToString().c_str());
  }
  std::printf(
      "[ microvm  ] %d clones: Clone() p50 %.1f ms p95 %.1f ms; clone start to first output "
      "(echo hello) p50 %.1f ms p95 %.1f ms; exec alone p50 %.1f ms p95 %.1f ms\n",
      kClones, Percentile(clone_ms, 0.5), Percentile(clone_ms, 0.95),
      Percentile(first_output_ms, 0.5), Percentile(first_output_ms, 0.95), Percentile(exec_ms, 0.5),
      Percentile(exec_ms, 0.95));
  std::printf(
      "[ microvm  ] per clone QEMU memory after one echo: PSS p50 %.1f MiB, private dirty p50 %.1f "
      "MiB\n",
      Percentile(pss_mb, 0.5), Percentile(private_mb, 0.5));
}

// The same with the QEMU process started beforehand (Prepare, as a pool would): from Restore to
// the first output. Also a warm second command and a stop/cont round.
TEST_F(MicroVmTest, PreparedCloneRestoreToFirstOutput) {
  constexpr int kClones = 20;
  std::vector<double> restore_ms, first_output_ms, second_ms, prepare_ms;
  for (int i = 0; i < kClones; i++) {
    auto tp = Clock::now();
    auto vm = Vm::Prepare(*tmpl_);
    ASSERT_TRUE(vm.ok()) << vm.status().ToString();
    prepare_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - tp).count());
    auto t0 = Clock::now();
    Status st = (*vm)->Restore(*tmpl_);
    ASSERT_TRUE(st.ok()) << st.ToString();
    restore_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    ExecRequest r;
    r.argv = {"echo", "hello"};
    auto res = (*vm)->Exec(r);
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    ASSERT_EQ(res->stdout_data, "hello\n");
    first_output_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    auto t2 = Clock::now();
    res = (*vm)->Exec(r);
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    second_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t2).count());
    EXPECT_FALSE((*vm)->Restore(*tmpl_).ok()) << "a second restore must be refused";
  }
  std::printf(
      "[ microvm  ] %d prepared clones: Prepare p50 %.1f ms; Restore (load+cont+clock+reseed) p50 "
      "%.1f ms "
      "p95 %.1f ms; restore to first output p50 %.1f ms p95 %.1f ms; a second echo p50 %.1f ms\n",
      kClones, Percentile(prepare_ms, 0.5), Percentile(restore_ms, 0.5),
      Percentile(restore_ms, 0.95), Percentile(first_output_ms, 0.5),
      Percentile(first_output_ms, 0.95), Percentile(second_ms, 0.5));
}

// ---- phase 2: the /sandbox root, limits, CONFIGURE, network, host cgroups, templates ----

ExecRequest InRoot(std::string line, uint32_t uid = 1000) {
  ExecRequest r;
  r.shell = std::move(line);
  r.root = "/sandbox";
  r.uid = uid;
  r.gid = uid;
  r.cwd = "/work";
  r.timeout_ms = 60000;
  return r;
}

TEST_F(MicroVmTest, CommandsRunInTheSandboxRoot) {
  auto vm = NewClone();
  ASSERT_TRUE(vm);
  auto t0 = Clock::now();
  auto r = vm->Exec(InRoot("id -u; id -g; pwd"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  double first = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  t0 = Clock::now();
  auto second = vm->Exec(InRoot("true"));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  std::printf(
      "[ microvm  ] in /sandbox as uid 1000: first command in a fresh clone %.0f ms, the next %.0f "
      "ms\n",
      first, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  EXPECT_EQ(r->stdout_data, "1000\n1000\n/work\n") << r->stderr_data << r->start_error;
  EXPECT_EQ(r->exit_code.value_or(-1), 0);
  // The image is read-only, even for root; the tmpfs mounts are writable.
  r = vm->Exec(InRoot("touch /bin/x 2>&1; echo rc=$?", 0));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->stdout_data.find("Read-only file system"), std::string::npos) << r->stdout_data;
  EXPECT_NE(r->stdout_data.find("rc=1"), std::string::npos) << r->stdout_data;
  r =
      vm->Exec(InRoot("echo hi > /work/f && cat /work/f && echo tmp > /tmp/t && cat /tmp/t && "
                      "echo vt > /var/tmp/v && cat /var/tmp/v"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_data, "hi\ntmp\nvt\n") << r->stderr_data;
  // Its own PID namespace: a handful of processes.
  r = vm->Exec(InRoot("ls /proc | grep -c '^[0-9]'"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  int procs = atoi(r->stdout_data.c_str());
  EXPECT_GE(procs, 1) << r->stdout_data << r->stderr_data;
  EXPECT_LE(procs, 5) << r->stdout_data;
  // The image's files and the guest's /dev; no block devices, no kmsg.
  r = vm->Exec(InRoot(
      "grep -c '^sandbox:' /etc/passwd; ls /dev | tr '\\n' ' '; test -e /dev/kmsg || echo no-kmsg; "
      "echo x > /dev/null && head -c 4 /dev/zero | wc -c"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_data.substr(0, 2), "1\n") << r->stdout_data;
  for (const char* d : {"null ", "zero ", "urandom ", "fd ", "shm "})
    EXPECT_NE(r->stdout_data.find(d), std::string::npos) << d << " in " << r->stdout_data;
  EXPECT_NE(r->stdout_data.find("no-kmsg\n4\n"), std::string::npos) << r->stdout_data;
  // Writes in one clone's root are not in the next one.
  auto other = NewClone();
  ASSERT_TRUE(other);
  r = other->Exec(InRoot("ls /work"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_data, "");
}

TEST_F(MicroVmTest, PidsLimitStopsAForkLoop) {
  auto vm = NewClone();
  ASSERT_TRUE(vm);
  ExecRequest r =
      InRoot("i=0; while [ $i -lt 40 ]; do sleep 30 & i=$((i+1)); done; echo started $i");
  r.pids_limit = 20;
  r.timeout_ms = 30000;
  auto res = vm->Exec(r);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->stdout_data.find("started 40"), std::string::npos) << res->stdout_data;
  EXPECT_NE(res->stderr_data.find("fork"), std::string::npos) << res->stderr_data;
  EXPECT_FALSE(res->timed_out);
  // Without the limit the same loop runs to the end (and the sleeps go with the command).
  r.pids_limit = 0;
  res = vm->Exec(r);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->stdout_data, "started 40\n") << res->stderr_data;
}

TEST_F(MicroVmTest, NofileLimitHolds) {
  auto vm = NewClone();
  ASSERT_TRUE(vm);
  ExecRequest r =
      InRoot("ulimit -n; ulimit -Hn; ulimit -n 64 2>/dev/null && echo raised || echo refused");
  r.nofile = 32;
  auto res = vm->Exec(r);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->stdout_data, "32\n32\nrefused\n") << res->stderr_data;
}

TEST_F(MicroVmTest, TermGraceAtTheDeadline) {
  auto vm = NewClone();
  ASSERT_TRUE(vm);
  ExecRequest r = InRoot("trap 'echo got-term; exit 3' TERM; sleep 30");
  r.timeout_ms = 300;
  r.term_grace_ms = 2000;
  auto t0 = Clock::now();
  auto res = vm->Exec(r);
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->stdout_data, "got-term\n") << res->stderr_data;
  EXPECT_TRUE(res->timed_out);
  EXPECT_EQ(res->exit_code.value_or(-1), 3) << "signal " << res->signal.value_or(0);
  EXPECT_LT(s, 2.0) << "the command ended at the TERM, it did not need the grace";
  // A command that ignores TERM is killed at the end of the grace.
  r = InRoot("trap '' TERM; sleep 30");
  r.timeout_ms = 300;
  r.term_grace_ms = 700;
  t0 = Clock::now();
  res = vm->Exec(r);
  s = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_TRUE(res->timed_out);
  EXPECT_EQ(res->signal.value_or(0), SIGKILL);
  EXPECT_GE(s, 0.9);
  EXPECT_LT(s, 5.0);
}

TEST_F(MicroVmTest, ConfigureDiskBytesLimitsWork) {
  auto vm = NewClone();
  ASSERT_TRUE(vm);
  Status st = vm->Configure(GuestConfig{.disk_bytes = 1ull << 20, .hostname = "sbx-test"});
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto res = vm->Exec(InRoot("dd if=/dev/zero of=/work/big bs=1024 count=2048"));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_NE(res->exit_code.value_or(0), 0);
  EXPECT_NE(res->stderr_data.find("No space left"), std::string::npos) << res->stderr_data;
  res =
      vm->Exec(InRoot("rm /work/big; dd if=/dev/zero of=/tmp/ok bs=1024 count=512 2>/dev/null && "
                      "echo ok; hostname"));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->stdout_data, "ok\nsbx-test\n") << res->stderr_data;
  // Bad configurations are refused on the host, before anything is sent.
  EXPECT_EQ(vm->Configure(GuestConfig{.address = "10.1"}).code(), Code::kInvalidArgument);
}

// A network namespace owned by the test with a tap in it (10.9.0.1/24) and a TCP listener that
// answers HTTP; the guest, configured 10.9.0.2/24 via 10.9.0.1, fetches from it.
struct TapNet {
  host::UniqueFd netns;
  int tap = -1, listener = -1;
  uint16_t port = 0;
  std::string error;
  ~TapNet() {
    if (tap >= 0) close(tap);
    if (listener >= 0) close(listener);
  }
};

void MakeTapNet(TapNet& n) {
  // A thread of its own: it moves into the new namespace and ends there.
  std::thread([&n] {
    auto ns = net::UnshareNetnsOnThisThread();
    if (!ns.ok()) {
      n.error = ns.status().ToString();
      return;
    }
    n.netns = std::move(*ns);
    n.tap = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (n.tap < 0) {
      n.error = std::string("open /dev/net/tun: ") + strerror(errno);
      return;
    }
    ifreq ifr{};
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    std::strncpy(ifr.ifr_name, "sbxt0", IFNAMSIZ - 1);
    if (ioctl(n.tap, TUNSETIFF, &ifr) != 0) {
      n.error = std::string("TUNSETIFF: ") + strerror(errno);
      return;
    }
    auto rt = net::Rtnl::Open();
    if (!rt.ok()) {
      n.error = rt.status().ToString();
      return;
    }
    auto idx = (*rt)->LinkIndex("sbxt0");
    in_addr a{};
    inet_pton(AF_INET, "10.9.0.1", &a);
    Status st = idx.ok() ? (*rt)->AddAddress4(*idx, a, 24) : idx.status();
    if (st.ok()) st = (*rt)->SetLinkUp(*idx);
    if (!st.ok()) {
      n.error = st.ToString();
      return;
    }
    n.listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr = a;
    socklen_t len = sizeof sa;
    if (bind(n.listener, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
        listen(n.listener, 4) != 0 ||
        getsockname(n.listener, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
      n.error = std::string("listener: ") + strerror(errno);
      return;
    }
    n.port = ntohs(sa.sin_port);
  }).join();
}

// Answers `count` HTTP requests on `listener` (each within 60 s), then returns.
void ServeHttp(int listener, int count, std::atomic<int>* served) {
  for (int i = 0; i < count; i++) {
    pollfd p{listener, POLLIN, 0};
    if (poll(&p, 1, 60000) != 1) return;
    int c = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    std::string req;
    char buf[1024];
    while (req.find("\r\n\r\n") == std::string::npos) {
      pollfd q{c, POLLIN, 0};
      if (poll(&q, 1, 10000) != 1) break;
      ssize_t r = read(c, buf, sizeof buf);
      if (r <= 0) break;
      req.append(buf, static_cast<size_t>(r));
    }
    std::string body = "hello from the host side\n";
    std::string resp = "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body;
    ssize_t w = write(c, resp.data(), resp.size());
    (void)w;
    close(c);
    served->fetch_add(1);
  }
}

TEST_F(MicroVmTest, GuestReachesAListenerBehindItsTap) {
  size_t fds_before = Entries("/proc/self/fd");
  {
    TapNet n;
    MakeTapNet(n);
    ASSERT_TRUE(n.error.empty()) << n.error;
    std::atomic<int> served{0};
    std::thread server(ServeHttp, n.listener, 2, &served);
    struct JoinOnExit {  // an ASSERT that returns early must not leave the server joinable
      std::thread& t;
      int fd;
      ~JoinOnExit() {
        if (t.joinable()) {
          shutdown(fd, SHUT_RDWR);  // wakes its poll
          t.join();
        }
      }
    } join_on_exit{server, n.listener};
    {
      PrepareOptions po;
      po.tap_fd = n.tap;
      auto t0 = Clock::now();
      auto vm = Vm::Clone(*tmpl_, {}, po);
      ASSERT_TRUE(vm.ok()) << vm.status().ToString();
      Status st =
          (*vm)->Configure(GuestConfig{.address = "10.9.0.2", .prefix = 24, .gateway = "10.9.0.1"});
      ASSERT_TRUE(st.ok()) << st.ToString();
      std::string url = "http://10.9.0.1:" + std::to_string(n.port) + "/";
      ExecRequest r;
      r.shell = "wget -q -O- " + url;
      r.timeout_ms = 30000;
      auto res = (*vm)->Exec(r);
      ASSERT_TRUE(res.ok()) << res.status().ToString();
      EXPECT_EQ(res->stdout_data, "hello from the host side\n") << res->stderr_data;
      std::printf("[ microvm  ] clone with tap to the first HTTP answer: %.0f ms\n",
                  std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      // The same from the sandbox root, as uid 1000; and the guest's routes.
      res = (*vm)->Exec(InRoot("wget -q -O- " + url + "; ip route 2>/dev/null || route -n"));
      ASSERT_TRUE(res.ok()) << res.status().ToString();
      EXPECT_EQ(res->stdout_data.rfind("hello from the host side\n", 0), 0u)
          << res->stdout_data << res->stderr_data;
    }
    server.join();
    EXPECT_EQ(served.load(), 2);
  }
  // The tap existed only in the test's namespace; its fds (tap, netns, listener) are closed, so
  // the namespace and the tap are gone with them.
  EXPECT_EQ(if_nametoindex("sbxt0"), 0u);
  EXPECT_EQ(Entries("/proc/self/fd"), fds_before) << "an fd was left open";
}

TEST_F(MicroVmTest, WithoutATapTheNetworkGoesNowhere) {
  auto vm = NewClone();
  ASSERT_TRUE(vm);
  Status st =
      vm->Configure(GuestConfig{.address = "10.9.0.2", .prefix = 24, .gateway = "10.9.0.1"});
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExecRequest r;
  // (Not `wget -T`: busybox's wget dies of SIGSEGV when its -T alarm meets a failed connect.)
  r.shell = "wget -q -O- http://10.9.0.1:80/; echo rc=$?";
  r.timeout_ms = 20000;
  auto res = vm->Exec(r);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->stdout_data, "rc=1\n") << res->stderr_data;
  EXPECT_NE(res->stderr_data.find("can't connect"), std::string::npos) << res->stderr_data;
}

TEST_F(MicroVmTest, QemuStartsInTheGivenCgroups) {
  auto mgr = host::CgroupManager::Open("mvtest-" + std::to_string(getpid()));
  if (!mgr.ok()) {
    if (MustWork()) FAIL() << mgr.status().ToString();
    GTEST_SKIP() << "no cgroups for the test: " << mgr.status().ToString();
  }
  std::vector<std::string> parents = (*mgr)->ParentPaths();
  {
    auto cg = (*mgr)->Create("vm");
    ASSERT_TRUE(cg.ok()) << cg.status().ToString();
    PrepareOptions po;
    po.cgroup_procs = (*cg)->JoinFiles();
    ASSERT_FALSE(po.cgroup_procs.empty());
    auto vm = Vm::Clone(*tmpl_, {}, po);
    ASSERT_TRUE(vm.ok()) << vm.status().ToString();
    auto pids = (*cg)->Pids();
    EXPECT_NE(std::find(pids.begin(), pids.end(), (*vm)->pid()), pids.end())
        << "QEMU " << (*vm)->pid() << " is not in " << po.cgroup_procs[0];
    auto res = (*vm)->Exec(Shell("echo in-cgroup"));
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    EXPECT_EQ(res->stdout_data, "in-cgroup\n");
    auto usage = (*cg)->Usage();
    std::printf("[ microvm  ] QEMU's host cgroup after one command: memory %.1f MiB, cpu %.2f s\n",
                static_cast<double>(usage.memory_current_bytes) / 1048576.0, usage.cpu_seconds);
    EXPECT_GT(usage.memory_current_bytes, 8 << 20) << "QEMU's memory is charged to its cgroup";
    (*vm).reset();
    EXPECT_TRUE((*cg)->Empty());
  }
  mgr->reset();
  for (const auto& p : parents) EXPECT_FALSE(std::filesystem::exists(p)) << p << " left behind";
}

TEST_F(MicroVmTest, ACgroupThatCannotBeJoinedFailsThePrepare) {
  PrepareOptions po;
  po.cgroup_procs = {root_ + "/no/such/cgroup.procs"};
  auto vm = Vm::Prepare(*tmpl_, po);
  ASSERT_FALSE(vm.ok());
  EXPECT_NE(vm.status().message().find(po.cgroup_procs[0]), std::string::npos)
      << vm.status().ToString();
  EXPECT_NE(vm.status().message().find("No such file"), std::string::npos)
      << vm.status().ToString();
}

// QEMUs are forked by the process-wide spawner thread: one asked for by a thread that has since
// ended keeps running (PR_SET_PDEATHSIG follows the forking thread).
TEST_F(MicroVmTest, QemuOutlivesTheThreadThatAskedForIt) {
  std::unique_ptr<Vm> vm;
  std::string err;
  std::thread([&] {
    auto v = Vm::Clone(*tmpl_);
    if (v.ok())
      vm = std::move(*v);
    else
      err = v.status().ToString();
  }).join();
  ASSERT_TRUE(vm) << err;
  auto res = vm->Exec(Shell("echo still-here"));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->stdout_data, "still-here\n");
}

TEST_F(MicroVmTest, OpenAdoptsABootedTemplate) {
  auto t2 = Template::Open(tmpl_->config(), tmpl_->dir());
  ASSERT_TRUE(t2.ok()) << t2.status().ToString();
  (*t2)->set_keep_files(true);  // the suite's template owns them
  EXPECT_TRUE((*t2)->has_root());
  EXPECT_EQ((*t2)->guest_kernel(), tmpl_->guest_kernel());
  EXPECT_EQ((*t2)->agent_version(), tmpl_->agent_version());
  {
    auto vm = Vm::Clone(**t2);
    ASSERT_TRUE(vm.ok()) << vm.status().ToString();
    auto res = (*vm)->Exec(InRoot("echo from-opened"));
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    EXPECT_EQ(res->stdout_data, "from-opened\n");
  }
  VmConfig other = tmpl_->config();
  other.memory_mb = 512;
  auto bad = Template::Open(other, tmpl_->dir());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(bad.status().message().find("memory_mb"), std::string::npos) << bad.status().ToString();
  auto none = Template::Open(tmpl_->config(), root_ + "/vms/nowhere");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(root_ + "/vms/nowhere"));
  t2->reset();
  EXPECT_EQ(access(tmpl_->ram_path().c_str(), R_OK), 0) << "keep_files: the files stay";
}

// Suspend to a file: stop + migrate a running clone (all its RAM) into a file, kill it, and
// restore a new QEMU from the file: the guest's files, configuration and processes are back.
TEST_F(MicroVmTest, SaveStateAndRestoreFromIt) {
  std::string path = root_ + "/suspend.state";
  auto vm = NewClone();
  ASSERT_TRUE(vm);
  ASSERT_TRUE(vm->Configure(GuestConfig{.hostname = "suspended"}).ok());
  auto r = vm->Exec(
      InRoot("echo kept > /work/f; head -c 3000000 /dev/urandom > /tmp/blob; md5sum /tmp/blob"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::string sum = r->stdout_data;
  auto t0 = Clock::now();
  Status st = vm->SaveState(path);
  ASSERT_TRUE(st.ok()) << st.ToString();
  double save_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  auto rs = vm->RunState();
  ASSERT_TRUE(rs.ok());
  EXPECT_EQ(*rs, "postmigrate");
  ASSERT_TRUE(vm->Destroy().ok());
  struct stat sst {};
  ASSERT_EQ(stat(path.c_str(), &sst), 0);
  t0 = Clock::now();
  auto back = Vm::RestoreFromState(*tmpl_, path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  double restore_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  r = (*back)->Exec(InRoot("cat /work/f; hostname; md5sum /tmp/blob"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_data, "kept\nsuspended\n" + sum);
  std::printf("[ microvm  ] suspend: save %.0f ms, state file %.1f MiB; restore %.0f ms (%s)\n",
              save_ms, static_cast<double>(sst.st_size) / 1048576.0, restore_ms,
              (*back)->stages().ToString().c_str());
  // A second restore from the same file is another, independent VM.
  auto again = Vm::RestoreFromState(*tmpl_, path);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  r = (*again)->Exec(InRoot("cat /work/f"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_data, "kept\n");
  std::filesystem::remove(path);
  EXPECT_FALSE(Vm::RestoreFromState(*tmpl_, path).ok());
}

// The spawner's child is a copy of a multi-threaded process: it must not take a lock another
// thread held at the clone. Other threads here keep malloc's arena and free-list locks busy
// (threads that allocate, start and end: an ending thread gives its arena back under
// free_list_lock) while 400 kept children start /bin/true. Before the fix a child's malloc hung
// in free_list_lock about once in 80 QEMU starts under load; now every start must come back,
// and a stuck child would come back as the spawner's 30 s error, not as a hang.
TEST(SpawnQemuStress, StartsWhileOtherThreadsAllocateAndEnd) {
  if (geteuid() != 0) GTEST_SKIP() << "a kept child is the init of a new PID namespace: needs root";
  std::atomic<bool> stop{false};
  std::vector<std::thread> churn;
  for (int k = 0; k < 3; ++k) {
    churn.emplace_back([&stop, k] {
      std::vector<void*> held;
      while (!stop.load()) {
        std::thread t([k] {
          std::vector<void*> v;
          for (int i = 0; i < 64; ++i)
            v.push_back(malloc(static_cast<size_t>(16 + (i * 37 + k) % 4000)));
          for (void* p : v) free(p);
        });
        t.join();
        held.push_back(malloc(static_cast<size_t>(32 + held.size() % 512)));
        if (held.size() > 256) {
          for (void* p : held) free(p);
          held.clear();
        }
      }
      for (void* p : held) free(p);
    });
  }
  int started = 0;
  std::string first_error;
  for (int i = 0; i < 400; ++i) {
    auto pid = SpawnQemu({"/bin/true"}, {}, -1, {}, /*keeper=*/true);
    if (!pid.ok()) {
      if (first_error.empty()) first_error = pid.status().ToString();
      continue;
    }
    int st = 0;
    while (waitpid(*pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) ++started;
  }
  stop = true;
  for (auto& t : churn) t.join();
  EXPECT_EQ(started, 400) << first_error;
}

}  // namespace
}  // namespace sbx::microvm
