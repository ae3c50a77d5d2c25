// Over 600 lines: process plumbing, the floor containers, the local sandboxd and the rows in one
// file. Issue 36 step 2 splits it (the loop, the floor containers, the daemon through drivers/,
// the rendering in report/); until then the concerns are in that order below.
#include "run/command_lines.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string_view>

#include "common/stats.h"
#include "common/subprocess.h"
#include "sbx/http_client.h"

namespace sandcheck {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr double kCallTimeoutS = 60;    // one timed command (runsc do is ≈ 0.25 s here)
constexpr double kStartTimeoutS = 60;   // a floor container printing "ready"
constexpr double kReapTimeoutS = 10;    // a killed container's processes going away
constexpr double kProbeTimeoutS = 10;   // runsc do on a platform being probed

class OwnedFd {
 public:
  explicit OwnedFd(int fd = -1) : fd_(fd) {}
  OwnedFd(OwnedFd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  OwnedFd& operator=(OwnedFd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  ~OwnedFd() { Reset(); }
  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

std::string FindTool(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/sbin:/usr/bin:/sbin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string dir = p.substr(start, end - start);
    if (!dir.empty()) {
      std::string f = dir + "/" + name;
      if (::access(f.c_str(), X_OK) == 0) return f;
    }
    start = end + 1;
  }
  return "";
}

// A hybrid host: v1 controllers plus a cgroup2 at /sys/fs/cgroup/unified (crun 1.8 refuses it).
bool HybridUnified() {
  struct statfs sf {};
  return ::statfs("/sys/fs/cgroup/unified", &sf) == 0 &&
         static_cast<unsigned long>(sf.f_type) == CGROUP2_SUPER_MAGIC;
}

int PidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// Waits for `pid` (our child) to exit within timeout_s; kills its group on timeout. Returns the
// wait status, or -1 on timeout.
int WaitChild(pid_t pid, double timeout_s) {
  OwnedFd pfd(PidfdOpen(pid));
  if (pfd.get() >= 0) {
    struct pollfd p = {pfd.get(), POLLIN, 0};
    int ms = static_cast<int>(timeout_s * 1000);
    int r;
    while ((r = ::poll(&p, 1, ms)) < 0 && errno == EINTR) {
    }
    if (r == 0) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      int st = 0;
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      return -1;
    }
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return st;
}

std::string ReadAll(int fd, size_t max = 4096) {
  std::string out;
  if (fd < 0) return out;
  ::lseek(fd, 0, SEEK_SET);
  char buf[1024];
  ssize_t n;
  while (out.size() < max && (n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, n);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out.size() > 600 ? "…" + out.substr(out.size() - 600) : out;
}

// fork; in the child: its own process group, (optionally) a private mount namespace with the
// hybrid cgroup2 hidden, stdin /dev/null, stdout `out_fd` (or /dev/null), stderr `err_fd`, the
// default signal state, and execv. Only async-signal-safe calls after fork.
// runsc gets no TMPDIR (it uses /tmp): `runsc do` with TMPDIR set to a pytest temp directory
// or a directory of our scratch failed here ("cannot read client sync file"). Not understood
// yet; docs/performance.md says so.
pid_t Spawn(const CommandLineSpec& c, int out_fd, int err_fd, bool hide_unified) {
  std::vector<char*> args;
  for (const auto& a : c.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  bool strip_tmpdir = c.argv[0].ends_with("/runsc");
  std::vector<char*> env;
  for (char** e = environ; *e; ++e)
    if (!strip_tmpdir || !std::string_view(*e).starts_with("TMPDIR=")) env.push_back(*e);
  env.push_back(nullptr);
  int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    if (c.private_cgroup_view) {
      if (::unshare(CLONE_NEWNS) != 0) ::_exit(120);
      if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(121);
      if (hide_unified && ::mount("tmpfs", "/sys/fs/cgroup/unified", "tmpfs",
                                  MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k") != 0)
        ::_exit(122);
    }
    ::dup2(devnull, 0);
    ::dup2(out_fd >= 0 ? out_fd : devnull, 1);
    ::dup2(err_fd >= 0 ? err_fd : devnull, 2);
    for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(args[0], args.data(), env.data());
    ::_exit(127);
  }
  ::close(devnull);
  if (pid > 0) ::setpgid(pid, pid);  // no race with the child's own setpgid: same result
  return pid;
}

std::string DescribeStatus(int st, int err_fd, bool private_view, double timeout_s) {
  if (st < 0) return fmt::format("did not finish within {:g} s", timeout_s);
  std::string why;
  if (WIFEXITED(st)) {
    int code = WEXITSTATUS(st);
    if (private_view && code >= 120 && code <= 122)
      why = "could not make its private mount namespace";
    else
      why = code == 127 ? "could not be executed" : fmt::format("exited {}", code);
  } else {
    why = fmt::format("killed by signal {}", WTERMSIG(st));
  }
  std::string err = ReadAll(err_fd);
  return err.empty() ? why : why + ": " + err;
}

// One timed run: seconds, or the reason it failed in `why`.
double TimedRun(const CommandLineSpec& c, bool hide_unified, std::string* why,
                double timeout_s = kCallTimeoutS) {
  OwnedFd err(::memfd_create("sandcheck-cli-stderr", MFD_CLOEXEC));
  auto t0 = Clock::now();
  pid_t pid = Spawn(c, -1, err.get(), hide_unified);
  if (pid < 0) {
    *why = fmt::format("fork: {}", std::strerror(errno));
    return -1;
  }
  int st = WaitChild(pid, timeout_s);
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    *why = DescribeStatus(st, err.get(), c.private_cgroup_view, timeout_s);
    return -1;
  }
  return s;
}

// A floor container: `<runtime> run` in the foreground (it stays the parent of the container's
// processes), started when its init printed "ready".
struct FloorContainer {
  std::string id;
  std::vector<std::string> runtime;  // runtime argv prefix (with its global options)
  bool private_view = false;
  pid_t pid = -1;  // the foreground `run`
  std::string error;
};

bool WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  return static_cast<bool>(f);
}

// busybox-static as /bin/{busybox,sh,true,sleep,echo}; init prints "ready" and sleeps.
std::string MakeBundle(const std::string& dir) {
  std::string busybox;
  for (const char* b : {"/bin/busybox", "/usr/bin/busybox"})
    if (::access(b, X_OK) == 0) busybox = b;
  if (busybox.empty()) return "no busybox on this host (Debian: busybox-static)";
  std::error_code ec;
  std::filesystem::create_directories(dir + "/rootfs/bin", ec);
  for (const char* d : {"/rootfs/proc", "/rootfs/dev", "/rootfs/tmp"})
    std::filesystem::create_directories(dir + d, ec);
  std::filesystem::copy_file(busybox, dir + "/rootfs/bin/busybox", ec);
  if (ec) return "copying busybox: " + ec.message();
  for (const char* l : {"sh", "true", "sleep", "echo"})
    std::filesystem::create_symlink("busybox", dir + "/rootfs/bin/" + l, ec);
  json config = {
      {"ociVersion", "1.0.2"},
      {"process",
       {{"terminal", false},
        {"user", {{"uid", 0}, {"gid", 0}}},
        {"args", {"/bin/sh", "-c", "echo ready; exec sleep 1000000"}},
        {"env", {"PATH=/bin"}},
        {"cwd", "/"},
        {"noNewPrivileges", true}}},
      {"root", {{"path", "rootfs"}, {"readonly", true}}},
      {"hostname", "sandcheck-floor"},
      {"mounts",
       {{{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}},
        {{"destination", "/dev"},
         {"type", "tmpfs"},
         {"source", "tmpfs"},
         {"options", {"nosuid", "mode=755", "size=64k"}}}}},
      {"linux",
       {{"namespaces",
         {{{"type", "pid"}}, {{"type", "mount"}}, {{"type", "ipc"}}, {{"type", "uts"}},
          {{"type", "network"}}}}}}};
  if (!WriteText(dir + "/config.json", config.dump(2))) return "writing the bundle's config";
  return "";
}

void StartContainer(FloorContainer& fc, const std::string& bundle, bool hide_unified) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    fc.error = std::string("pipe: ") + std::strerror(errno);
    return;
  }
  OwnedFd r(p[0]), w(p[1]);
  OwnedFd err(::memfd_create("sandcheck-floor-stderr", MFD_CLOEXEC));
  CommandLineSpec c;
  c.argv = fc.runtime;
  for (const char* a : {"run", "--bundle"}) c.argv.push_back(a);
  c.argv.push_back(bundle);
  c.argv.push_back(fc.id);
  c.private_cgroup_view = fc.private_view;
  fc.pid = Spawn(c, w.get(), err.get(), hide_unified);
  w.Reset();
  if (fc.pid < 0) {
    fc.error = std::string("fork: ") + std::strerror(errno);
    return;
  }
  auto line = ReadLine(r.get(), kStartTimeoutS);
  if (!line.ok() || line->find("ready") == std::string::npos) {
    std::string e = ReadAll(err.get());
    fc.error = fmt::format("the floor container did not start ({}){}",
                           line.ok() ? "no ready line" : line.status().ToString(),
                           e.empty() ? "" : ": " + e);
  }
}

void StopContainer(FloorContainer& fc, bool hide_unified) {
  if (fc.pid <= 0) return;
  std::string ignored;
  for (std::vector<std::string> verb :
       {std::vector<std::string>{"kill", fc.id, "KILL"},
        std::vector<std::string>{}, /* wait for the foreground run */
        std::vector<std::string>{"delete", fc.runtime[0].ends_with("runsc") ? "-force" : "-f",
                                 fc.id}}) {
    if (verb.empty()) {
      WaitChild(fc.pid, kReapTimeoutS);
      fc.pid = -1;
      continue;
    }
    CommandLineSpec c;
    c.argv = fc.runtime;
    c.argv.insert(c.argv.end(), verb.begin(), verb.end());
    c.private_cgroup_view = fc.private_view;
    TimedRun(c, hide_unified, &ignored);
  }
}

// Processes whose command line names `dir` (the floor containers' runtimes, runsc's Sentry and
// Gofer): killed, and waited for until they are gone (bounded).
void KillProcessesNaming(const std::string& dir) {
  std::vector<OwnedFd> waiting;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    pid_t pid = std::stoi(name);
    if (pid == ::getpid()) continue;
    std::ifstream f(e.path() / "cmdline");
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (cmd.find(dir) == std::string::npos) continue;
    OwnedFd pfd(PidfdOpen(pid));
    ::kill(pid, SIGKILL);
    if (pfd.get() >= 0) waiting.push_back(std::move(pfd));
  }
  auto deadline = Clock::now() + std::chrono::duration<double>(kReapTimeoutS);
  for (auto& pfd : waiting) {
    struct pollfd p = {pfd.get(), POLLIN, 0};
    int ms = static_cast<int>(
        std::chrono::duration<double, std::milli>(deadline - Clock::now()).count());
    if (ms > 0) ::poll(&p, 1, ms);
  }
}

// A sandboxd of the harness's own for the rows "through a local sandboxd" (issue 16: "when a
// local sandboxd is running, sandboxctl run may use its warm pool"): its config, token and
// socket live in the scratch directory; it is started once, and stopped (SIGTERM: it destroys
// every sandbox and removes its socket) before the scratch directory goes.
struct LocalDaemon {
  pid_t pid = -1;
  std::string socket, token, error;
};

std::string RandomToken() {
  unsigned char b[16];
  std::string out;
  if (::getrandom(b, sizeof b, 0) != static_cast<ssize_t>(sizeof b)) return out;
  for (unsigned char c : b) out += fmt::format("{:02x}", c);
  return "cli-" + out;
}

void StartDaemon(LocalDaemon& d, const std::string& sandboxd, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  d.token = RandomToken();
  if (ec || d.token.empty()) {
    d.error = "cannot prepare its directory or token";
    return;
  }
  // A small pool: every run of an untrusted (default) tool takes a sandbox that is then
  // discarded and replaced in the background (POOL-5); rows take turns, so two are enough.
  json config = {{"tenants", {{"cli", {{"token", d.token}}}}}, {"pool_ceiling", 2}};
  std::string cfg = dir + "/sandboxd.json";
  int fd = ::open(cfg.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  std::string text = config.dump();
  if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    if (fd >= 0) ::close(fd);
    d.error = fmt::format("cannot write {}", cfg);
    return;
  }
  ::close(fd);
  d.socket = dir + "/sandboxd.sock";
  OwnedFd err(::memfd_create("sandcheck-sandboxd-stderr", MFD_CLOEXEC));
  CommandLineSpec c;
  c.argv = {sandboxd, "--config", cfg, "--socket", d.socket};
  d.pid = Spawn(c, -1, err.get(), false);
  if (d.pid < 0) {
    d.error = std::string("fork: ") + std::strerror(errno);
    return;
  }
  // The socket is renamed into place once the daemon serves (docs/sandboxd.md): that event,
  // bounded, or the daemon's exit.
  auto deadline = Clock::now() + std::chrono::duration<double>(kStartTimeoutS);
  struct stat st {};
  while (::stat(d.socket.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
    int status = 0;
    if (::waitpid(d.pid, &status, WNOHANG) == d.pid) {
      d.pid = -1;
      d.error = "sandboxd exited at start: " + DescribeStatus(status, err.get(), false, 0);
      return;
    }
    if (Clock::now() > deadline) {
      d.error = fmt::format("sandboxd did not serve within {:g} s", kStartTimeoutS);
      return;
    }
    ::usleep(10000);
  }
}

// After a run through the daemon, untimed: until its background work (the used sandbox's
// reclaim, the pool's refill) is done, as between two commands a person types. Without it the
// refill of one row's run fell on the next rows (fork+exec itself measured 3x slower), and
// the daemon's rows the refill of their own previous run. Polls GET /v1/info's
// capacity.background_outstanding (every 5 ms, bounded); false on the bound or an error.
bool WaitDaemonIdle(const LocalDaemon& d) {
  auto endpoint = sbx::http::ParseEndpoint("unix:" + d.socket);
  if (!endpoint.ok()) return false;
  sbx::http::Request req;
  req.path = "/v1/info";
  req.headers = {{"Authorization", "Bearer " + d.token}};
  auto deadline = Clock::now() + std::chrono::duration<double>(kStartTimeoutS);
  while (Clock::now() < deadline && !Interrupted()) {
    auto r = sbx::http::Call(*endpoint, req, {.timeout_s = 10, .who = "the local sandboxd"});
    if (!r.ok() || r->status != 200) return false;
    json info = json::parse(r->body, nullptr, false);
    if (!info.is_object()) return false;
    json outstanding = info.value("capacity", json::object()).value("background_outstanding", json());
    if (!outstanding.is_number_integer()) return false;
    if (outstanding.get<int64_t>() == 0) return true;
    ::usleep(5000);
  }
  return false;
}

void StopDaemon(LocalDaemon& d) {
  if (d.pid <= 0) return;
  ::kill(d.pid, SIGTERM);
  if (WaitChild(d.pid, kStartTimeoutS) < 0)
    d.error = "sandboxd did not stop within its bound after SIGTERM: killed";
  d.pid = -1;
}

// The first platform of systrap, kvm, ptrace (the reference's order of preference, faster
// first; SBX_GVISOR_PLATFORM, the reference's override, goes first) with which `runsc do
// /bin/true` works. A probe is bounded: kvm with a /dev/kvm that does not work (this machine
// kind) does not fail, runsc waits for a sandbox that never comes up. Each probe has a state
// root of its own, and what a failed one left running is killed before the next.
std::string RunscPlatform(const std::string& runsc, const std::string& work, std::string* why) {
  std::vector<std::string> order = {"systrap", "kvm", "ptrace"};
  if (const char* env = std::getenv("SBX_GVISOR_PLATFORM"); env && *env)
    order.insert(order.begin(), env);
  for (const std::string& platform : order) {
    CommandLineSpec c;
    std::string root = work + "/probe-" + platform;
    c.argv = {runsc, "--root", root, "--platform=" + platform, "--network=none", "do",
              "/bin/true"};
    std::string w;
    if (TimedRun(c, false, &w, kProbeTimeoutS) >= 0) return platform;
    KillProcessesNaming(root);
    *why += fmt::format("{}{}: {}", why->empty() ? "" : "; ", platform, w);
  }
  return "";
}

}  // namespace

std::vector<CommandLineRow> MeasureCommandLines(const CommandLineOptions& o) {
  auto progress = [&](const std::string& s) {
    if (o.progress) o.progress(s);
  };
  std::vector<CommandLineRow> rows;
  auto add = [&](CommandLineSpec spec, std::string skip = "") {
    rows.push_back({std::move(spec), {}, std::move(skip)});
  };
  bool hide_unified = HybridUnified();
  // State roots and the bundle in one scratch directory with a short path: runsc's sockets live below its --root, and a unix
  // socket's path has 108 bytes at most (a pytest TMPDIR made runsc fail to start).
  std::string work;
  for (std::string base : {"/var/tmp/sandcheck-cli-XXXXXX", "/tmp/sandcheck-cli-XXXXXX"}) {
    if (::mkdtemp(base.data())) {
      work = base;
      break;
    }
  }
  std::string tmp_dir = "/tmp";  // runsc's (Spawn gives it no TMPDIR)
  std::set<std::string> tmp_before;
  {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(tmp_dir, ec))
      tmp_before.insert(e.path().filename());
  }

  add({"fork-exec", "fork+exec /bin/true", "floor", "", {"/bin/true"}});
  if (std::string bwrap = FindTool("bwrap"); !bwrap.empty()) {
    add({"bwrap", "bwrap --unshare-all /bin/true", "oneshot", "",
         {bwrap, "--unshare-all", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
          "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc",
          "--dev", "/dev", "/bin/true"}});
  } else {
    add({"bwrap", "bwrap --unshare-all /bin/true", "oneshot", "", {}}, "no bwrap on PATH");
  }
  std::string runsc = FindTool("runsc"), runsc_platform, runsc_why;
  if (runsc.empty()) runsc_why = "no runsc on PATH";
  if (!runsc.empty() && !work.empty()) {
    runsc_platform = RunscPlatform(runsc, work, &runsc_why);
    runsc_why = runsc_platform.empty() ? "runsc do fails on every platform: " + runsc_why : "";
  }
  std::vector<std::string> runsc_base = {runsc, "--root", work + "/runsc",
                                         "--platform=" + runsc_platform, "--network=none",
                                         "--ignore-cgroups"};
  add({"runsc-do", fmt::format("runsc do /bin/true ({})", runsc_platform.empty() ? "-" : runsc_platform),
       "oneshot", "gvisor",
       {runsc, "--root", work + "/runsc-do", "--platform=" + runsc_platform, "--network=none", "do",
        "/bin/true"}},
      runsc_why);
  if (!o.sandboxctl.empty()) {
    add({"sandboxctl-info", "sandboxctl info", "oneshot", "", {o.sandboxctl, "info"}});
    add({"sandboxctl-run", "sandboxctl run -- true", "oneshot", "default",
         {o.sandboxctl, "run", "--", "true"}});
    for (const std::string& b : o.backends) {
      add({"sandboxctl-run-" + b, fmt::format("sandboxctl run --backend {} -- true", b), "oneshot",
           b, {o.sandboxctl, "run", "--backend", b, "--", "true"}});
    }
  }
  // The same commands through a local sandboxd's warm pool (sandboxctl --server).
  LocalDaemon daemon;
  if (!o.sandboxctl.empty() && !o.sandboxd.empty()) {
    if (work.empty()) {
      daemon.error = "no scratch directory";
    } else {
      progress("starting a local sandboxd for the sandboxctl --server rows");
      StartDaemon(daemon, o.sandboxd, work + "/sandboxd");
    }
    std::vector<std::string> base = {o.sandboxctl, "--server", "unix:" + daemon.socket,
                                     "--token", daemon.token, "run"};
    auto server_row = [&](const std::string& id, const std::string& b) {
      CommandLineSpec spec{id,
                           b.empty() ? "sandboxctl --server (local sandboxd) run -- true"
                                     : fmt::format("sandboxctl --server (local sandboxd) run "
                                                   "--backend {} -- true", b),
                           "oneshot", b.empty() ? "default" : b, base};
      if (!b.empty()) {
        spec.argv.push_back("--backend");
        spec.argv.push_back(b);
      }
      spec.argv.push_back("--");
      spec.argv.push_back("true");
      add(spec, daemon.error);
    };
    server_row("sandboxctl-server-run", "");
    for (const std::string& b : o.backends) server_row("sandboxctl-server-run-" + b, b);
  }

  // The runtime-exec floors: a container of each runtime, started by the harness.
  std::string bundle_error = work.empty() ? "no scratch directory: " + std::string(std::strerror(errno))
                                          : MakeBundle(work + "/bundle");
  std::vector<FloorContainer> containers;
  std::string crun = FindTool("crun");
  {
    FloorContainer fc{"sandcheck-floor-crun", {crun, "--root", work + "/crun", "--cgroup-manager=disabled"},
                      true};
    CommandLineSpec spec{"crun-exec", "crun exec ID /bin/true", "runtime-exec", "oci", fc.runtime, true};
    std::string skip = crun.empty() ? "no crun on PATH" : bundle_error;
    if (skip.empty()) {
      progress("starting a crun container for the crun exec floor");
      StartContainer(fc, work + "/bundle", hide_unified);
      skip = fc.error;
    }
    for (const char* a : {"exec", "sandcheck-floor-crun", "/bin/true"}) spec.argv.push_back(a);
    add(spec, skip);
    containers.push_back(std::move(fc));
  }
  {
    FloorContainer fc{"sandcheck-floor-runsc", runsc_base, false};
    CommandLineSpec spec{"runsc-exec",
                         fmt::format("runsc exec ID /bin/true ({})", runsc_platform.empty() ? "-" : runsc_platform),
                         "runtime-exec", "gvisor", runsc_base, false};
    std::string skip = !runsc_why.empty() ? runsc_why : bundle_error;
    if (skip.empty()) {
      progress("starting a runsc container for the runsc exec floor");
      StartContainer(fc, work + "/bundle", hide_unified);
      skip = fc.error;
    }
    for (const char* a : {"exec", "sandcheck-floor-runsc", "/bin/true"}) spec.argv.push_back(a);
    add(spec, skip);
    containers.push_back(std::move(fc));
  }

  // Warm-up (caches, probe answers): a row whose warm-up fails is reported, not measured.
  auto through_daemon = [](const CommandLineRow& r) {
    return r.spec.id.rfind("sandboxctl-server-", 0) == 0;
  };
  auto settle = [&](CommandLineRow& r) {
    if (through_daemon(r) && !WaitDaemonIdle(daemon) && r.skip.empty())
      r.skip = "the local sandboxd did not finish its background work (reclaim, pool refill) "
               "within its bound";
  };
  for (auto& r : rows) {
    if (!r.skip.empty()) continue;
    std::string why;
    if (TimedRun(r.spec, hide_unified, &why) < 0) r.skip = "its warm-up run failed: " + why;
    settle(r);
  }
  std::vector<size_t> live;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].skip.empty()) live.push_back(i);
  for (int round = 0; round < o.rounds && !live.empty() && !Interrupted(); ++round) {
    size_t k = static_cast<size_t>(round) % live.size();
    for (size_t j = 0; j < live.size(); ++j) {
      CommandLineRow& r = rows[live[(k + j) % live.size()]];
      if (!r.skip.empty()) continue;
      std::string why;
      double s = TimedRun(r.spec, hide_unified, &why);
      if (s < 0) {
        r.skip = fmt::format("failed in round {}: {}", round + 1, why);
        r.samples.clear();
      } else {
        r.samples.push_back(s);
        settle(r);
      }
    }
    progress(fmt::format("command lines: round {}/{}", round + 1, o.rounds));
  }
  for (auto& fc : containers) StopContainer(fc, hide_unified);
  StopDaemon(daemon);
  if (!work.empty()) {
    KillProcessesNaming(work);
    std::error_code ec;
    std::filesystem::remove_all(work, ec);
  }
  // runsc do leaves an empty runsc-do<N> directory in /tmp: ours to remove.
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(tmp_dir, ec)) {
    std::string n = e.path().filename();
    if (n.rfind("runsc-do", 0) == 0 && !tmp_before.count(n)) std::filesystem::remove_all(e.path(), ec);
  }
  return rows;
}

json CommandLinesJson(const std::vector<CommandLineRow>& rows, int rounds, const json& comparison,
                      const std::string& ours_target) {
  std::map<std::string, const CommandLineRow*> by_id;
  for (const auto& r : rows)
    if (r.skip.empty() && !r.samples.empty()) by_id[r.spec.id] = &r;
  auto p = [&](const std::string& id, double q) {
    auto it = by_id.find(id);
    return it == by_id.end() ? 0.0 : Percentile(it->second->samples, q);
  };
  auto ratio = [](double a, double b) { return a > 0 && b > 0 ? json(a / b) : json(nullptr); };
  json out = {{"rounds", rounds}, {"rows", json::array()}, {"warm_vs_runtime_cli", json::array()},
              {"goals", json::array()}};
  double bwrap = p("bwrap", 50), runsc_do = p("runsc-do", 50);
  double floor50 = p("fork-exec", 50), floor95 = p("fork-exec", 95);
  for (const auto& r : rows) {
    json row = {{"id", r.spec.id}, {"label", r.spec.label}, {"role", r.spec.role},
                {"backend", r.spec.backend}};
    if (!r.skip.empty() || r.samples.empty()) {
      row["skip"] = r.skip.empty() ? "no samples (interrupted)" : r.skip;
      out["rows"].push_back(row);
      continue;
    }
    double p50 = Percentile(r.samples, 50), p95 = Percentile(r.samples, 95);
    row["count"] = r.samples.size();
    row["p50"] = p50;
    row["p95"] = p95;
    row["samples"] = r.samples;
    row["p50_over_bwrap"] = ratio(p50, bwrap);
    bool gvisor_like = r.spec.backend == "gvisor";
    row["p50_over_runsc_do"] = gvisor_like ? ratio(p50, runsc_do) : json(nullptr);
    row["p50_over_floor"] = ratio(p50, floor50);
    row["p95_over_floor"] = ratio(p95, floor95);
    out["rows"].push_back(row);
  }
  // Each container backend's warm exec against the bare runtime CLI it would otherwise run.
  for (const auto& r : rows) {
    if (r.spec.role != "runtime-exec" || !by_id.count(r.spec.id)) continue;
    for (const auto& tg : comparison.value("targets", json::array())) {
      if (tg.value("id", "") != "warm-start") continue;
      for (const auto& row : tg["rows"]) {
        if (row.value("target", "") != ours_target || row.value("backend", "") != r.spec.backend ||
            !row["p50"].is_number())
          continue;
        double w50 = row["p50"], w95 = row["p95"];
        double c50 = p(r.spec.id, 50), c95 = p(r.spec.id, 95);
        out["warm_vs_runtime_cli"].push_back({{"backend", r.spec.backend},
                                              {"warm_p50", w50},
                                              {"warm_p95", w95},
                                              {"cli", r.spec.label},
                                              {"cli_p50", c50},
                                              {"cli_p95", c95},
                                              {"p50_ratio", ratio(w50, c50)},
                                              {"p95_ratio", ratio(w95, c95)}});
      }
    }
  }
  // Issue 16's goals for the one-shot CLI (p50 ÷ p50, same run): no slower than the tool a user
  // would otherwise type.
  auto goal = [&](const std::string& text, const std::string& ours, const std::string& theirs) {
    if (!by_id.count(ours) || !by_id.count(theirs)) return;
    double r = p(ours, 50) / p(theirs, 50);
    out["goals"].push_back({{"goal", text}, {"ratio", r}, {"met", r <= 1.0}});
  };
  goal("`sandboxctl run -- true` no slower than `bwrap --unshare-all` (p50)", "sandboxctl-run",
       "bwrap");
  goal("`sandboxctl run --backend gvisor -- true` no slower than `runsc do` (p50)",
       "sandboxctl-run-gvisor", "runsc-do");
  goal("`sandboxctl --server` (a local sandboxd's warm pool) `run -- true` no slower than "
       "`bwrap --unshare-all` (p50)",
       "sandboxctl-server-run", "bwrap");
  goal("`sandboxctl --server` (a local sandboxd's warm pool) `run --backend gvisor -- true` no "
       "slower than `runsc do` (p50)",
       "sandboxctl-server-run-gvisor", "runsc-do");
  return out;
}

namespace {
std::string Ms(double s) {
  return s >= 1 ? fmt::format("{:.2f} s", s) : fmt::format("{:.1f} ms", s * 1e3);
}
std::string X(const json& v) {
  return v.is_number() ? fmt::format("{:.2f}×", v.get<double>()) : std::string();
}
}  // namespace

std::string CommandLinesMarkdown(const json& c) {
  if (!c.is_object()) return "";
  std::string out = fmt::format(
      "### One command from the command line, and the runtime CLI floors\n\n"
      "{} rounds, every row once per round in a rotating order; harness clock from fork() to "
      "waitpid(). `runtime-exec` rows are a bare runtime CLI exec into a container the harness "
      "started (busybox rootfs, no network, no cgroups): what a container backend pays per "
      "command if it runs the runtime CLI.\n\n"
      "| command | role | n | p50 | p95 | p50 ÷ bwrap | p50 ÷ runsc do | p50 ÷ fork+exec |\n"
      "|---|---|---|---|---|---|---|---|\n",
      c.value("rounds", 0));
  std::vector<std::string> skips;
  for (const auto& r : c["rows"]) {
    if (r.contains("skip")) {
      skips.push_back(fmt::format("`{}`: {}", r.value("label", ""), r.value("skip", "")));
      continue;
    }
    out += fmt::format("| `{}` | {} | {} | {} | {} | {} | {} | {} |\n", r.value("label", ""),
                       r.value("role", ""), r.value("count", 0), Ms(r["p50"]), Ms(r["p95"]),
                       X(r["p50_over_bwrap"]), X(r["p50_over_runsc_do"]), X(r["p50_over_floor"]));
  }
  if (!skips.empty()) {
    out += "\nNot measured:\n";
    for (const auto& s : skips) out += "- " + s + "\n";
  }
  if (!c["warm_vs_runtime_cli"].empty()) {
    out +=
        "\nWarm exec (NFR-1 warm-start, ours) against the runtime CLI it replaces:\n\n"
        "| backend | warm exec p50 / p95 | runtime CLI | its p50 / p95 | p50 ratio | p95 ratio |\n"
        "|---|---|---|---|---|---|\n";
    for (const auto& w : c["warm_vs_runtime_cli"])
      out += fmt::format("| {} | {} / {} | `{}` | {} / {} | {} | {} |\n", w.value("backend", ""),
                         Ms(w["warm_p50"]), Ms(w["warm_p95"]), w.value("cli", ""),
                         Ms(w["cli_p50"]), Ms(w["cli_p95"]), X(w["p50_ratio"]), X(w["p95_ratio"]));
  }
  if (!c["goals"].empty()) {
    out += "\nGoals (issue 16):\n\n";
    for (const auto& g : c["goals"])
      out += fmt::format("- {}: {} — {}\n", g.value("goal", ""), X(g["ratio"]),
                         g.value("met", false) ? "met" : "**not met**");
  }
  return out + "\n";
}

}  // namespace sandcheck
