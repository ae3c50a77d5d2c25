// sandcheck-adapter-bwrap: adapter protocol v1 for bubblewrap (BK-1, a native namespace
// sandbox), one bwrap per exec.
//
// bwrap runs unprivileged, as the image's sandbox user (the way it is meant to be used): the
// adapter drops root before exec'ing it, and bwrap builds the sandbox in a new user namespace.
// What it cannot do, it is not asked to: bubblewrap has no cgroup support, so there is no CPU,
// memory or pids limit; the only limit is RLIMIT_NOFILE, set by the adapter before exec.
#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sstream>

#include "common/json_io.h"
#include "common/protocol.h"

namespace sandcheck::adapter {
namespace {

constexpr const char* kTmpSize = "67108864";  // /tmp tmpfs, 64 MiB

class Bwrap : public Runtime {
 public:
  Description Describe() const override {
    const char* no_cgroups = "bubblewrap has no cgroup support (it only builds namespaces)";
    return {
        .name = "bwrap",
        .backends = {"native"},
        .features = {"revert", "destroy", "timeout", "limits.fds", "files"},
        .unsupported = {
            {"limits.cpu", no_cgroups},
            {"limits.memory", no_cgroups},
            {"limits.pids",
             fmt::format("{}; RLIMIT_NPROC counts per user, not per sandbox", no_cgroups)},
            {"limits.disk", "no scratch quota: /work is a host directory"},
            {"egress",
             "no egress gateway: --unshare-net leaves loopback only, so allow-listed hosts are "
             "unreachable too"},
            {"suspend",
             "one bwrap per exec: no process state is kept between execs (no suspend/resume ops)"},
            {"tenants", "no tenant model: a sandbox serves whoever holds its id"},
            {"trust", "no trust classes: one isolation level"},
            {"pool", "no warm pool: every exec starts a new bwrap"},
            {"secrets", "not implemented: would need a memory-only file passed to bwrap (LC-4)"},
        }};
  }

  sbx::StatusOr<std::string> Version(Supervisor& sup) override {
    std::vector<std::string> argv = {"bwrap", "--version"};
    ASSIGN_OR_RETURN(RunResult r, Run(sup, argv));
    if (!r.success()) return sbx::Internal(DescribeFailure(argv, r));
    std::string first = r.out.substr(0, r.out.find('\n'));  // "bubblewrap 0.8.0"
    auto space = first.rfind(' ');
    return space == std::string::npos ? first : first.substr(space + 1);
  }

  sbx::StatusOr<ExecResult> Exec(Supervisor& sup, SandboxContext& sbx,
                                 const ExecRequest& req) override {
    // clang-format off
    std::vector<std::string> argv = {
        "bwrap",
        // SECURITY: new user, pid, net, ipc, uts and cgroup namespaces; no capabilities; no
        // nested user namespaces (less kernel surface); killed with the adapter.
        "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
        "--die-with-parent", "--new-session", "--hostname", "sandbox",
        // FS-1, FS-2: the sandbox's own image copy read-only as /, /work read-write.
        "--ro-bind", sbx.rootfs, "/",
        "--bind", sbx.work, "/work",
        "--proc", "/proc",
        "--dev", "/dev",
        "--perms", "1777", "--size", kTmpSize, "--tmpfs", "/tmp",
        "--chdir", "/work",
        "--clearenv",
        "--setenv", "PATH", "/usr/sbin:/usr/bin:/sbin:/bin",
        "--setenv", "HOME", "/work",
        "--setenv", "LANG", "C"};
    // clang-format on
    for (const auto& [k, v] : sbx.record.env) {
      argv.insert(argv.end(), {"--setenv", k, v});
    }
    argv.insert(argv.end(), {"--json-status-fd", "3", "--", "/bin/sh", "-c", req.cmd});

    ASSIGN_OR_RETURN(Pipe out, MakePipe());
    ASSIGN_OR_RETURN(Pipe err, MakePipe());
    ASSIGN_OR_RETURN(Pipe status_pipe, MakePipe());
    for (int fd : {out.read.get(), err.read.get(), status_pipe.read.get()}) {
      fcntl(fd, F_SETFL, O_NONBLOCK);
    }
    int64_t nofile = sbx.record.limits.fds.value_or(0);
    SpawnSpec spec;
    spec.argv = argv;
    spec.stdout_fd = out.write.get();
    spec.stderr_fd = err.write.get();
    spec.extra_fds = {{status_pipe.write.get(), 3}};
    spec.child_hook = [nofile]() -> int {
      if (nofile > 0) {
        // RES-6: inherited by bwrap and everything in the sandbox.
        rlimit rl{static_cast<rlim_t>(nofile), static_cast<rlim_t>(nofile)};
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) return errno;
      }
      // SECURITY: drop root for good before bwrap runs; bwrap then needs no privilege at all
      // (unprivileged user namespaces), and nothing in the sandbox maps to a host root.
      if (setgroups(0, nullptr) != 0) return errno;
      if (setresgid(kSandboxGid, kSandboxGid, kSandboxGid) != 0) return errno;
      if (setresuid(kSandboxUid, kSandboxUid, kSandboxUid) != 0) return errno;
      // After setuid (which clears it): bwrap dies if the adapter does.
      if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return errno;
      return 0;
    };
    auto start = Clock::now();
    ASSIGN_OR_RETURN(pid_t pid, Spawn(spec));
    out.write.Reset();
    err.write.Reset();
    status_pipe.write.Reset();
    TailBuffer out_tail, err_tail, status_tail;
    std::vector<Supervisor::Stream> streams;
    streams.push_back({std::move(out.read), &out_tail});
    streams.push_back({std::move(err.read), &err_tail});
    streams.push_back({std::move(status_pipe.read), &status_tail});

    int ws = 0;
    // LC-5, RES-5: bwrap's pid 1 dies with bwrap (--die-with-parent) and takes the whole PID
    // namespace with it, so SIGKILL to bwrap ends every process of the command at once.
    auto wake = sup.Wait(pid, DeadlineIn(req.timeout_s), streams, -1, &ws);
    bool timed_out = wake == Supervisor::Wake::kDeadline;
    if (wake != Supervisor::Wake::kExited) {
      kill(pid, SIGKILL);
      if (sup.Wait(pid, DeadlineIn(10), streams, -1, &ws) != Supervisor::Wake::kExited) {
        return sbx::Internal(fmt::format("bwrap (pid {}) would not die", pid));
      }
    }
    ExecResult res;
    res.seconds = SecondsSince(start);
    sup.Drain(streams, DeadlineIn(1));
    if (wake == Supervisor::Wake::kSignal) return sbx::Internal("adapter interrupted by a signal");

    // --json-status-fd: {"child-pid": N} once the sandbox is set up, {"exit-code": N} at the end.
    bool started = false;
    std::optional<int> exit_code;
    std::istringstream lines(status_tail.data());
    std::string line;
    while (std::getline(lines, line)) {
      auto j = ParseObject(line);
      if (!j.ok()) continue;
      if (j->contains("child-pid")) started = true;
      if (auto it = j->find("exit-code"); it != j->end() && it->is_number_integer()) {
        exit_code = it->get<int>();
      }
    }
    if (!started && !timed_out) {
      return sbx::Internal(fmt::format("bwrap could not set up the sandbox ({}): {}",
                                       DescribeWaitStatus(ws), err_tail.data()));
    }
    res.out = out_tail.data();
    res.err = err_tail.data();
    res.exit = exit_code ? *exit_code : ExitCodeOf(ws);
    if (timed_out) res.status = "timeout";
    return res;
  }
};

}  // namespace
}  // namespace sandcheck::adapter

int main(int argc, char** argv) {
  sandcheck::adapter::Bwrap runtime;
  return sandcheck::adapter::AdapterMain(argc, argv, runtime);
}
