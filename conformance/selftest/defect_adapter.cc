// Over 600 lines on purpose: every planted defect in one adapter, so one binary (and one
// list, --list) holds them all.
// sandcheck-defect: the suite's self-test (docs/selftest.md). An adapter (protocol v1,
// docs/adapters.md) in front of the REAL reference runtime — a sandboxd reached through
// sandcheck's own HTTP driver — that plants ONE known defect, the kind a runtime really ships:
// a limit other than the one asked for, a revert that keeps state, an OOM reported as success,
// names or IPs that get out. conformance/selftest/defects.json says which checks each defect
// must fail, and that no other check may fail; tests/e2e/test_selftest.py holds the suite to it.
//
//   defect-NAME OP        (a link to this binary; or SANDCHECK_DEFECT=NAME sandcheck-defect OP)
//   $SANDCHECK_SELFTEST_TARGET  the runtime behind it: unix:PATH or http://HOST:PORT (sandboxd)
//   $SANDCHECK_SELFTEST_TOKEN   its bearer token
//   $SANDCHECK_SELFTEST_STATE   a directory for what a defect remembers per sandbox
//
// Exit codes as every adapter: 0 done, 1 the runtime behind failed, 2 bad input, 64 unknown op.
// NOT a runtime: a test double for sandcheck's checks. Every byte of traffic still goes through
// the reference runtime's own network namespace and gateway (the rewrites below point a request
// at a host the sandbox may reach; nothing is let out that the gateway would not let out).
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/subprocess.h"
#include "drivers/target.h"

extern char** environ;

namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using sandcheck::ExecAnswer;
using sandcheck::Target;

// Every defect, with what it does. The names are the ones of defects.json.
const std::map<std::string, std::string>& Defects() {
  static const std::map<std::string, std::string> d = {
      {"faithful", "none: every call goes to the runtime unchanged (the control)"},
      {"no-network", "the sandbox gets no egress at all: the allow list is dropped (EGR-1)"},
      {"dns-open",
       "every name resolves: a name the allow list does not hold is answered as an allowed one "
       "(EGR-2)"},
      {"ip-egress-open",
       "requests to IP literals get through: they reach an allowed host instead of the gateway's "
       "403 (EGR-3)"},
      {"no-revert", "revert answers success and does nothing (SNAP-2)"},
      {"partial-revert",
       "revert removes the visible files of /work only; hidden files, /tmp, $HOME, processes "
       "and sockets stay (SNAP-2, LC-10); a crashed sandbox is reverted for real"},
      {"revert-by-wiping",
       "revert kills every process of the sandbox and empties every place it can write (/work, "
       "/tmp, /var/tmp, /dev/shm, /run, $HOME), and keeps the sandbox: the kernel objects of its "
       "IPC namespace (System V shared memory, queues, semaphores, POSIX queues) stay (SNAP-2, "
       "LC-10); a crashed sandbox is reverted for real"},
      {"revert-spares-hidden",
       "revert kills every process it can see, empties every place the sandbox can write and "
       "removes its IPC objects, and keeps the sandbox; a command that leaves processes behind "
       "(`sbx-canary plant`) runs in the sandbox's namespaces but a PID namespace of its own, so "
       "what it left is in no later command's process list and the revert never sees it "
       "(SNAP-2, LC-10); a crashed sandbox is reverted for real"},
      {"memory-limit-doubled", "the memory limit applied is twice the one asked for (RES-2)"},
      {"memory-limit-halved", "the memory limit applied is half the one asked for (RES-2)"},
      {"cpu-limit-halved", "the CPU quota applied is half the one asked for (RES-1)"},
      {"lies-about-oom",
       "a breached memory limit is reported as success: status ok, RUNNING, exit 0 (RES-8)"},
      {"pids-limit-quadrupled", "the pids limit applied is four times the one asked for (RES-4)"},
      {"pids-checked-after",
       "no pids limit is applied; a command whose process peak (the usage report) passed the one "
       "asked for is reported afterwards as resource_exceeded and its sandbox as crashed: a "
       "sandbox ended, but not by a pids limit (RES-4)"},
      {"destroy-leaves-processes",
       "destroy answers success and leaves the sandbox and its processes running until the "
       "next create (LC-7)"},
      {"destroy-spares-guests",
       "destroy answers success and leaves a sandbox on gvisor or microvm running until the "
       "next create, where the host's process table cannot show what it holds (LC-7)"},
      {"secret-on-disk", "secrets are also written to /tmp/.secrets inside the sandbox (LC-4)"},
      // Wrong limits, not missing ones (the limits scenario): the limit bites, at another value.
      {"timeout-doubled", "the timeout applied is twice the one asked for (RES-5)"},
      {"memory-limit-shared",
       "one memory budget for all the runtime's sandboxes: a sandbox made while others hold "
       "memory gets the limit asked for less what they hold (RES-2)"},
      {"cpu-cap-per-thread",
       "the CPU cap asked for holds each thread, not the sandbox (a cap per vCPU does the same): "
       "while a command runs, every thread of the sandbox is moved into a cgroup of its own with "
       "the quota asked for (cgroup v1 moves threads one by one), and the sandbox's own cgroup "
       "gets the quota times the host's CPUs; the throttled time reported is the threads' sum "
       "(RES-1)"},
      {"pids-limit-shared",
       "one pids budget for all the runtime's sandboxes (a per-user RLIMIT_NPROC does the same): "
       "a sandbox made while others hold processes gets the limit asked for less what they hold "
       "(RES-4)"},
      {"memory-limit-per-process",
       "the memory limit holds each process (RLIMIT_AS), not the sandbox: a process that reaches "
       "it ends the sandbox as resource_exceeded, but many processes together may pass it (RES-2)"},
      {"disk-quota-per-file",
       "the disk quota holds each file, not the sandbox: a file that reaches it ends the sandbox "
       "as resource_exceeded, but many files together may pass it (RES-3)"},
      {"suspend-noop",
       "suspend and resume answer success with plausible times and do nothing: the sandbox's "
       "processes run on while it is \"suspended\" (SNAP-3)"},
      {"resume-restarts",
       "resume brings the sandbox back from its golden state, not from the suspended one: the "
       "processes it had are restarted and /work is empty (SNAP-3)"},
      {"timeout-spares-daemons",
       "the timeout ends the command's own process (SIGTERM, then SIGKILL after 1 s) and "
       "nothing it started: setsid'd children run on; each command runs in a PID namespace of "
       "its own, so the next one's process list does not show them (RES-5, FAIL-4)"},
      {"shared-tmp-live",
       "the runtime's sandboxes share one /tmp, emptied whenever one of them is reverted or "
       "destroyed: a sandbox made later finds nothing, one alive at the same time sees the "
       "other's files (FS-1, FS-4)"},
      {"disk-limit-doubled", "the disk quota applied is twice the one asked for (RES-3)"},
      {"disk-limit-halved", "the disk quota applied is half the one asked for (RES-3)"},
      {"pids-limit-halved", "the pids limit applied is half the one asked for (RES-4)"},
      // Isolation that looks whole from the usual checks.
      {"privileged",
       "the probe runs as root with every capability inside the sandbox's namespaces (a "
       "privileged container: nsenter from the host), so it could undo its isolation (FS-1)"},
      {"shared-pid-namespace",
       "the command runs in the host's PID namespace, as the sandbox's user, with /proc mounted "
       "hidepid=2: /proc lists only that user's processes, but the harness's pid answers kill -0 "
       "with EPERM and the pid namespace is the host's (FS-3)"},
      {"host-root-private-tmp",
       "a command that reaches for the host's files runs with the host's root bound in and only "
       "/tmp and /var/tmp made private (fresh tmpfs), in the sandbox's PID, network, IPC and UTS "
       "namespaces, as the sandbox's user: the host's /run and /dev/shm show (FS-1)"},
      {"cgroup-parent-writable",
       "the sandbox sees its cgroup tree, and one level too many is delegated to it: a command "
       "that looks (`sbx-probe`) runs in a cgroup holding the sandbox's pids limit whose parent's "
       "cgroup.procs its user may write, so it could move itself out of the limit (RES-4, FS-1); "
       "no limit file of its own cgroup is writable, and it holds no capability"},
      {"wrong-workdir",
       "commands run in /tmp instead of /work (LC-5): /work stays empty whatever "
       "they write"},
      {"leaks-host-env",
       "the runtime hands its own environment to the sandbox, as the demo actor's subprocess.run "
       "does (LC-3, LC-4)"},
      {"directory-resolves",
       "every name of the sandbox's service directory (`hosts`) resolves and is reachable, "
       "whether an egress rule names it or not: the directory taken for the allow list (EGR-2, "
       "SCN-4)"},
      {"dns-refuses",
       "none, but the resolver answers REFUSED where the reference answers NXDOMAIN: a correct "
       "runtime for EGR-2 (the egress checks must pass it); the six tasks' SCN-2 and SCN-4 ask "
       "for NXDOMAIN as the demo shows it"},
      {"backend-impostor",
       "a sandbox asked for on gvisor or microvm, or for untrusted code, runs as a plain "
       "container on the host's kernel (a silent fallback to runc), and every answer names the "
       "backend asked for (BK-4, BK-5, SEL-6)"},
      {"missing-backend-falls-back",
       "a sandbox asked for on a backend class no worker behind offers (kubernetes, remote) runs "
       "natively, and every answer names the class asked for: a provisioning failure hidden by "
       "a fallback (SEL-5, FAIL-1)"},
      {"wasm-is-a-container",
       "a sandbox asked for on the wasm class runs as a plain container, and a shim answers the "
       "module's `escape` probe as a container without those files would (ENOENT, the kernel's "
       "refusal): files hidden from a process, not a capability-based VM (BK-2)"},
      // Egress that lets more through than the rule says (the egress scenario).
      {"ports-ignored",
       "the gateway allows a listed host on any port: a request to HOST:PORT reaches the listed "
       "host's service (EGR-1)"},
      {"egress-beyond-http-open",
       "only HTTP to a listed host and the sandbox's own resolver go through the gateway: every "
       "other connection and datagram (other tcp ports, udp, TLS on 443, IPv6, a query to an "
       "explicit resolver) leaves by the host's own network (EGR-1, SNAP-5)"},
      {"sni-ignored",
       "the gateway passes a TLS connection to a listed name through whatever SNI its ClientHello "
       "names: the SNI is not looked at (EGR-4)"},
      {"host-header-ignored",
       "the gateway lets a connection to a listed host through whatever its Host header names: "
       "the header is not looked at (EGR-1, EGR-3)"},
      {"lookalike-names-resolve",
       "a name that merely contains a listed one (x.HOST, HOST.example.net, HOSTx) resolves as "
       "the listed host: a substring match (EGR-1, EGR-2)"},
      // A revert that returns a sandbox, but not the one asked for.
      {"fake-stages",
       "the exec answer reports every stage of the command as 0 s, whatever it took: made-up "
       "timings (LC-1)"},
      {"stages-in-ms",
       "the exec answer reports the stages in milliseconds where the protocol says seconds "
       "(LC-1)"},
      {"policy-union",
       "one allow list for every sandbox: each new sandbox also gets every rule (and service) "
       "an earlier sandbox was given (EGR-1)"},
      {"persistent-shell",
       "commands are written into one long-lived shell: what one does to it (cd, export, "
       "ulimit) stays, across reverts too (SNAP-2)"},
      {"revert-drops-env",
       "revert makes a new sandbox from the create request without its environment (SNAP-2, "
       "LC-3)"},
      {"destroy-recycles",
       "destroy wipes /work and /tmp and keeps the sandbox for the next create of the same "
       "request: $HOME, the rest of the file system and the processes carry over (LC-7, "
       "POOL-7)"},
      {"crash-revert-keeps-state",
       "the revert of a sandbox that a limit breach ended restarts it in place: what it held "
       "before the crash (files in /work, /tmp, $HOME) is still there; a revert of a sandbox "
       "that did not crash is whole (SNAP-2)"},
      {"revert-drops-limits",
       "revert makes a new sandbox from the template without the limits the create request "
       "asked for (SNAP-2: the golden state holds the limits too)"},
      {"revert-drops-policy",
       "revert makes a new sandbox from the template without the egress policy the create "
       "request gave: after a revert nothing is reachable, not even the listed host (SNAP-2, "
       "EGR-1)"},
      // Warm pools that hand a sandbox on (the pool scenario, POOL-1..7, LC-10): destroy keeps
      // a sandbox made for a tool on a shelf and the next create of the same request takes it.
      // "Reset" is in place: every process killed but PID 1, the canaries it planted removed,
      // /work, /tmp, /var/tmp, /dev/shm, /run and $HOME emptied; the namespaces and PID 1 stay.
      // A sandbox taken from the shelf gets the new request's env and secrets per command.
      {"pool-reuse-dirty",
       "a trusted sandbox is kept for the same tenant and tool without any reset: the next one "
       "finds its files, processes and IPC objects (POOL-7)"},
      {"pool-crosses-tenants",
       "a trusted sandbox, reset in place, is kept for the same tool and trust class whatever the "
       "tenant: another tenant's create takes it (POOL-4)"},
      {"pool-keeps-untrusted",
       "an untrusted sandbox, reset in place, is kept for the same tenant and tool and serves "
       "again (POOL-5, POOL-3); trusted ones are destroyed"},
      {"pool-reuse-drops-secrets",
       "a trusted sandbox, reset in place, serves the same tenant and tool again, but the "
       "commands of a sandbox taken from the shelf get the new request's env without its secrets "
       "(POOL-2)"},
      // POOL-6 (pool/size-adapts): the adapter's one-shot runs (op `run`) take a sandbox from a
      // shelf of ONE, kept for the latest request and refilled after each run, whatever the
      // demand. (The control forwards `run` to sandboxd's POST /v1/run, whose pools follow
      // demand; every other defect answers it 64, as before.)
      {"pool-never-grows",
       "pooled runs take from a fixed shelf of one sandbox, made again after each run: at most "
       "one run of a burst is warm however long the demand lasts (POOL-6)"},
      {"one-service-tenant",
       "every create is made with the adapter's own service credential, whatever tenant it "
       "names: a floored tenant's sandbox gets the service tenant's policy, no floor (SEL-2)"},
      {"any-caller-reaches-sandbox",
       "the sandbox id is the key: exec, revert and destroy are carried out with the credential "
       "the sandbox was made with, whoever calls (the op's \"caller\" is ignored) (PROD-1)"},
      // Under load (the load scenario, docs/load.md): one call in five goes wrong.
      {"crosstalk-under-load",
       "every 5th exec answers with the output of the exec before it: a result reaches the "
       "wrong caller (POOL-4, LC-9)"},
      {"drops-under-load", "every 5th exec answers tool_error without running the command (LC-9)"},
      {"leaks-under-load",
       "every 5th destroy answers success and leaves the sandbox running (LC-8, FAIL-6)"},
      // The runtime's own figures in place of what it did (issue 32): each rewritten to look
      // like the faithful runtime's, so only the harness's own evidence can tell.
      {"pids-limit-doubled-reports-low-peak",
       "the pids limit applied is twice the one asked for, and the answer's usage.pids_peak is "
       "rewritten to stay below the limit asked for (RES-4)"},
      {"fake-cpu-usage",
       "no CPU quota is applied, and the answer's usage.cpu_seconds / throttled_seconds are "
       "rewritten to what a cap at the quota asked for would show (RES-1, SCN-5)"},
      {"stages-padded",
       "every stage of the exec answer is reported 0.1 s longer than it took: the stages add up "
       "to more than the whole call (LC-1)"},
      {"revert-seconds-fake",
       "revert reports made-up seconds: 0.000001 s, and 1 s more than the call took, in turn "
       "(SNAP-4)"},
  };
  return d;
}

[[noreturn]] void Die(int code, const std::string& kind, const std::string& message) {
  std::cout << json{{"error", {{"code", kind}, {"message", message}}}}.dump() << "\n";
  std::cerr << "sandcheck-defect: " << message << "\n";
  std::exit(code);
}

std::string Env(const char* name, const char* fallback = nullptr) {
  const char* v = std::getenv(name);
  if (v && *v) return v;
  if (fallback) return fallback;
  Die(1, "failed_precondition", fmt::format("${} is not set (docs/selftest.md)", name));
}

std::string DefectName(const char* argv0) {
  if (const char* d = std::getenv("SANDCHECK_DEFECT"); d && *d) return d;
  std::string base = argv0;
  if (auto slash = base.rfind('/'); slash != std::string::npos) base = base.substr(slash + 1);
  if (base.rfind("defect-", 0) == 0) return base.substr(7);
  return "";
}

// What a defect remembers of a sandbox between ops (one process per op).
class State {
 public:
  explicit State(std::string dir) : dir_(std::move(dir)) { ::mkdir(dir_.c_str(), 0700); }
  json Load(const std::string& id) const {
    std::ifstream in(Path(id));
    if (!in) return json::object();
    json j = json::parse(in, nullptr, false);
    return j.is_object() ? j : json::object();
  }
  void Save(const std::string& id, const json& j) const {
    std::ofstream(Path(id)) << j.dump() << "\n";
  }
  void Drop(const std::string& id) const { ::unlink(Path(id).c_str()); }
  const std::string& dir() const { return dir_; }
  // The sum of the number `key` over every sandbox's state (memory-limit-shared: what the live
  // sandboxes hold).
  int64_t SumOver(const std::string& key) const {
    int64_t sum = 0;
    DIR* d = ::opendir(dir_.c_str());
    if (!d) return 0;
    for (dirent* e; (e = ::readdir(d)) != nullptr;) {
      if (e->d_name[0] == '.') continue;
      std::ifstream in(dir_ + "/" + e->d_name);
      json j = json::parse(in, nullptr, false);
      if (j.is_object() && j.contains(key) && j[key].is_number_integer()) sum += j[key].get<int64_t>();
    }
    ::closedir(d);
    return sum;
  }

  // An exclusive lock over this state directory's `name` (flock), held until the returned
  // descriptor is closed; -1 when the lock file cannot be made.
  int Lock(const std::string& name) const {
    int fd = ::open((dir_ + "/" + name).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) ::flock(fd, LOCK_EX);
    return fd;
  }

  // A counter shared by every adapter process of this state directory (flock), for the defects
  // that hit one call in N whatever the concurrency. `swap`: the text stored with the counter
  // is replaced by it and the previous one returned.
  int Tick(const std::string& name, std::string* swap = nullptr) const {
    std::string path = dir_ + "/" + name;
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return 0;
    ::flock(fd, LOCK_EX);
    std::string text;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
    size_t nl = text.find('\n');
    int count = std::atoi(text.substr(0, nl).c_str()) + 1;
    std::string stored = nl == std::string::npos ? "" : text.substr(nl + 1);
    std::string next = std::to_string(count) + "\n" + (swap ? *swap : stored);
    if (swap) *swap = stored;
    (void)::ftruncate(fd, 0);
    (void)::pwrite(fd, next.data(), next.size(), 0);
    ::close(fd);  // releases the lock
    return count;
  }

 private:
  std::string Path(const std::string& id) const {
    std::string safe;
    for (char c : id) safe += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    return dir_ + "/" + safe + ".json";
  }
  std::string dir_;
};

// shared-tmp-live: the one /tmp of every sandbox (mode 1777, as a /tmp is), beside the state.
std::string SharedTmpDir(const State& state) {
  std::string dir = state.dir() + "/.shared-tmp";
  if (::mkdir(dir.c_str(), 01777) == 0) ::chmod(dir.c_str(), 01777);  // past the umask
  return dir;
}

json ExecJson(const ExecAnswer& a) {
  json j = a.extra;
  j["status"] = a.status;
  j["state"] = a.state;
  j["exit"] = a.exit_code < 0 && a.status != "ok" ? json(nullptr) : json(a.exit_code);
  j["stdout"] = a.stdout_text;
  j["stderr"] = a.stderr_text;
  if (a.seconds >= 0) j["seconds"] = a.seconds;
  return j;
}

// The hosts the sandbox may reach (the create request's allow list).
std::set<std::string> AllowedHosts(const json& request) {
  std::set<std::string> out;
  if (!request.contains("egress") || !request["egress"].is_object()) return out;
  const json& rules = request["egress"].value("rules", json::array());
  for (const auto& r : rules) {
    for (const auto& h : r.value("hosts", json::array())) {
      if (h.is_string()) out.insert(h.get<std::string>());
    }
  }
  return out;
}

bool IsIpv4(const std::string& h) { return std::regex_match(h, std::regex(R"(\d+(\.\d+){3})")); }

// dns-open / ip-egress-open: a host the allow list does not hold, named in `nslookup HOST` or
// `http://HOST`, becomes an allowed one — so the command sees what it would see if the runtime
// resolved every name (or let IP literals out): an answer, and data from a real host.
std::string Redirect(const std::string& cmd, const std::set<std::string>& allowed, bool names,
                     bool ips) {
  if (allowed.empty()) return cmd;
  const std::string to = *allowed.begin();
  static const std::regex host_re(R"((nslookup\s+|https?://)([A-Za-z0-9._-]+))");
  std::string out;
  auto begin = std::sregex_iterator(cmd.begin(), cmd.end(), host_re);
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    std::string host = m[2].str();
    bool ip = IsIpv4(host);
    bool take = !allowed.count(host) && ((ip && ips) || (!ip && names));
    out += cmd.substr(last, static_cast<size_t>(m.position(0)) - last);
    out += m[1].str() + (take ? to : host);
    last = static_cast<size_t>(m.position(0) + m.length(0));
  }
  return out + cmd.substr(last);
}

// lookalike-names-resolve: every word of the command that contains a listed host without being
// it (x.HOST, HOST.example.net, HOSTx) becomes the listed host, as a resolver that matches
// substrings would answer it.
std::string Lookalikes(const std::string& cmd, const std::set<std::string>& allowed) {
  std::string out = cmd;
  for (const auto& host : allowed) {
    static const std::regex word_re(R"([A-Za-z0-9._-]+)");
    std::string next;
    size_t last = 0;
    for (auto it = std::sregex_iterator(out.begin(), out.end(), word_re);
         it != std::sregex_iterator(); ++it) {
      std::string word = it->str();
      bool lookalike = word != host && word.find(host) != std::string::npos;
      next += out.substr(last, static_cast<size_t>(it->position(0)) - last);
      next += lookalike ? host : word;
      last = static_cast<size_t>(it->position(0) + it->length(0));
    }
    out = next + out.substr(last);
  }
  return out;
}

// ports-ignored: http://HOST:PORT of a listed host becomes http://HOST (the listed service).
std::string DropPorts(const std::string& cmd, const std::set<std::string>& allowed) {
  std::string out = cmd;
  for (const auto& host : allowed) {
    std::string quoted = std::regex_replace(host, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)");
    out = std::regex_replace(out, std::regex("(https?://" + quoted + "):[0-9]+"), "$1");
  }
  return out;
}

// host-header-ignored: a --header 'Host: ...' is dropped (the gateway never looks at it, so
// the request goes where the connection goes: the listed host).
std::string DropHostHeader(const std::string& cmd) {
  static const std::regex re(R"(--header\s+('[Hh][Oo][Ss][Tt]:[^']*'|"[Hh][Oo][Ss][Tt]:[^"]*"))");
  return std::regex_replace(cmd, re, "");
}

// A /proc file, whole, read with read(2): a process may end mid-read (libstdc++'s stream
// iterators throw there), and then what was read is all there is.
std::string ProcFile(const std::string& path) {
  std::string out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

std::string CmdlineOf(pid_t pid) { return ProcFile(fmt::format("/proc/{}/cmdline", pid)); }

// privileged: the host pid of a process the command left running in the sandbox, found by its
// command line (a unique `sleep N`).
pid_t FindHostPid(const std::string& want_cmdline, double wait_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  do {
    if (DIR* d = ::opendir("/proc")) {
      for (dirent* e; (e = ::readdir(d)) != nullptr;) {
        if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
        if (ProcFile(fmt::format("/proc/{}/cmdline", e->d_name)) == want_cmdline) {
          pid_t pid = static_cast<pid_t>(std::atol(e->d_name));
          ::closedir(d);
          return pid;
        }
      }
      ::closedir(d);
    }
    ::usleep(10000);
  } while (std::chrono::steady_clock::now() < deadline);
  return -1;
}

// The PATH a process of the sandbox has (so the privileged command finds the same tools).
std::string PathOf(pid_t pid) {
  const std::string text = ProcFile(fmt::format("/proc/{}/environ", pid));
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\0', pos);
    if (end == std::string::npos) end = text.size();
    std::string var = text.substr(pos, end - pos);
    if (var.rfind("PATH=", 0) == 0) return var;
    pos = end + 1;
  }
  return "PATH=/usr/local/bin:/usr/bin:/bin";
}

// The real uid and gid of a process (its status file's Uid: and Gid: lines).
std::pair<long, long> IdsOf(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  long uid = -1, gid = -1;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Uid:", 0) == 0) uid = std::strtol(line.c_str() + 4, nullptr, 10);
    if (line.rfind("Gid:", 0) == 0) gid = std::strtol(line.c_str() + 4, nullptr, 10);
  }
  if (uid < 0 || gid < 0) Die(1, "internal", fmt::format("no uid/gid for pid {}", pid));
  return {uid, gid};
}

// cpu-cap-per-thread (cgroup v1): while alive, moves every thread of the sandbox's cpu cgroups
// `dirs` (the running instance and its spare) into a child cgroup of its own ("t<TID>") with a
// quota of `millicores`; Finish() moves them back, removes the children and returns the sum of
// their throttled time, in seconds.
class PerThreadCap {
 public:
  PerThreadCap(std::vector<std::string> dirs, int64_t millicores)
      : dirs_(std::move(dirs)), millicores_(millicores), worker_([this] { Loop(); }) {}
  ~PerThreadCap() { Finish(); }
  PerThreadCap(const PerThreadCap&) = delete;
  PerThreadCap& operator=(const PerThreadCap&) = delete;

  double Finish() {
    if (worker_.joinable()) {
      stop_ = true;
      worker_.join();
    }
    double throttled = 0;
    for (const auto& [dir, child] : children_) {
      std::ifstream tasks(child + "/tasks");
      for (std::string tid; tasks >> tid;) Spit(dir + "/tasks", tid);
      std::ifstream stat(child + "/cpu.stat");
      for (std::string key; stat >> key;) {
        int64_t value = 0;
        stat >> value;
        if (key == "throttled_time") throttled += static_cast<double>(value) / 1e9;
      }
      ::rmdir(child.c_str());
    }
    children_.clear();
    return throttled;
  }

  // The cpu cgroups of the reference's sandbox `id` ("sb-ID-N" below the runtime's own).
  static std::vector<std::string> Find(const std::string& id) {
    std::vector<std::string> found;
    std::error_code ec;
    const std::string prefix = "sb-" + id + "-";
    for (auto it = fs::recursive_directory_iterator("/sys/fs/cgroup/cpu/", ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it.depth() > 5) it.disable_recursion_pending();
      if (it->is_directory(ec) && it->path().filename().string().rfind(prefix, 0) == 0) {
        found.push_back(it->path().string());
        it.disable_recursion_pending();
      }
    }
    return found;
  }

 private:
  static void Spit(const std::string& path, const std::string& text) {
    std::ofstream f(path);
    f << text;
  }
  void Loop() {
    std::set<std::string> moved;
    auto sweep = [&](const std::string& dir, const std::string& from) {
      // Threads a moved thread starts are born in its cgroup: they get one of their own too.
      std::ifstream tasks(from + "/tasks");
      for (std::string tid; tasks >> tid;) {
        if (!moved.insert(tid).second) continue;
        const std::string child = dir + "/t" + tid;
        if (::mkdir(child.c_str(), 0755) != 0 && errno != EEXIST) continue;
        children_.emplace_back(dir, child);
        Spit(child + "/cpu.cfs_period_us", "100000");
        Spit(child + "/cpu.cfs_quota_us", std::to_string(millicores_ * 100));
        Spit(child + "/tasks", tid);
      }
    };
    while (!stop_) {
      for (const std::string& dir : dirs_) sweep(dir, dir);
      for (size_t i = 0; i < children_.size(); ++i) {
        const auto [dir, child] = children_[i];
        sweep(dir, child);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  std::vector<std::string> dirs_;
  int64_t millicores_;
  // (parent, child) cgroups; written by the worker only while it runs.
  std::vector<std::pair<std::string, std::string>> children_;
  std::atomic<bool> stop_{false};
  std::thread worker_;
};

int64_t Scaled(const json& limits, const char* key, double factor) {
  return static_cast<int64_t>(static_cast<double>(limits[key].get<int64_t>()) * factor);
}

// "/proc/PID/ns/KIND"'s link ("mnt:[4026532281]"), or "" if it cannot be read.
std::string NsLink(pid_t pid, const char* kind) {
  char buf[128];
  std::string path =
      pid > 0 ? fmt::format("/proc/{}/ns/{}", pid, kind) : fmt::format("/proc/self/ns/{}", kind);
  ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

// timeout-spares-daemons: what its timeouts left running are processes of the host's PID
// namespace in the sandbox's mount namespace `mnt_ns`; killed at the next revert or destroy (the
// defect is in the timeout only, and the self-test leaves nothing behind). With `only`, just the
// processes whose command line holds that word (revert-spares-hidden: the socket holders).
void KillSpared(const std::string& mnt_ns, const std::string& only = "") {
  if (mnt_ns.empty()) return;
  const std::string host_pid_ns = NsLink(0, "pid");
  for (int pass = 0; pass < 3; ++pass) {
    int found = 0;
    DIR* d = ::opendir("/proc");
    if (!d) return;
    while (dirent* e = ::readdir(d)) {
      pid_t pid = static_cast<pid_t>(std::atol(e->d_name));
      if (pid <= 1 || pid == ::getpid()) continue;
      if (NsLink(pid, "mnt") == mnt_ns && NsLink(pid, "pid") == host_pid_ns &&
          (only.empty() || CmdlineOf(pid).find(only) != std::string::npos)) {
        ::kill(pid, SIGKILL);
        ++found;
      }
    }
    ::closedir(d);
    if (found == 0) return;
    ::usleep(50 * 1000);
  }
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

template <typename T>
T Must(sbx::StatusOr<T> v, const char* op) {
  if (!v.ok()) Die(1, "unavailable", fmt::format("{}: the runtime behind failed: {}", op, v.status().ToString()));
  return std::move(*v);
}

// privileged, shared-pid-namespace, egress-beyond-http-open, host-root-private-tmp: runs `cmd`
// from the host in (some of) the namespaces of a process the sandbox leaves running for it.
// `nsenter FLAGS` as root (as_user: as the sandbox's own user); or, with self_mode, this binary's
// --enter-hidepid (EnterHidepid below), --enter-host-root (EnterHostRoot) or --enter-shared-tmp
// (EnterSharedTmp, with `self_arg` its directory), as the sandbox's own user.
ExecAnswer ExecEntered(Target& rt, const std::string& id, const std::string& cmd, double timeout,
                       std::vector<std::string> flags, const char* self_mode, bool as_user = false,
                       std::string* mnt_ns = nullptr, const std::string& self_arg = "") {
  std::random_device rd;
  std::string n = fmt::format("86400{:06}", rd() % 1000000);
  ExecAnswer started =
      Must(rt.Exec(id, fmt::format("setsid sleep {} </dev/null >/dev/null 2>&1 &", n), 10),
           "exec (a process to enter)");
  if (started.status != "ok") Die(1, "internal", "a process to enter: " + started.stderr_text);
  pid_t pid = FindHostPid(std::string("sleep\0", 6) + n + std::string("\0", 1), 10);
  if (pid <= 0) Die(1, "internal", "the sandbox's process to enter was not found");
  if (mnt_ns) *mnt_ns = NsLink(pid, "mnt");
  if (as_user) {
    auto [uid, gid] = IdsOf(pid);
    flags.insert(flags.end(), {"-S", std::to_string(uid), "-G", std::to_string(gid)});
  }
  sandcheck::SubprocessOptions o;
  if (self_mode) {
    char self[4096];
    ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) Die(1, "internal", "readlink /proc/self/exe failed");
    o.argv = {"/usr/bin/env", "-i",
              PathOf(pid),    std::string(self, static_cast<size_t>(len)),
              self_mode,      std::to_string(pid)};
    if (!self_arg.empty()) o.argv.push_back(self_arg);
    o.argv.push_back(cmd);
  } else {
    o.argv = {"/usr/bin/env", "-i", PathOf(pid), "/usr/bin/nsenter", "-t", std::to_string(pid)};
    o.argv.insert(o.argv.end(), flags.begin(), flags.end());
    o.argv.insert(o.argv.end(), {"--", "/bin/sh", "-c", cmd});
  }
  o.timeout_s = timeout;
  auto r = sandcheck::RunSubprocess(o);
  ::kill(pid, SIGKILL);
  if (!r.ok()) Die(1, "internal", "nsenter: " + r.status().ToString());
  ExecAnswer a;
  a.status = r->timed_out ? "timeout" : "ok";
  a.exit_code = r->exit_code >= 0 ? r->exit_code : 128 + r->term_signal;
  a.stdout_text = r->out;
  a.stderr_text = r->err;
  a.seconds = r->seconds;
  return a;
}

std::string SandboxOf(const json& in) {
  if (!in.contains("sandbox") || !in["sandbox"].is_string())
    Die(2, "invalid_argument", "\"sandbox\" (a string) missing");
  return in["sandbox"].get<std::string>();
}

// Joins the namespaces `kinds` of `pid`, in that order; false (errno set) at the first refused.
bool JoinNamespaces(pid_t pid, std::initializer_list<const char*> kinds, const char** failed) {
  for (const char* ns : kinds) {
    int fd = ::open(fmt::format("/proc/{}/ns/{}", pid, ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, 0) != 0) {
      *failed = ns;
      return false;
    }
    ::close(fd);
  }
  return true;
}

// Drops to the sandbox process's uid and gid with no supplementary groups (and so no
// capabilities): what the sandbox's own commands run as.
bool BecomeUser(long uid, long gid) {
  return ::setgroups(0, nullptr) == 0 && ::setgid(static_cast<gid_t>(gid)) == 0 &&
         ::setuid(static_cast<uid_t>(uid)) == 0;
}

}  // namespace

// shared-pid-namespace, the process that runs the command: what a runtime that shares the
// host's PID namespace and hides it with hidepid gives its sandboxes. It joins the IPC, UTS,
// network and mount namespaces of `pid` (a process of the sandbox), not its PID namespace; takes
// a mount namespace of its own below that one (whose root is the sandbox's), mounts a /proc of the
// host's PID namespace with hidepid=2 over the sandbox's, and runs `cmd` as the sandbox
// process's uid and gid (so without capabilities), in /work. /proc then lists only that user's
// processes: a handful, not the harness.
int EnterHidepid(pid_t pid, const std::string& cmd) {
  auto fail = [](const char* what) {
    std::fprintf(stderr, "defect shared-pid-namespace: %s: %s\n", what, std::strerror(errno));
    return 125;
  };
  auto [uid, gid] = IdsOf(pid);
  // Joining the mount namespace makes its root (the sandbox's, after its pivot_root) ours. A
  // descriptor of /proc/PID/root opened before would name a mount of the sandbox's namespace, not
  // of the copy below, and nothing can be mounted through it.
  const char* refused = nullptr;
  if (!JoinNamespaces(pid, {"ipc", "uts", "net", "mnt"}, &refused)) return fail(refused);
  if (::unshare(CLONE_NEWNS) != 0) return fail("unshare(CLONE_NEWNS)");
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return fail("private /");
  if (::chdir("/") != 0) return fail("chdir /");
  if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2") != 0)
    return fail("mount /proc with hidepid=2");
  if (!BecomeUser(uid, gid)) return fail("become the sandbox's user");
  if (::chdir("/work") != 0) return fail("chdir /work");
  ::execle("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr), environ);
  return fail("exec /bin/sh");
}

// The end of an --enter-* mode that joined a PID namespace (which only children enter): forks,
// and the child (with mount_proc, after mounting a /proc of that namespace) runs `cmd` with sh as
// uid/gid in `cwd`; returns its exit status (128 + N if signal N ended it).
int ShellInChild(long uid, long gid, const char* cwd, const std::string& cmd,
                 int (*fail)(const char*), bool mount_proc) {
  pid_t child = ::fork();
  if (child < 0) return fail("fork");
  if (child == 0) {
    if (mount_proc &&
        ::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
      _exit(fail("mount /proc"));
    if (!BecomeUser(uid, gid)) _exit(fail("become the sandbox's user"));
    if (::chdir(cwd) != 0) _exit(fail("chdir"));
    ::execle("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr), environ);
    _exit(fail("exec /bin/sh"));
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// host-root-private-tmp, the process that runs the command: what a runtime that binds the host's
// root into its sandboxes and hides only /tmp and /var/tmp (fresh tmpfs on each) gives them. It
// joins the IPC, UTS, network and PID namespaces of `pid` (a process of the sandbox), not its
// mount namespace; takes a mount namespace of its own below the host's, mounts a tmpfs on /tmp
// and on /var/tmp and a /proc of the sandbox's PID namespace, and runs `cmd` as the sandbox
// process's uid and gid, in /tmp. The host's /run, /dev/shm, /etc and /home all show.
int EnterHostRoot(pid_t pid, const std::string& cmd) {
  auto fail = [](const char* what) {
    std::fprintf(stderr, "defect host-root-private-tmp: %s: %s\n", what, std::strerror(errno));
    return 125;
  };
  auto [uid, gid] = IdsOf(pid);
  const char* refused = nullptr;
  if (!JoinNamespaces(pid, {"ipc", "uts", "net", "pid"}, &refused)) return fail(refused);
  if (::unshare(CLONE_NEWNS) != 0) return fail("unshare(CLONE_NEWNS)");
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return fail("private /");
  for (const char* dir : {"/tmp", "/var/tmp"}) {
    if (::mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=16m") != 0)
      return fail("tmpfs");
  }
  return ShellInChild(uid, gid, "/tmp", cmd, fail, true);
}

// shared-tmp-live, the process that runs the command: what a runtime whose sandboxes share one
// /tmp gives them (cleaned when one is reverted or destroyed, so no sandbox made later finds
// anything). `dir` (a host directory) is taken as a detached mount before anything is joined;
// then the IPC, UTS, network, PID and mount namespaces of `pid` (a process of the sandbox), a
// mount namespace of its own below that one with the shared directory on /tmp, and `cmd` runs as
// the sandbox process's uid and gid, in /work, in the sandbox's PID namespace.
int EnterSharedTmp(pid_t pid, const std::string& dir, const std::string& cmd) {
  auto fail = [](const char* what) {
    std::fprintf(stderr, "defect shared-tmp-live: %s: %s\n", what, std::strerror(errno));
    return 125;
  };
  auto [uid, gid] = IdsOf(pid);
  int tree = ::open_tree(AT_FDCWD, dir.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (tree < 0) return fail("open_tree of the shared directory");
  const char* refused = nullptr;
  if (!JoinNamespaces(pid, {"ipc", "uts", "net", "pid", "mnt"}, &refused)) return fail(refused);
  if (::unshare(CLONE_NEWNS) != 0) return fail("unshare(CLONE_NEWNS)");
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return fail("private /");
  if (::move_mount(tree, "", AT_FDCWD, "/tmp", MOVE_MOUNT_F_EMPTY_PATH) != 0)
    return fail("mount the shared directory on /tmp");
  ::close(tree);
  return ShellInChild(uid, gid, "/work", cmd, fail, false);
}

// The path of `pid`'s cgroup in the cgroup v1 hierarchy `ctrl` ("pids"), from /proc/PID/cgroup,
// or "" if it has none there.
std::string CgroupOf(pid_t pid, const std::string& ctrl) {
  std::istringstream in(ProcFile(fmt::format("/proc/{}/cgroup", pid)));
  for (std::string line; std::getline(in, line);) {
    size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::istringstream ctrls(line.substr(a + 1, b - a - 1));
    for (std::string c; std::getline(ctrls, c, ',');)
      if (c == ctrl) return line.substr(b + 1);
  }
  return "";
}

bool WriteFile(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// cgroup-parent-writable, the process that runs the command: what a runtime that shows its
// sandboxes their cgroup tree and delegates one level too many gives them. In the pids
// hierarchy, below the sandbox's cgroup (`pid`'s), it makes defect-parent/defect-child, gives
// defect-child the sandbox's pids.max (the cgroup that holds the limit) and hands
// defect-parent's cgroup.procs to the sandbox's user (the way out of it); the command runs in
// defect-child, in the sandbox's namespaces (a mount namespace of its own below the sandbox's,
// with the host's /sys/fs/cgroup on /sys/fs/cgroup), as the sandbox's user. Both cgroups go when
// the command ends; the sandbox's own cgroup above them still holds its limit throughout.
int EnterCgroupfs(pid_t pid, const std::string& cmd) {
  auto fail = [](const char* what) {
    std::fprintf(stderr, "defect cgroup-parent-writable: %s: %s\n", what, std::strerror(errno));
    return 125;
  };
  auto [uid, gid] = IdsOf(pid);
  const std::string root = "/sys/fs/cgroup/pids";
  const std::string sandbox_cg = CgroupOf(pid, "pids");
  const std::string mine = CgroupOf(::getpid(), "pids");
  if (sandbox_cg.empty() || sandbox_cg == "/") {
    errno = ENOENT;
    return fail("the sandbox has no pids cgroup of its own");
  }
  const std::string parent = root + sandbox_cg + "/defect-parent";
  const std::string child = parent + "/defect-child";
  if (::mkdir(parent.c_str(), 0755) != 0 || ::mkdir(child.c_str(), 0755) != 0)
    return fail("mkdir defect-parent/defect-child");
  auto remove = [&] {
    WriteFile(root + mine + "/cgroup.procs", std::to_string(::getpid()));
    ::rmdir(child.c_str());
    ::rmdir(parent.c_str());
  };
  const std::string limit = ProcFile(root + sandbox_cg + "/pids.max");
  if (limit.empty() || !WriteFile(child + "/pids.max", limit) ||
      ::chown((parent + "/cgroup.procs").c_str(), static_cast<uid_t>(uid),
              static_cast<gid_t>(gid)) != 0 ||
      !WriteFile(child + "/cgroup.procs", std::to_string(::getpid()))) {
    int e = errno;
    remove();
    errno = e;
    return fail("set up defect-parent/defect-child");
  }
  // The command in a child (in the sandbox's namespaces); the clean-up here, in the host's.
  pid_t runner = ::fork();
  if (runner < 0) {
    int e = errno;
    remove();
    errno = e;
    return fail("fork");
  }
  if (runner == 0) {
    int tree =
        ::open_tree(AT_FDCWD, "/sys/fs/cgroup", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    const char* refused = nullptr;
    if (tree < 0) _exit(fail("open_tree /sys/fs/cgroup"));
    if (!JoinNamespaces(pid, {"ipc", "uts", "net", "pid", "mnt"}, &refused)) _exit(fail(refused));
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      _exit(fail("a mount namespace of its own"));
    if (::mount("tmpfs", "/sys", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") != 0 ||
        ::mkdir("/sys/fs", 0755) != 0 || ::mkdir("/sys/fs/cgroup", 0755) != 0 ||
        ::move_mount(tree, "", AT_FDCWD, "/sys/fs/cgroup", MOVE_MOUNT_F_EMPTY_PATH) != 0)
      _exit(fail("the host's /sys/fs/cgroup on /sys/fs/cgroup"));
    _exit(ShellInChild(uid, gid, "/work", cmd, fail, false));
  }
  int status = 0;
  while (::waitpid(runner, &status, 0) < 0 && errno == EINTR) {
  }
  remove();
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--enter-cgroupfs")
    return EnterCgroupfs(static_cast<pid_t>(std::atol(argv[2])), argv[3]);
  if (argc == 4 && std::string(argv[1]) == "--enter-hidepid")
    return EnterHidepid(static_cast<pid_t>(std::atol(argv[2])), argv[3]);
  if (argc == 4 && std::string(argv[1]) == "--enter-host-root")
    return EnterHostRoot(static_cast<pid_t>(std::atol(argv[2])), argv[3]);
  if (argc == 5 && std::string(argv[1]) == "--enter-shared-tmp")
    return EnterSharedTmp(static_cast<pid_t>(std::atol(argv[2])), argv[3], argv[4]);
  const std::string defect = DefectName(argv[0]);
  if (argc >= 2 && std::string(argv[1]) == "--list") {
    for (const auto& [name, what] : Defects()) std::cout << name << "\t" << what << "\n";
    return 0;
  }
  if (argc != 2 || std::string(argv[1]) == "--help") {
    std::cerr << "usage: defect-NAME OP < INPUT.json   (adapter protocol v1; docs/selftest.md)\n"
                 "       sandcheck-defect --list        the defects\n";
    return argc == 2 ? 0 : 2;
  }
  if (!Defects().count(defect)) {
    Die(2, "invalid_argument",
        fmt::format("unknown defect '{}' (argv[0] defect-NAME or $SANDCHECK_DEFECT; --list)",
                    defect));
  }
  const std::string op = argv[1];
  static const std::set<std::string> ops = {"info", "create",  "exec",   "revert",     "destroy",
                                            "run",  "suspend", "resume", "gateway_log"};
  if (!ops.count(op)) Die(64, "unimplemented", fmt::format("unknown op '{}'", op));
  // Pooled runs (op run) only where they cannot go round the defect: the control forwards them
  // to sandboxd, pool-never-grows plants its defect there. Every other defect is planted in
  // create, exec or destroy, which a pooled run forwarded to sandboxd would never reach (the
  // load scenario, for one, takes the one-shot run whenever a target offers it).
  if (op == "run" && defect != "faithful" && defect != "pool-never-grows")
    Die(64, "unimplemented", "op 'run': defect-" + defect + " offers no pooled runs");
  std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  json in = json::parse(text, nullptr, false);
  if (!in.is_object()) Die(2, "invalid_argument", "stdin is not one JSON object");

  State state(Env("SANDCHECK_SELFTEST_STATE", "/tmp/sandcheck-selftest-state"));
  // The credential: $SANDCHECK_SELFTEST_TENANTS ({"TENANT":"TOKEN"}) names the token of a
  // tenant a create asks for; a sandbox's later calls use the token it was made with.
  std::string token = Env("SANDCHECK_SELFTEST_TOKEN", "");
  const json tenant_tokens = json::parse(Env("SANDCHECK_SELFTEST_TENANTS", "{}"), nullptr, false);
  if ((op == "create" || op == "run") && in.contains("tenant") && in["tenant"].is_string() &&
      tenant_tokens.is_object() && tenant_tokens.contains(in["tenant"].get<std::string>()) &&
      defect != "one-service-tenant") {
    token = tenant_tokens[in["tenant"].get<std::string>()].get<std::string>();
  } else if (op != "create" && op != "info" && in.contains("sandbox") &&
             in["sandbox"].is_string()) {
    json made_with = state.Load(in["sandbox"].get<std::string>());
    if (made_with.contains("token") && made_with["token"].is_string()) token = made_with["token"];
  }
  sandcheck::TargetOptions topts;
  topts.spec = Env("SANDCHECK_SELFTEST_TARGET");
  topts.token = token;
  topts.call_timeout_s = 120;
  auto made = sandcheck::MakeTarget(topts);
  if (!made.ok()) Die(1, "unavailable", made.status().ToString());
  Target& rt = **made;
  auto has = [&](const char* d) { return defect == d; };
  const bool pools = has("pool-reuse-dirty") || has("pool-crosses-tenants") ||
                     has("pool-keeps-untrusted") || has("pool-reuse-drops-secrets");
  // The revert-drops-* defects: revert = a new sandbox from the stored create request, less one
  // part of it.
  const bool recreates_on_revert =
      has("revert-drops-limits") || has("revert-drops-policy") || has("revert-drops-env");

  // PROD-1: an op on a sandbox by another caller ("caller": TENANT, docs/adapters.md) is made
  // with that caller's own credential, so that the runtime behind judges it; a caller without
  // one is refused here.
  if ((op == "exec" || op == "revert" || op == "destroy") && in.contains("caller") &&
      in["caller"].is_string() && !has("any-caller-reaches-sandbox")) {
    const std::string caller = in["caller"].get<std::string>();
    if (!tenant_tokens.is_object() || !tenant_tokens.contains(caller) ||
        !tenant_tokens[caller].is_string()) {
      Die(1, "unauthenticated", fmt::format("no credential for the caller '{}'", caller));
    }
    sandcheck::TargetOptions as = topts;
    as.second_token = tenant_tokens[caller].get<std::string>();
    auto other = sandcheck::MakeTarget(as);
    if (!other.ok()) Die(1, "unavailable", other.status().ToString());
    sandcheck::TargetInfo oi = Must((*other)->Info(), "info");
    auto f = Must((*other)->CallAs(oi.raw.value("second_tenant", ""), op, in.value("sandbox", ""),
                                   in.value("cmd", ""), in.value("timeout_s", 20.0)),
                  op.c_str());
    if (f.refused) Die(1, "not_found", "the runtime refused the caller: " + f.said);
    if (f.exec) {
      std::cout << ExecJson(*f.exec).dump() << "\n";
    } else {
      std::cout << json{{"seconds", -1}}.dump() << "\n";
    }
    return 0;
  }

  if (op == "info") {
    sandcheck::TargetInfo info = Must(rt.Info(), "info");
    json out = info.raw;
    out["name"] = "defect-" + defect;
    out["version"] = info.version;
    out["defect"] = Defects().at(defect);
    // SEL-2: the tenants' floors, as sandboxd names them to each tenant's own credential.
    json floors = json::object();
    if (tenant_tokens.is_object()) {
      for (auto it = tenant_tokens.begin(); it != tenant_tokens.end(); ++it) {
        if (!it.value().is_string()) continue;
        sandcheck::TargetOptions as = topts;
        as.token = it.value().get<std::string>();
        auto t = sandcheck::MakeTarget(as);
        if (!t.ok()) Die(1, "unavailable", t.status().ToString());
        sandcheck::TargetInfo ti = Must((*t)->Info(), "info");
        if (ti.raw.contains("tenant_floor")) floors[it.key()] = ti.raw["tenant_floor"];
      }
    }
    if (!floors.empty()) out["tenant_floors"] = floors;
    std::cout << out.dump() << "\n";
    return 0;
  }
  if (op == "run") {
    // A one-shot run (POOL-2, POOL-6): the create object plus cmd and timeout_s.
    json req = in;
    const std::string cmd = in.value("cmd", "");
    const double timeout = in.value("timeout_s", 60.0);
    req.erase("cmd");
    req.erase("timeout_s");
    if (!has("pool-never-grows")) {
      std::cout << ExecJson(Must(rt.RunPooled(req, cmd, timeout), "run")).dump() << "\n";
      return 0;
    }
    // The shelf of one: taken when it holds a sandbox of this very request, else a new one.
    const std::string key = req.dump();
    std::string id;
    int lock = state.Lock("never-grows.lock");
    json shelf = state.Load("never-grows-shelf");
    if (shelf.value("key", "") == key) {
      id = shelf.value("id", "");
      state.Drop("never-grows-shelf");
    }
    ::close(lock);
    if (id.empty()) id = Must(rt.Create(req), "run (create)");
    ExecAnswer a = Must(rt.Exec(id, cmd, timeout), "run (exec)");
    (void)rt.Destroy(id);
    // Refilled to one, never more: the latest request's.
    lock = state.Lock("never-grows.lock");
    shelf = state.Load("never-grows-shelf");
    if (shelf.value("key", "") != key) {
      if (shelf.contains("id") && shelf["id"].is_string()) (void)rt.Destroy(shelf["id"]);
      std::string next = Must(rt.Create(req), "run (refill the shelf)");
      state.Save("never-grows-shelf", {{"key", key}, {"id", next}});
    }
    ::close(lock);
    std::cout << ExecJson(a).dump() << "\n";
    return 0;
  }
  if (op == "create") {
    if (has("destroy-spares-guests") || has("destroy-leaves-processes")) {
      // The sandboxes an earlier destroy spared go now (a lazy reaper), whatever their state.
      const json spared = state.Load("spared-guests");
      if (spared.contains("ids") && spared["ids"].is_array() && !spared["ids"].empty()) {
        for (const auto& old_id : spared["ids"]) {
          if (old_id.is_string()) (void)rt.Destroy(old_id.get<std::string>());
        }
        state.Drop("spared-guests");
      }
    }
    json req = in;
    json& limits = req["limits"];
    if (!limits.is_object()) limits = json::object();
    auto scale = [&](const char* key, double f) {
      if (limits.contains(key) && limits[key].is_number_integer() && limits[key].get<int64_t>() > 0)
        limits[key] = Scaled(limits, key, f);
    };
    if (has("one-service-tenant")) req.erase("tenant");  // the service tenant's own sandbox
    if (has("no-network") && req.contains("egress")) req["egress"]["rules"] = json::array();
    if (has("directory-resolves") && req.contains("hosts") && req["hosts"].is_object()) {
      json rules = req.contains("egress") ? req["egress"].value("rules", json::array())
                                          : json::array();
      for (auto it = req["hosts"].begin(); it != req["hosts"].end(); ++it)
        rules.push_back({{"kind", "http"}, {"hosts", {it.key()}}, {"ports", {80}}});
      req["egress"] = {{"rules", rules}};
    }
    if (has("memory-limit-doubled")) scale("memory_bytes", 2.0);
    if (has("memory-limit-halved")) scale("memory_bytes", 0.5);
    if (has("cpu-limit-halved")) scale("cpu_millicores", 0.5);
    if (has("cpu-cap-per-thread") && limits.contains("cpu_millicores") &&
        limits["cpu_millicores"].is_number_integer()) {
      // The sandbox's own cgroup: the cap times the host's CPUs; each thread gets the cap itself.
      scale("cpu_millicores", static_cast<double>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN))));
    }
    if (has("pids-limit-quadrupled")) scale("pids", 4.0);
    if (has("pids-checked-after")) limits.erase("pids");
    if (has("pids-limit-halved")) scale("pids", 0.5);
    // What was asked for, before the defect changed it (for the rewritten usage reports).
    const json asked = in.contains("limits") && in["limits"].is_object() ? in["limits"]
                                                                          : json::object();
    if (has("pids-limit-doubled-reports-low-peak")) scale("pids", 2.0);
    if (has("fake-cpu-usage")) limits.erase("cpu_millicores");
    if (has("disk-limit-doubled")) scale("disk_bytes", 2.0);
    if (has("disk-limit-halved")) scale("disk_bytes", 0.5);
    // disk-quota-per-file: the quota asked for holds each file, not the sandbox; the sandbox's
    // own quota is four times as big, so that it never bites first.
    const int64_t file_quota =
        has("disk-quota-per-file") && asked.contains("disk_bytes") &&
                asked["disk_bytes"].is_number_integer()
            ? asked["disk_bytes"].get<int64_t>()
            : 0;
    if (file_quota > 0) scale("disk_bytes", 4.0);
    // memory-limit-per-process: the limit asked for holds each process (RLIMIT_AS), not the
    // sandbox, whose own limit is four times as big.
    const int64_t proc_memory =
        has("memory-limit-per-process") && asked.contains("memory_bytes") &&
                asked["memory_bytes"].is_number_integer()
            ? asked["memory_bytes"].get<int64_t>()
            : 0;
    if (proc_memory > 0) scale("memory_bytes", 4.0);
    if (has("memory-limit-shared") && limits.contains("memory_bytes") &&
        limits["memory_bytes"].is_number_integer()) {
      // One memory budget for all the runtime's sandboxes: what the live ones hold is spent.
      const int64_t held = state.SumOver("held_mib") << 20;
      if (held > 0)
        limits["memory_bytes"] = std::max<int64_t>(16 << 20, limits["memory_bytes"].get<int64_t>() - held);
    }
    if (has("pids-limit-shared") && limits.contains("pids") && limits["pids"].is_number_integer()) {
      // One pids budget for all the runtime's sandboxes: what the live ones hold is spent.
      const int64_t held = state.SumOver("held_pids");
      if (held > 0) limits["pids"] = std::max<int64_t>(8, limits["pids"].get<int64_t>() - held);
    }
    if (has("leaks-host-env")) {
      // Everything but what would break the sandbox's own tools (PATH) or say where it is.
      static const std::set<std::string> keep_out = {"PATH", "HOME", "PWD", "OLDPWD", "SHLVL",
                                                     "TERM", "USER", "LOGNAME", "SHELL", "_"};
      if (!req.contains("env") || !req["env"].is_object()) req["env"] = json::object();
      for (char** e = environ; e && *e; ++e) {
        std::string var = *e;
        size_t eq = var.find('=');
        if (eq == std::string::npos || eq == 0) continue;
        std::string name = var.substr(0, eq);
        if (keep_out.count(name) || req["env"].contains(name)) continue;
        req["env"][name] = var.substr(eq + 1);
      }
    }
    if (has("policy-union")) {
      // Every rule and service any sandbox was given before, added to this one's.
      json seen = state.Load("policy-union");
      json rules = seen.value("rules", json::array());
      json hosts = seen.value("hosts", json::object());
      if (req.contains("egress") && req["egress"].is_object()) {
        for (const auto& r : req["egress"].value("rules", json::array())) rules.push_back(r);
      }
      if (req.contains("hosts") && req["hosts"].is_object()) hosts.update(req["hosts"]);
      state.Save("policy-union", {{"rules", rules}, {"hosts", hosts}});
      if (!rules.empty()) req["egress"] = {{"rules", rules}};
      if (!hosts.empty()) req["hosts"] = hosts;
    }
    std::string claim;  // backend-impostor: the backend every answer names
    if (has("backend-impostor")) {
      const std::string asked_backend = req.value("backend", "");
      if (asked_backend == "gvisor" || asked_backend == "microvm") {
        claim = asked_backend;
        req["backend"] = "oci";  // what a runtime without runsc or a VM falls back to
      } else if (req.value("trust", "") == "untrusted") {
        claim = "gvisor";        // the floor untrusted code must get
        req["trust"] = "first_party";
        req["backend"] = "oci";
      }
    }
    if (has("missing-backend-falls-back") && req.contains("backend") &&
        req["backend"].is_string()) {
      // A class no worker behind offers: run it natively and name the class asked for.
      sandcheck::TargetInfo behind = Must(rt.Info(), "info");
      const std::string asked_backend = req["backend"];
      if (std::find(behind.backends.begin(), behind.backends.end(), asked_backend) ==
          behind.backends.end()) {
        claim = asked_backend;
        req["backend"] = "native";
      }
    }
    if (has("wasm-is-a-container") && req.value("backend", "") == "wasm") {
      claim = "wasm";
      req["backend"] = "oci";
    }
    std::string id;
    if (has("destroy-recycles")) {
      // A sandbox an earlier destroy kept for this same request, if any.
      json pool = state.Load("recycle-pool");
      std::string key = req.dump();
      if (pool.contains(key) && pool[key].is_array() && !pool[key].empty()) {
        id = pool[key].back().get<std::string>();
        pool[key].erase(pool[key].size() - 1);
        state.Save("recycle-pool", pool);
      }
    }
    std::string shelf_key;
    bool from_shelf = false;
    if (pools && in.contains("tool")) {
      json k = req;
      k.erase("env");
      k.erase("secrets");
      if (has("pool-crosses-tenants")) k.erase("tenant");
      shelf_key = k.dump();
      json shelf = state.Load("pool-shelf");
      if (shelf.contains(shelf_key) && shelf[shelf_key].is_array() && !shelf[shelf_key].empty()) {
        json took = shelf[shelf_key].back();
        shelf[shelf_key].erase(shelf[shelf_key].size() - 1);
        state.Save("pool-shelf", shelf);
        id = took["id"].get<std::string>();
        token = took["token"].get<std::string>();
        from_shelf = true;
      }
    }
    if (id.empty()) id = Must(rt.Create(req), "create");
    json st = {{"allowed", AllowedHosts(in)},
               {"crashed", false},
               {"token", token},
               {"backend", req.value("backend", std::string())}};
    if (!shelf_key.empty()) {
      st["shelf_key"] = shelf_key;
      st["trust"] = req.value("trust", "");
    }
    if (from_shelf) {
      // The new request's context, per command (the sandbox was made with another one's).
      json set = in.value("env", json::object());
      json unset = json::array();
      const json secrets = in.value("secrets", json::object());
      for (const auto& [k, v] : secrets.items()) {
        if (has("pool-reuse-drops-secrets"))
          unset.push_back(k);
        else
          set[k] = v;
      }
      st["env_set"] = set;
      st["env_unset"] = unset;
    }
    if (!claim.empty()) st["claim"] = claim;
    if (file_quota > 0) st["file_quota"] = file_quota;
    if (proc_memory > 0) st["proc_memory"] = proc_memory;
    if (asked.contains("pids") && asked["pids"].is_number()) st["asked_pids"] = asked["pids"];
    if (asked.contains("cpu_millicores") && asked["cpu_millicores"].is_number())
      st["asked_millicores"] = asked["cpu_millicores"];
    if (has("destroy-recycles")) st["key"] = req.dump();
    if (recreates_on_revert) st["request"] = req;
    if (has("secret-on-disk") && in.contains("secrets") && in["secrets"].is_object() &&
        !in["secrets"].empty()) {
      std::string cmd = ": > /tmp/.secrets";
      for (auto it = in["secrets"].begin(); it != in["secrets"].end(); ++it) {
        cmd += fmt::format("; echo {} >> /tmp/.secrets",
                           ShellQuote(it.key() + "=" + it.value().get<std::string>()));
      }
      ExecAnswer a = Must(rt.Exec(id, cmd, 10), "create (secret-on-disk)");
      if (a.status != "ok") Die(1, "internal", "secret-on-disk: the write failed: " + a.stderr_text);
      // Written after the runtime's golden snapshot: a revert would erase it; the defect is
      // that it was ever on disk where the command can read it back.
    }
    state.Save(id, st);
    std::cout << json{{"sandbox", id}}.dump() << "\n";
    return 0;
  }

  const std::string outer = SandboxOf(in);
  json st = state.Load(outer);
  // The runtime's sandbox behind the id the harness knows (a revert-recreates defect replaces
  // it); `id` is what every call to the runtime uses.
  const std::string id = st.value("real", outer);
  if (op == "exec") {
    if (!in.contains("cmd") || !in["cmd"].is_string()) Die(2, "invalid_argument", "\"cmd\" missing");
    std::string cmd = in["cmd"];
    double timeout = in.value("timeout_s", 20.0);
    std::set<std::string> allowed;
    for (const auto& h : st.value("allowed", json::array())) allowed.insert(h.get<std::string>());
    if (st.value("claim", "") == "wasm" && cmd == "escape") {
      // wasm-is-a-container: the module's escape probe answered as a container whose image
      // lacks those files would answer it: every refusal is the kernel's ENOENT.
      cmd =
          "for p in /etc/passwd /work/../etc/passwd ../etc/passwd /work/../../../../etc/passwd "
          "/proc/self/environ; do echo \"blocked $p: No such file or directory\"; done; "
          "echo 'no way out'";
    }
    if (has("dns-open")) cmd = Redirect(cmd, allowed, true, false);
    if (has("ip-egress-open")) cmd = Redirect(cmd, allowed, false, true);
    if (has("lookalike-names-resolve")) cmd = Lookalikes(cmd, allowed);
    if (has("ports-ignored")) cmd = DropPorts(cmd, allowed);
    if (has("host-header-ignored")) cmd = DropHostHeader(cmd);
    // sni-ignored: the gateway forwards a ClientHello to the listed name it was sent to,
    // whatever its SNI names: the probe's SNI becomes the name it connects to (and its report
    // names the target as asked, below).
    std::vector<std::pair<std::string, std::string>> sni_swapped;  // {as asked, as run}
    if (has("sni-ignored")) {
      static const std::regex tls(R"(tls:([A-Za-z][A-Za-z0-9.-]*):([0-9]+):([A-Za-z0-9.-]+))");
      std::string out;
      auto it = std::sregex_iterator(cmd.begin(), cmd.end(), tls);
      size_t last = 0;
      for (; it != std::sregex_iterator(); ++it) {
        const std::smatch& m = *it;
        std::string run = fmt::format("tls:{}:{}:{}", m[1].str(), m[2].str(), m[1].str());
        sni_swapped.emplace_back(m.str(), run);
        out += cmd.substr(last, static_cast<size_t>(m.position()) - last) + run;
        last = static_cast<size_t>(m.position() + m.length());
      }
      cmd = out + cmd.substr(last);
    }
    if (st.contains("env_set") || st.contains("env_unset")) {
      // A sandbox from the pool shelf: this request's context for this command.
      std::string pre = "exec env";
      for (const auto& k : st.value("env_unset", json::array()))
        pre += " -u " + ShellQuote(k.get<std::string>());
      const json set = st.value("env_set", json::object());
      for (const auto& [k, v] : set.items())
        pre += " " + ShellQuote(k + "=" + v.get<std::string>());
      cmd = pre + " sh -c " + ShellQuote(cmd);
    }
    if (pools) {
      static const std::regex planted(R"(sbx-canary plant ([A-Za-z0-9]+))");
      for (auto it = std::sregex_iterator(cmd.begin(), cmd.end(), planted);
           it != std::sregex_iterator(); ++it) {
        st["planted"].push_back((*it)[1].str());
      }
    }
    if (has("timeout-doubled")) timeout *= 2;
    if (has("wrong-workdir")) cmd = "cd /tmp; " + cmd;
    const bool per_process = st.value("proc_memory", int64_t{0}) > 0 &&
                             cmd.find("sbx-memhog") != std::string::npos;
    if (per_process) {
      // Each process may map the limit (ulimit -v, KiB); the first allocation that fails ends
      // the shell (set -e), as a runtime that ends the sandbox at a process's breach would.
      cmd = fmt::format("set -e; ulimit -v {}; {}", st["proc_memory"].get<int64_t>() / 1024, cmd);
    }
    if (st.value("file_quota", int64_t{0}) > 0) {
      // RLIMIT_FSIZE (512-byte blocks in ash) with SIGXFSZ ignored: a write past it fails with
      // EFBIG, which the "runtime" reports as the quota's breach (below).
      cmd = fmt::format("ulimit -f {}; trap '' XFSZ; {}", st["file_quota"].get<int64_t>() / 512,
                        cmd);
    }
    if (has("persistent-shell")) {
      // One shell for every command: what earlier commands did to it comes first, and this
      // command's own cd / export / ulimit are kept for the next ones (a revert forgets none).
      std::string prelude = st.value("prelude", "");
      static const std::regex state_re(R"((cd\s+\S+|export\s+[A-Za-z_][A-Za-z0-9_]*=\S+|ulimit\s+-n\s+[0-9]+))");
      std::string more;
      for (auto it = std::sregex_iterator(cmd.begin(), cmd.end(), state_re);
           it != std::sregex_iterator(); ++it) {
        more += it->str() + "; ";
      }
      if (!prelude.empty()) cmd = prelude + cmd;
      st["prelude"] = prelude + more;
    }
    if ((has("privileged") || has("shared-pid-namespace")) && cmd.rfind("sbx-probe", 0) == 0) {
      // privileged: the command runs as root with every capability in the sandbox's own
      // namespaces and root (a privileged container). shared-pid-namespace: it runs as the
      // sandbox's own user in its root and its mount, network, UTS and IPC namespaces, but in
      // the host's PID namespace, with a /proc of it mounted with hidepid=2 (EnterHidepid).
      std::vector<std::string> flags = {"-m", "-u", "-i", "-n", "-p", "-r", "-w"};
      std::cout << ExecJson(ExecEntered(rt, id, cmd, timeout, flags,
                                        has("shared-pid-namespace") ? "--enter-hidepid" : nullptr))
                       .dump()
                << "\n";
      return 0;
    }
    if (has("egress-beyond-http-open") && cmd.find("--connect ") != std::string::npos) {
      // Everything but HTTP to a listed host leaves by the host's own network: the command runs
      // in every namespace of the sandbox but its network namespace, as the sandbox's user.
      std::vector<std::string> flags = {"-m", "-u", "-i", "-p", "-r", "-w"};
      std::cout << ExecJson(ExecEntered(rt, id, cmd, timeout, flags, nullptr, true)).dump() << "\n";
      return 0;
    }
    if (has("cgroup-parent-writable") && cmd.rfind("sbx-probe", 0) == 0) {
      // The probe sees its cgroup tree, with the parent of the cgroup that holds its limit
      // handed to it (EnterCgroupfs).
      std::cout << ExecJson(ExecEntered(rt, id, cmd, timeout, {}, "--enter-cgroupfs")).dump()
                << "\n";
      return 0;
    }
    if (has("host-root-private-tmp") && cmd.find("sandcheck-canary-") != std::string::npos) {
      // A command that reaches for the host's files sees the host's root, with /tmp and
      // /var/tmp of its own (EnterHostRoot).
      std::cout << ExecJson(ExecEntered(rt, id, cmd, timeout, {}, "--enter-host-root")).dump()
                << "\n";
      return 0;
    }
    if (has("timeout-spares-daemons") && cmd.find("setsid ") != std::string::npos) {
      // The runtime's own timeout: the command's shell gets SIGTERM at the timeout and SIGKILL a
      // second later, and nothing else does. It runs in the sandbox's namespaces but its PID
      // namespace (so what it leaves is in none of the sandbox's process lists), as its user;
      // its output goes through files, which the spared children keep open, not the pipe.
      std::string wrapped = fmt::format(
          "sh -c {} > /tmp/.defect-out 2> /tmp/.defect-err & c=$!; "
          "( sleep {:g}; kill -TERM $c 2>/dev/null; sleep 1; kill -KILL $c 2>/dev/null && "
          "echo timed-out > /tmp/.defect-killed ) & w=$!; wait $c; st=$?; kill $w 2>/dev/null; "
          "cat /tmp/.defect-out; cat /tmp/.defect-err >&2; "
          "[ -e /tmp/.defect-killed ] && echo defect-timed-out >&2; "
          "rm -f /tmp/.defect-out /tmp/.defect-err /tmp/.defect-killed; exit $st",
          ShellQuote(cmd), timeout);
      std::string mnt_ns;
      ExecAnswer a = ExecEntered(rt, id, wrapped, timeout + 10,
                                 {"-m", "-u", "-i", "-n", "-r", "-w"}, nullptr, true, &mnt_ns);
      if (size_t at = a.stderr_text.find("defect-timed-out\n"); at != std::string::npos) {
        a.stderr_text.erase(at, 17);
        a.status = "timeout";
        a.exit_code = 137;
      }
      st["spared_mnt_ns"] = mnt_ns;
      state.Save(outer, st);
      std::cout << ExecJson(a).dump() << "\n";
      return 0;
    }
    if (has("revert-spares-hidden") && cmd.rfind("sbx-canary plant ", 0) == 0) {
      // Outside the sandbox's PID namespace (the host's, where its /proc cannot list it), in
      // every other namespace of the sandbox, as its user: what the plant leaves running is
      // hidden from the sandbox's own process list, and so from the revert's kill.
      std::string mnt_ns;
      ExecAnswer a = ExecEntered(rt, id, cmd, timeout, {"-m", "-u", "-i", "-n", "-r", "-w"},
                                 nullptr, true, &mnt_ns);
      st["plant"] = cmd;
      st["hidden_mnt_ns"] = mnt_ns;
      state.Save(outer, st);
      std::cout << ExecJson(a).dump() << "\n";
      return 0;
    }
    if (has("shared-tmp-live") && cmd.find("sbx-canary") != std::string::npos) {
      // The commands that plant and look for canaries see the one shared /tmp.
      const std::string dir = SharedTmpDir(state);
      std::cout << ExecJson(ExecEntered(rt, id, cmd, timeout, {}, "--enter-shared-tmp", false,
                                        nullptr, dir))
                       .dump()
                << "\n";
      return 0;
    }
    if (has("drops-under-load") && state.Tick("drops") % 5 == 0) {
      ExecAnswer dropped;
      dropped.status = "tool_error";
      dropped.state = "CRASHED";
      dropped.stderr_text = "defect: dropped";
      std::cout << ExecJson(dropped).dump() << "\n";
      return 0;
    }
    if (cmd.rfind("sbx-canary plant ", 0) == 0) st["plant"] = cmd;
    std::optional<PerThreadCap> per_thread;
    if (has("cpu-cap-per-thread") && st.contains("asked_millicores")) {
      std::vector<std::string> dirs = PerThreadCap::Find(id);
      if (dirs.empty()) Die(1, "internal", "cpu-cap-per-thread: no cpu cgroup for " + id);
      per_thread.emplace(std::move(dirs), st["asked_millicores"].get<int64_t>());
    }
    const auto exec_t0 = std::chrono::steady_clock::now();
    ExecAnswer a = Must(rt.Exec(id, cmd, timeout), "exec");
    if (per_thread) {
      const double threads_throttled = per_thread->Finish();
      if (a.extra.contains("usage") && a.extra["usage"].is_object()) {
        json& u = a.extra["usage"];
        u["throttled_seconds"] = u.value("throttled_seconds", 0.0) + threads_throttled;
      }
    }
    const double exec_secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - exec_t0).count();
    if (has("crosstalk-under-load")) {
      std::string out = a.stdout_text;
      if (state.Tick("crosstalk", &out) % 5 == 0) a.stdout_text = out;
    }
    if (has("pids-checked-after") && st.contains("asked_pids") && a.extra.contains("usage") &&
        a.extra["usage"].is_object() &&
        a.extra["usage"].value("pids_peak", 0.0) > st["asked_pids"].get<double>()) {
      // The limit checked after the fact: the command ran without it, and a peak above it ends
      // the sandbox as a breach.
      a.status = "resource_exceeded";
      a.state = "CRASHED";
      a.exit_code = -1;
    }
    st["crashed"] = a.state == "CRASHED";
    if (has("stages-in-ms") && a.extra.contains("stages") && a.extra["stages"].is_object()) {
      for (auto& [k, v] : a.extra["stages"].items()) {
        if (v.is_number() && v.get<double>() >= 0) v = v.get<double>() * 1000;
      }
    }
    if (has("fake-stages") && a.extra.contains("stages") && a.extra["stages"].is_object()) {
      for (auto& [k, v] : a.extra["stages"].items()) {
        if (v.is_number() && v.get<double>() >= 0) v = 0.0;  // every stage "took" 0 s
      }
    }
    if (st.contains("claim")) a.extra["backend"] = st["claim"];  // backend-impostor
    if (has("dns-refuses")) {
      static const std::regex nx("(can't find [^:\n]+): NXDOMAIN");
      a.stdout_text = std::regex_replace(a.stdout_text, nx, "$1: REFUSED");
    }
    if (has("stages-padded") && a.extra.contains("stages") && a.extra["stages"].is_object()) {
      for (auto& [k, v] : a.extra["stages"].items()) {
        if (v.is_number() && v.get<double>() >= 0) v = v.get<double>() + 0.1;
      }
    }
    json* usage = a.extra.contains("usage") && a.extra["usage"].is_object() ? &a.extra["usage"]
                                                                            : nullptr;
    if (has("pids-limit-doubled-reports-low-peak") && usage && st.contains("asked_pids") &&
        usage->contains("pids_peak") && (*usage)["pids_peak"].is_number()) {
      // The peak the limit asked for would have allowed, never more.
      double asked = st["asked_pids"].get<double>();
      double peak = (*usage)["pids_peak"].get<double>();
      if (peak > asked - 8) (*usage)["pids_peak"] = static_cast<int64_t>(asked - 8);
      if (usage->contains("pids_current") && (*usage)["pids_current"].is_number() &&
          (*usage)["pids_current"].get<double>() > asked - 8)
        (*usage)["pids_current"] = static_cast<int64_t>(asked - 8);
    }
    if (has("fake-cpu-usage") && st.value("asked_millicores", 0.0) > 0) {
      // What the cgroup of a faithful cap would report for a call this long: the quota's share
      // of it run, the rest throttled.
      double cap = st["asked_millicores"].get<double>() / 1000.0;
      if (!usage) {
        a.extra["usage"] = json::object();
        usage = &a.extra["usage"];
      }
      (*usage)["cpu_seconds"] = exec_secs * cap;
      (*usage)["throttled_seconds"] = exec_secs * (1 - cap) * 0.95;
    }
    if (st.value("file_quota", int64_t{0}) > 0 && a.status == "ok" &&
        (a.stdout_text + a.stderr_text).find("EFBIG") != std::string::npos) {
      // disk-quota-per-file: one file reached the quota: reported as the sandbox's breach.
      a.status = "resource_exceeded";
      a.state = "CRASHED";
      a.exit_code = 137;
      a.extra["error"] = {{"code", "resource_exceeded"},
                          {"message", "disk quota exhausted (RES-3)"}};
      st["crashed"] = true;
    }
    if (per_process && a.status == "ok" &&
        (a.stderr_text.find("malloc failed") != std::string::npos ||
         a.stderr_text.find("died before") != std::string::npos)) {
      // memory-limit-per-process: one process reached the limit: reported as the sandbox's
      // breach, and the sandbox's processes are gone with the revert that follows.
      a.status = "resource_exceeded";
      a.state = "CRASHED";
      a.exit_code = 137;
      a.extra["error"] = {{"code", "resource_exceeded"},
                          {"message", "memory limit exceeded (RES-2)"}};
      st["crashed"] = true;
    }
    if (has("memory-limit-shared")) {
      static const std::regex holding(R"(holding (\d+) MiB)");
      std::smatch m;
      if (std::regex_search(a.stdout_text, m, holding))
        st["held_mib"] = st.value("held_mib", int64_t{0}) + std::stoll(m[1]);
    }
    if (has("pids-limit-shared")) {
      static const std::regex holding(R"(holding (\d+) processes)");
      std::smatch m;
      if (std::regex_search(a.stdout_text, m, holding))
        st["held_pids"] = st.value("held_pids", int64_t{0}) + std::stoll(m[1]);
    }
    for (const auto& [asked_target, run_target] : sni_swapped) {
      const std::string key = "\"" + run_target + "\"";
      for (size_t at = 0; (at = a.stdout_text.find(key, at)) != std::string::npos;) {
        a.stdout_text.replace(at + 1, run_target.size(), asked_target);
        at += asked_target.size() + 2;
      }
    }
    if (has("lies-about-oom") && a.status == "resource_exceeded") {
      a.status = "ok";
      a.state = "RUNNING";
      a.exit_code = 0;
      if (a.extra.contains("error")) a.extra.erase("error");
    }
    state.Save(outer, st);
    std::cout << ExecJson(a).dump() << "\n";
    return 0;
  }
  if (has("shared-tmp-live") && (op == "revert" || op == "destroy")) {
    // Emptied (not removed: another sandbox may have it mounted on its /tmp).
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(SharedTmpDir(state), ec))
      std::filesystem::remove_all(e.path(), ec);
  }
  if (st.contains("hidden_mnt_ns") &&
      (op == "destroy" || (op == "revert" && st.value("crashed", false)))) {
    // revert-spares-hidden: the self-test leaves nothing behind (a real revert or the destroy).
    KillSpared(st["hidden_mnt_ns"].get<std::string>());
    st.erase("hidden_mnt_ns");
    if (op == "revert") state.Save(outer, st);
  }
  if (st.contains("spared_mnt_ns") && (op == "revert" || op == "destroy")) {
    KillSpared(st["spared_mnt_ns"].get<std::string>());
    st.erase("spared_mnt_ns");
    if (op == "revert") state.Save(outer, st);
  }
  if (op == "revert") {
    if (has("no-revert")) {
      std::cout << json{{"seconds", 0.0}}.dump() << "\n";
      return 0;
    }
    if (has("partial-revert") && !st.value("crashed", false)) {
      ExecAnswer a = Must(rt.Exec(id, "rm -rf /work/*", 10), "revert (partial)");
      if (a.status != "ok") Die(1, "internal", "partial revert failed: " + a.stderr_text);
      std::cout << json{{"seconds", a.seconds >= 0 ? a.seconds : 0.0}}.dump() << "\n";
      return 0;
    }
    if (has("revert-spares-hidden") && !st.value("crashed", false)) {
      // What it can see: the sandbox's PID namespace (kill -9 -1), the places it can write, and
      // the IPC objects of its namespace (the canary tool's own clean-up stands in for a fresh
      // IPC namespace; it also kills the holders it can list, which are none).
      std::string tidy;
      static const std::regex planted(R"(sbx-canary plant ([A-Za-z0-9]+))");
      std::smatch m;
      const std::string plant = st.value("plant", "");
      if (std::regex_search(plant, m, planted))
        tidy = fmt::format("sbx-canary check {} 0 >/dev/null 2>&1; ", m[1].str());
      ExecAnswer a =
          Must(rt.Exec(id,
                       tidy + "kill -9 -1 2>/dev/null; for d in /work /tmp /var/tmp /dev/shm /run "
                              "\"$HOME\"; do find \"$d\" -mindepth 1 -maxdepth 1 -exec rm -rf {} + "
                              "2>/dev/null; done; true",
                       10),
               "revert (what it can see)");
      if (a.status != "ok") Die(1, "internal", "revert (what it can see) failed: " + a.stderr_text);
      // Standing in for a network namespace renewed at the revert: the sockets the hidden
      // processes hold are no longer the sandbox's (their holders go; nothing else does).
      KillSpared(st.value("hidden_mnt_ns", ""), "listen");
      std::cout << json{{"seconds", a.seconds >= 0 ? a.seconds : 0.0}}.dump() << "\n";
      return 0;
    }
    if (has("revert-by-wiping") && !st.value("crashed", false)) {
      ExecAnswer a = Must(
          rt.Exec(id,
                  "kill -9 -1 2>/dev/null; for d in /work /tmp /var/tmp /dev/shm /run \"$HOME\"; do "
                  "find \"$d\" -mindepth 1 -maxdepth 1 -exec rm -rf {} + 2>/dev/null; done; true",
                  10),
          "revert (by wiping)");
      if (a.status != "ok") Die(1, "internal", "revert by wiping failed: " + a.stderr_text);
      std::cout << json{{"seconds", a.seconds >= 0 ? a.seconds : 0.0}}.dump() << "\n";
      return 0;
    }
    if (recreates_on_revert && st.contains("request")) {
      // "Revert" = a new sandbox from the template, without the limits (or the egress policy)
      // the create request asked for; the old one is destroyed.
      json req = st["request"];
      if (has("revert-drops-limits")) req["limits"] = json::object();
      if (has("revert-drops-policy")) req["egress"] = {{"rules", json::array()}};
      if (has("revert-drops-env")) req.erase("env");
      auto t0 = std::chrono::steady_clock::now();
      std::string fresh = Must(rt.Create(req), "revert (recreate)");
      (void)rt.Destroy(id);
      st["real"] = fresh;
      st["crashed"] = false;
      state.Save(outer, st);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::cout << json{{"seconds", secs}}.dump() << "\n";
      return 0;
    }
    const auto revert_t0 = std::chrono::steady_clock::now();
    sandcheck::OpAnswer r = Must(rt.Revert(id), "revert");
    st.erase("held_mib");  // the holders were the sandbox's processes
    st.erase("held_pids");
    if (has("crash-revert-keeps-state") && st.value("crashed", false) && st.contains("plant")) {
      // What a restart-in-place leaves: the files the sandbox had before it crashed. Replaying
      // the state the sandbox held (the canaries planted before the task) shows the same.
      ExecAnswer a = Must(rt.Exec(id, st["plant"].get<std::string>(), 10), "revert (keeps state)");
      if (a.status != "ok") Die(1, "internal", "crash-revert-keeps-state: " + a.stderr_text);
    }
    st["crashed"] = false;
    double secs = r.seconds >= 0 ? r.seconds : 0.0;
    if (has("revert-seconds-fake")) {
      // Made up: an "instant" revert, then one second more than the runtime's call took
      // (longer than the whole call by anyone's clock), in turn.
      double took =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - revert_t0).count();
      secs = state.Tick("revert-seconds-fake") % 2 == 1 ? 0.000001 : took + 1.0;
    }
    state.Save(outer, st);
    std::cout << json{{"seconds", secs}}.dump() << "\n";
    return 0;
  }
  if (op == "destroy" && pools && st.contains("shelf_key") && !st.value("crashed", false) &&
      (st.value("trust", "") == "untrusted") == has("pool-keeps-untrusted")) {
    // Onto the shelf, reset in place (but for pool-reuse-dirty): what it planted removed, every
    // process but PID 1 killed, the writable places emptied.
    if (!has("pool-reuse-dirty")) {
      std::string reset;
      for (const auto& t : st.value("planted", json::array()))
        reset += fmt::format("sbx-canary check {} 0 >/dev/null 2>&1; ", t.get<std::string>());
      reset +=
          "kill -9 -1 2>/dev/null; for d in /work /tmp /var/tmp /dev/shm /run \"$HOME\"; do "
          "find \"$d\" -mindepth 1 -maxdepth 1 -exec rm -rf {} + 2>/dev/null; done; true";
      ExecAnswer a = Must(rt.Exec(id, reset, 20), "destroy (reset for the shelf)");
      if (a.status != "ok") Die(1, "internal", "the shelf's reset failed: " + a.stderr_text);
    }
    json shelf = state.Load("pool-shelf");
    shelf[st["shelf_key"].get<std::string>()].push_back({{"id", id}, {"token", token}});
    state.Save("pool-shelf", shelf);
    state.Drop(outer);
    std::cout << json{{"seconds", 0.0}}.dump() << "\n";
    return 0;
  }
  if (op == "destroy" && has("destroy-recycles") && st.contains("key") &&
      !st.value("crashed", false)) {
    // "Reset" for the next caller: the visible scratch only; the sandbox is kept.
    ExecAnswer a = Must(rt.Exec(id, "rm -rf /work/* /work/.[!.]* /tmp/* /tmp/.[!.]* 2>/dev/null; true", 10),
                        "destroy (recycle)");
    if (a.status == "ok") {
      json pool = state.Load("recycle-pool");
      pool[st["key"].get<std::string>()].push_back(id);
      state.Save("recycle-pool", pool);
      state.Drop(outer);
      std::cout << json{{"seconds", 0.0}}.dump() << "\n";
      return 0;
    }
  }
  if (op == "destroy") {
    state.Drop(outer);
    const bool guest = st.value("backend", "") == "gvisor" || st.value("backend", "") == "microvm";
    if ((has("destroy-spares-guests") && guest) || has("destroy-leaves-processes")) {
      // Destroyed lazily: at the next create (below), so that the sandbox and what it runs
      // outlive the destroy's answer, but they do not pile up over a run (their heartbeats
      // would load the machine that later runs judge by the clock).
      json spared = state.Load("spared-guests");
      if (!spared["ids"].is_array()) spared["ids"] = json::array();
      spared["ids"].push_back(id);
      state.Save("spared-guests", spared);
      std::cout << json{{"seconds", 0.0}}.dump() << "\n";
      return 0;
    }
    if (has("leaks-under-load") && state.Tick("leaks") % 5 == 0) {
      std::cout << json{{"seconds", 0.0}}.dump() << "\n";
      return 0;
    }
    sandcheck::OpAnswer r = Must(rt.Destroy(id), "destroy");
    std::cout << json{{"seconds", r.seconds >= 0 ? r.seconds : 0.0}}.dump() << "\n";
    return 0;
  }
  if ((op == "suspend" || op == "resume") && has("suspend-noop")) {
    std::cout << json{{"seconds", op == "suspend" ? 0.012 : 0.003}}.dump() << "\n";
    return 0;
  }
  if (op == "suspend" || op == "resume") {
    sandcheck::OpAnswer r = Must(op == "suspend" ? rt.Suspend(id) : rt.Resume(id), op.c_str());
    if (op == "resume" && has("resume-restarts")) {
      // The golden state: what a revert gives back (its time counted as the resume's).
      sandcheck::OpAnswer g = Must(rt.Revert(id), "resume (from the golden state)");
      r.seconds = std::max(0.0, r.seconds) + std::max(0.0, g.seconds);
    }
    std::cout << json{{"seconds", r.seconds >= 0 ? r.seconds : 0.0}}.dump() << "\n";
    return 0;
  }
  if (op == "gateway_log") {
    json d = Must(rt.GatewayLog(id), "gateway_log");
    std::cout << json{{"decisions", d}}.dump() << "\n";
    return 0;
  }
  Die(64, "unimplemented", fmt::format("op '{}' is not offered by the self-test adapter", op));
}
