// Integration tests of the microvm backend (BK-5; docs/microvm.md) through sbx::Runtime, with
// the real QEMU (TCG), the real guest image and the real gateway: isolation tried from inside
// the guest, limits that bite (memory, pids, fds, timeout, disk), egress through the VM's tap,
// revert to the golden snapshot, suspend to a file, and nothing left behind after destroy and
// after 200 create/destroy cycles.
//
// Skips only when QEMU or the guest image is missing, with a LOUD reason; SBX_MICROVM_MUST_WORK=1
// (CI) turns a skip into a failure.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "backend/common/testing.h"
#include "sbx/runtime.h"

namespace sbx {
namespace {

namespace fs = std::filesystem;

using Env = backendtest::BackendEnv;
const auto* const kEnv =
    ::testing::AddGlobalTestEnvironment(new Env("microvm", "QEMU in cgroups, taps"));

pid_t ParentOf(pid_t pid) {
  std::ifstream st("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(st, line);)
    if (line.rfind("PPid:", 0) == 0) return std::stoi(line.substr(5));
  return -1;
}

// A QEMU of this process: its parent is us (unconfined) or the keeper we forked (confined: the
// init of QEMU's PID namespace, microvm_vm.cc SpawnQemu).
bool IsOurQemu(pid_t pid) {
  std::string cmd = backendtest::ReadQuietly("/proc/" + std::to_string(pid) + "/cmdline");
  if (cmd.find("qemu-system") == std::string::npos) return false;
  pid_t parent = ParentOf(pid);
  return parent == getpid() || (parent > 0 && ParentOf(parent) == getpid());
}

// One HTTP answer per connection on 127.0.0.1 (the mirror behind the gateway's proxy).
class TinyHttp {
 public:
  explicit TinyHttp(std::string body) : body_(std::move(body)) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    listen(fd_, 16);
    thread_ = std::thread([this] {
      while (!stop_) {
        int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) break;
        char buf[4096];
        (void)!read(c, buf, sizeof buf);
        std::string resp = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body_.size()) +
                           "\r\nConnection: close\r\n\r\n" + body_;
        (void)!write(c, resp.data(), resp.size());
        close(c);
      }
    });
  }
  ~TinyHttp() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  int port() const { return port_; }

 private:
  std::string body_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class Microvm : public backendtest::BackendTest {
 protected:
  Microvm() : BackendTest("microvm") {}
  void SetUp() override {
    SBX_SKIP_UNLESS_BACKEND_RUNS("SBX_MICROVM_MUST_WORK");
    rt_ = Env::rt();
  }
};

TEST_F(Microvm, RunsACommandInTheGuestAsTheSandboxUser) {
  ExecResult r = Run("id -u; pwd; uname -r; echo oops >&2; exit 3");
  EXPECT_EQ(r.status, ExecStatus::kOk) << r.reason << r.stderr_tail;
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.backend, "microvm");
  EXPECT_EQ(r.stdout_tail.rfind("1000\n/work\n", 0), 0u) << r.stdout_tail;
  EXPECT_EQ(r.stderr_tail, "oops\n");
  // BK-5: the guest's own kernel answers, not the host's.
  std::string host_release = backendtest::Capture("uname -r");
  EXPECT_EQ(r.stdout_tail.find(host_release), std::string::npos) << "the host kernel answered";
  for (double s : {r.stages.allocate, r.stages.initialize, r.stages.inject_context,
                   r.stages.execute, r.stages.collect, r.stages.destroy, r.stages.cleanup}) {
    EXPECT_GE(s, 0.0) << "LC-1: every stage is timed";
  }
  nlohmann::json info = rt_->Info();
  EXPECT_NE(info.dump().find("firecracker"), std::string::npos) << info.dump();
}

TEST_F(Microvm, EscapeAttemptsFailInsideTheGuest) {
  // FS-1..FS-3: a file the host holds, the host's processes, privileges, the system dirs.
  std::string canary = "/tmp/sbx-microvm-canary-" + std::to_string(getpid());
  { std::ofstream(canary) << "host-secret-" << getpid(); }
  ExecResult r = Run("cat " + canary + "; ls -d /proc/" + std::to_string(getpid()) +
                     "; ls /proc | grep -c '^[0-9]'; touch /bin/x /etc/x /usr/x; "
                     "touch /work/w /tmp/t && echo writable; grep CapEff /proc/self/status; "
                     "ls /dev; cat /proc/sys/kernel/hostname");
  fs::remove(canary);
  EXPECT_EQ(r.status, ExecStatus::kOk) << r.reason;
  EXPECT_EQ(r.stdout_tail.find("host-secret"), std::string::npos) << r.stdout_tail;
  EXPECT_EQ(r.stdout_tail.find("/proc/" + std::to_string(getpid()) + "\n"), std::string::npos);
  EXPECT_NE(r.stdout_tail.find("writable"), std::string::npos) << r.stdout_tail;
  EXPECT_NE(r.stdout_tail.find("CapEff:\t0000000000000000"), std::string::npos) << r.stdout_tail;
  EXPECT_NE(r.stderr_tail.find("/bin/x"), std::string::npos) << r.stderr_tail;
  EXPECT_NE(r.stderr_tail.find("/etc/x"), std::string::npos) << r.stderr_tail;
  // Its own PID namespace: a handful of processes (the shell, ls, grep), none of the guest's.
  size_t nl = r.stdout_tail.find('\n');
  ASSERT_NE(nl, std::string::npos);
  int procs = std::atoi(r.stdout_tail.c_str());
  EXPECT_GT(procs, 0);
  EXPECT_LE(procs, 5) << r.stdout_tail;
}

// The QEMUs of this process, by pid.
std::vector<pid_t> OurQemus() {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (IsOurQemu(std::stoi(name))) out.push_back(std::stoi(name));
  }
  return out;
}

TEST_F(Microvm, QemuItselfKeepsNothingOfRoot) {
  // The next wall after the guest: a guest that escaped into QEMU finds a process without
  // capabilities, under seccomp, in an empty chroot, as a uid no other VM shares.
  std::string id = Create();
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(Exec(id, "echo up").stdout_tail, "up\n");
  rt_->Drain();  // the spare's refill is done: no QEMU is between its fork and its drop
  std::vector<pid_t> qemus = OurQemus();
  ASSERT_FALSE(qemus.empty());
  std::set<std::string> uids;
  size_t live = 0;
  for (pid_t q : qemus) {
    std::ifstream st("/proc/" + std::to_string(q) + "/status");
    std::map<std::string, std::string> f;
    for (std::string line; std::getline(st, line);) {
      auto c = line.find(':');
      if (c == std::string::npos) continue;
      size_t v = line.find_first_not_of(" \t", c + 1);
      f[line.substr(0, c)] = v == std::string::npos ? "" : line.substr(v);
    }
    if (f["State"].rfind("Z", 0) == 0) continue;  // a reverted clone's QEMU being reaped
    ++live;
    EXPECT_EQ(f["CapEff"], "0000000000000000") << q;
    EXPECT_EQ(f["CapPrm"], "0000000000000000") << q;
    EXPECT_EQ(f["Seccomp"], "2") << q;
    EXPECT_EQ(f["NoNewPrivs"], "1") << q;
    std::string uid = f["Uid"].substr(0, f["Uid"].find_first_of(" \t"));
    EXPECT_NE(uid, "0") << q;
    uids.insert(uid);
    std::error_code ec;
    auto root = fs::read_symlink("/proc/" + std::to_string(q) + "/root", ec);
    EXPECT_NE(root.string(), "/") << q;
    EXPECT_NE(root.filename().string(), "") << q;
    EXPECT_EQ(root.filename().string(), "jail") << q;
  }
  EXPECT_GT(live, 0u);
  EXPECT_EQ(uids.size(), live) << "two QEMUs share a uid";
  ASSERT_TRUE(rt_->Destroy(id).ok());
}

TEST_F(Microvm, BadInputIsRefusedAndTheSandboxStaysUsable) {
  std::string id = Create();
  ASSERT_FALSE(id.empty());
  // stdin over one agent request (1 MiB): refused before it reaches the guest.
  auto big = rt_->Exec(id, ExecSpec{.command = "wc -c", .stdin_data = std::string(2 << 20, 'x')});
  EXPECT_FALSE(big.ok() && big->status == ExecStatus::kOk);
  if (!big.ok()) {
    EXPECT_EQ(big.status().code(), Code::kInvalidArgument) << big.status().ToString();
  }
  ExecResult after = Exec(id, "echo still-here");
  EXPECT_EQ(after.stdout_tail, "still-here\n") << after.reason;
  EXPECT_EQ(after.state, SandboxState::kRunning);
  ASSERT_TRUE(rt_->Destroy(id).ok());
}

TEST_F(Microvm, MemoryLimitEndsTheSandboxAndRevertRecovers) {
  // RES-2, RES-8: 160 MiB fits in 256 MiB; 288 MiB ends the sandbox (CRASHED); revert recovers.
  std::string id = Create({.memory_bytes = 256ll << 20});
  ASSERT_FALSE(id.empty());
  ExecResult under = Exec(id, "sbx-memhog 160");
  EXPECT_EQ(under.status, ExecStatus::kOk) << under.reason << under.stderr_tail;
  EXPECT_NE(under.stdout_tail.find("done 160 MiB"), std::string::npos) << under.stdout_tail;
  ExecResult over = Exec(id, "sbx-memhog 288; echo survived");
  EXPECT_EQ(over.status, ExecStatus::kResourceExceeded) << over.reason << over.stdout_tail;
  EXPECT_EQ(over.state, SandboxState::kCrashed);
  EXPECT_EQ(over.stdout_tail.find("survived"), std::string::npos);
  auto refused = rt_->Exec(id, ExecSpec{.command = "echo no"});
  EXPECT_FALSE(refused.ok() && refused->status == ExecStatus::kOk)
      << "a crashed sandbox ran a command";
  ASSERT_TRUE(rt_->Revert(id).ok());
  ExecResult after = Exec(id, "echo ok");
  EXPECT_EQ(after.stdout_tail, "ok\n") << after.reason;
  ASSERT_TRUE(rt_->Destroy(id).ok());
}

TEST_F(Microvm, PidsFdsAndTheTimeoutBite) {
  std::string id = Create({.pids = 40, .fds = 77});
  ASSERT_FALSE(id.empty());
  // RES-4: a fork bomb is held at the limit (its forks fail), the sandbox stays usable.
  ExecResult bomb = Exec(id, "sbx-forkbomb -n 200 -t 1", 20);
  EXPECT_NE(bomb.stdout_tail.find("\"fork_failures\""), std::string::npos) << bomb.stdout_tail;
  EXPECT_EQ(bomb.stdout_tail.find("\"fork_failures\":0"), std::string::npos) << bomb.stdout_tail;
  // RES-6: RLIMIT_NOFILE soft and hard.
  ExecResult fds = Exec(id, "ulimit -n; ulimit -Hn");
  EXPECT_EQ(fds.stdout_tail, "77\n77\n") << fds.stderr_tail;
  // RES-5: SIGTERM at the timeout, then the kill after the grace.
  ExecResult t = Exec(id, "trap 'echo got-term; exit 3' TERM; sleep 30 & wait", 0.5, 2);
  EXPECT_EQ(t.status, ExecStatus::kTimeout) << t.reason;
  EXPECT_NE(t.stdout_tail.find("got-term"), std::string::npos) << t.stdout_tail;
  ExecResult next = Exec(id, "echo next");
  EXPECT_EQ(next.stdout_tail, "next\n");
  ASSERT_TRUE(rt_->Destroy(id).ok());
}

TEST_F(Microvm, TheDiskQuotaHoldsForEveryWritablePlaceTogether) {
  // RES-3: /work, /tmp, /var/tmp and $HOME are one scratch space of the quota, not one each.
  std::string id = Create({.disk_bytes = 32ll << 20});
  ASSERT_FALSE(id.empty());
  ExecResult r = Exec(id,
                      "sbx-diskfill /work/a 12 && sbx-diskfill /tmp/b 12 && "
                      "sbx-diskfill $HOME/c 12 && echo all-fit");
  EXPECT_EQ(r.status, ExecStatus::kResourceExceeded) << r.reason << r.stdout_tail;
  EXPECT_EQ(r.stdout_tail.find("all-fit"), std::string::npos) << r.stdout_tail;
  ASSERT_TRUE(rt_->Revert(id).ok());
  ExecResult again = Exec(id, "sbx-diskfill /tmp/b 24 && echo fits");
  EXPECT_NE(again.stdout_tail.find("fits"), std::string::npos) << again.stdout_tail << again.reason;
  ASSERT_TRUE(rt_->Destroy(id).ok());
}

TEST_F(Microvm, CpuQuotaIsOnQemusHostCgroup) {
  // RES-1: QEMU runs in a host cgroup below the runtime's own, with the quota asked for.
  std::string id = Create({.cpu_millicores = 500});
  ASSERT_FALSE(id.empty());
  ExecResult r = Exec(id, "echo up");
  EXPECT_EQ(r.stdout_tail, "up\n");
  bool found = false;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator("/sys/fs/cgroup/cpu", ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    std::string p = it->path().string();
    if (it->path().filename().string().rfind("sb-vm-", 0) != 0 ||
        p.find("sandcheck-" + std::to_string(getpid()) + "-") == std::string::npos)
      continue;
    std::ifstream q(it->path() / "cpu.cfs_quota_us");
    long quota = 0;
    q >> quota;
    if (quota == 50000) found = true;
    it.disable_recursion_pending();
  }
  if (fs::exists("/sys/fs/cgroup/cpu")) {
    EXPECT_TRUE(found) << "no sb-vm-* cgroup with a 50 ms quota";
  }
  ASSERT_TRUE(rt_->Destroy(id).ok());
}

TEST_F(Microvm, EgressGoesThroughTheGatewayFromTheGuest) {
  // EGR-1, EGR-3, RES-7: the allowed name resolves and is fetched through the proxy; an address
  // meets the gateway's 403; an unlisted name does not resolve; after a revert as well.
  TinyHttp mirror("hello from the mirror");
  EgressPolicy policy;
  policy.rules = {{.kind = "http", .hosts = {"mirror.example"}, .ports = {80}}};
  std::string id =
      Create({}, policy, {{"mirror.example", "127.0.0.1:" + std::to_string(mirror.port())}});
  ASSERT_FALSE(id.empty());
  for (int i = 0; i < 2; ++i) {
    ExecResult ok = Exec(id, "wget -q -O- http://mirror.example/hello");
    EXPECT_EQ(ok.stdout_tail, "hello from the mirror") << ok.stderr_tail;
    ExecResult ip = Exec(id, "wget -q -O- http://203.0.113.7/ 2>&1; echo rc=$?");
    EXPECT_NE(ip.stdout_tail.find("403"), std::string::npos) << ip.stdout_tail;
    ExecResult name = Exec(id, "nslookup example.com 2>&1; echo rc=$?");
    EXPECT_NE(name.stdout_tail.find("NXDOMAIN"), std::string::npos) << name.stdout_tail;
    ASSERT_TRUE(rt_->Revert(id).ok());
  }
  nlohmann::json log = rt_->GatewayLog(id);
  EXPECT_NE(log.dump().find("203.0.113.7"), std::string::npos) << log.dump();
  ASSERT_TRUE(rt_->Destroy(id).ok());
  // Without a policy: the guest's network is down (SNAP-5).
  ExecResult none = Run("wget -q -O- http://203.0.113.7/ 2>&1; echo rc=$?");
  EXPECT_NE(none.stdout_tail.find("rc=1"), std::string::npos) << none.stdout_tail;
}

TEST_F(Microvm, RevertIsAFreshCloneAndSuspendKeepsTheState) {
  std::string id = Create();
  ASSERT_FALSE(id.empty());
  ExecResult a =
      Exec(id, "echo x > /work/f; echo y > /tmp/g; head -c 16 /dev/urandom | od -An -tx1");
  ASSERT_TRUE(rt_->Revert(id).ok());
  ExecResult b =
      Exec(id, "find /work /tmp -mindepth 1 | wc -l; head -c 16 /dev/urandom | od -An -tx1");
  EXPECT_EQ(b.stdout_tail.rfind("0\n", 0), 0u) << b.stdout_tail;
  // Every clone's RNG is reseeded from the host: two clones of one golden VM differ.
  EXPECT_NE(a.stdout_tail.substr(0, 20), b.stdout_tail.substr(2, 20));
  // SNAP-3: suspend writes the VM to a file and ends QEMU; resume restores it.
  Exec(id, "echo kept > /work/k");
  auto s = rt_->Suspend(id);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto r = rt_->Resume(id);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExecResult c = Exec(id, "cat /work/k");
  EXPECT_EQ(c.stdout_tail, "kept\n") << c.stderr_tail << c.reason;
  ASSERT_TRUE(rt_->Destroy(id).ok());
}

TEST_F(Microvm, ATenantFlooredToMicrovmGetsItWhateverItAsks) {
  // SEL-4, SEL-6: the tenant's floor raises every request to microvm; never weaker than asked.
  RuntimeOptions o;
  o.tenant_floors = {{"acme", "microvm"}};
  auto rt = Runtime::Open(o);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  for (std::string asked : {"", "native", "gvisor"}) {
    for (Trust t : {Trust::kFirstParty, Trust::kUntrusted}) {
      ExecRequest req;
      req.sandbox.backend = asked;
      req.sandbox.tenant = "acme";
      req.sandbox.trust = t;
      req.exec.command = "uname -r";
      ExecResult r = (*rt)->Run(req);
      EXPECT_EQ(r.status, ExecStatus::kOk) << asked << ": " << r.reason;
      EXPECT_EQ(r.backend, "microvm") << "asked '" << asked << "'";
    }
  }
  // Another tenant is not floored.
  ExecRequest other;
  other.sandbox.tenant = "globex";
  other.exec.command = "true";
  EXPECT_EQ((*rt)->Run(other).backend, "native");
}

TEST_F(Microvm, NothingIsLeftAfter200CreateDestroyCycles) {
  // A runtime of its own, closed at the end: then not even its spare may be left. The shared
  // runtime's spare (if any) is in both censuses.
  rt_->Drain();
  backendtest::Census before = backendtest::TakeCensus();
  {
    auto rt = Runtime::Open(RuntimeOptions{});
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    for (int i = 0; i < 200; ++i) {
      auto id = (*rt)->Create(SandboxSpec{.backend = "microvm"});
      ASSERT_TRUE(id.ok()) << "cycle " << i << ": " << id.status().ToString();
      ASSERT_TRUE((*rt)->Destroy(*id).ok()) << "cycle " << i;
    }
    auto id = (*rt)->Create(SandboxSpec{.backend = "microvm"});
    ASSERT_TRUE(id.ok());
    auto r = (*rt)->Exec(*id, ExecSpec{.command = "sleep 100 & echo x > /work/x"});
    EXPECT_TRUE(r.ok());
    ASSERT_TRUE((*rt)->Revert(*id).ok());
    ASSERT_TRUE((*rt)->Destroy(*id).ok());
    (*rt)->Drain();
    backendtest::Census during = backendtest::TakeCensus();
    // At most the closing runtime's own spare (one QEMU) beyond the baseline.
    EXPECT_LE(during.qemus, before.qemus + 1) << "during " << during;
  }
  backendtest::Census after = backendtest::TakeCensus();
  EXPECT_EQ(before, after) << "before " << before << " after " << after;
}

}  // namespace
}  // namespace sbx
