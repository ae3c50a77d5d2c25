// sandboxctl: run one command in a sandbox of the reference runtime, and show what it can do.
//
// Exit status: 0 the command ran (whatever it did), 2 bad usage or input, 3 environment failure
// (missing privilege, runtime cannot start), 4 the sandbox could not be provided
// (sandbox_unavailable). Documented in docs/sandboxctl.md.
#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "client/remote_runtime.h"
#include "k8s/manifest.h"
#include "runtime_module.h"
#include "sbx/model.h"
#include "sbx/runtime.h"
#include "sbx/units.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;
constexpr int kExitEnv = 3;
constexpr int kExitUnavailable = 4;

constexpr const char* kUsage = R"(usage: sandboxctl [--server URL [--token T] [TLS options]] COMMAND [OPTIONS]

Commands:
  run [OPTIONS] -- CMD...   run one command in a fresh sandbox (cwd /work) and print the result;
                            a single CMD argument is run with sh -c, several are an argv
  create [OPTIONS]          create a sandbox that lives across commands; prints its ID last
  exec [--json] [--timeout S] ID -- CMD   run `sh -c CMD` in /work of sandbox ID
  revert ID                 back to the latest durable snapshot (SNAP-2); prints seconds
  suspend ID | resume ID    freeze + durable filesystem snapshot / thaw (SNAP-3)
  destroy ID                terminate and reclaim everything (LC-7, LC-8)
  list                      the caller's sandboxes
  info                      what this worker can run (backends, features, cgroup version)
  showcase                  the memory, CPU and timeout limits at work, as a table
  manifest kubernetes [OPTIONS]  the Pod and NetworkPolicy a sandbox of these options becomes
                            on Kubernetes, as a List for kubectl apply (run/create options, and
                            --namespace NS, --image TEMPLATE=IMAGE, --sandbox-id ID,
                            --runtime-id ID, --gateway-dns IP, --microvm-floor;
                            docs/kubernetes.md). Secrets are never written into it
  help                      this text

Global options:
  --server URL         a sandboxd: unix:/run/sandcheck/sandboxd.sock or http://127.0.0.1:PORT
                       (also $SANDBOXCTL_SERVER). create/exec/revert/suspend/resume/destroy/list
                       need one: a sandbox lives in the daemon, not in this process.
  --token T            the tenant's token (also $SANDBOXD_TOKEN)
  --ca FILE            https:// server: trust the certificate chain of this CA (PEM), for the
                       host in the URL
  --pin HEX            https:// server: accept exactly the certificate with this SHA-256
                       (`openssl x509 -noout -fingerprint -sha256`); --ca, --pin or both
  --cert FILE --key FILE   https:// server asking for a client certificate (mutual TLS)

Options of run and create:
  --json               print one JSON result object (status, state, exit, stdout, stderr,
                       seconds, stages, usage, backend)
  --backend NAME       native, oci, gvisor, wasm (or microvm, kubernetes, remote where the worker
                       has them; `info` lists them). Default: chosen from --trust and the
                       tenant's floor (docs/selection.md); never silently weaker than asked
  --cpu Q              CPU hard cap: 500m, 1.5, 2 (RES-1)
  --memory SIZE        memory limit: 256Mi, 1G (RES-2)
  --pids N             pids.max (RES-4)
  --fds N              RLIMIT_NOFILE (RES-6)
  --disk SIZE          scratch quota (RES-3)
  --timeout SECONDS    then SIGTERM, 1 s grace, SIGKILL (RES-5); default 30
  --env K=V            environment variable (repeatable)
  --secret K=V         secret, handed over in memory only and zeroed after use (LC-4, LC-8)
  --allow URL          egress rule http://HOST:PORT or tls://HOST:PORT (repeatable; EGR-1)
  --host NAME=ADDR:PORT  where an allowed name really lives (service directory)
  --template NAME      image/template (default: sandbox)
  --tenant T --tool NAME --trust first_party|verified|untrusted|unverified

Exit status: 0 the command ran (whatever it did); 2 bad usage or input; 3 environment failure
(e.g. not root); 4 sandbox unavailable.
)";

struct UsageError {
  std::string message;
};

std::string Need(const std::vector<std::string>& a, size_t& i) {
  if (i + 1 >= a.size()) throw UsageError{fmt::format("{} needs a value", a[i])};
  return a[++i];
}

template <typename T>
T OrUsage(sbx::StatusOr<T> v, const std::string& flag) {
  if (!v.ok()) throw UsageError{fmt::format("{}: {}", flag, v.status().message())};
  return std::move(v).value();
}

void SplitKV(const std::string& flag, const std::string& kv, std::map<std::string, std::string>* out) {
  size_t eq = kv.find('=');
  if (eq == std::string::npos || eq == 0) throw UsageError{fmt::format("{} '{}': expected K=V", flag, kv)};
  (*out)[kv.substr(0, eq)] = kv.substr(eq + 1);
}

// Parses the options shared by run and create; the command follows "--" (run only).
sbx::ExecRequest ParseRun(const std::vector<std::string>& a, bool* json, bool want_command = true) {
  sbx::ExecRequest req;
  size_t i = 0;
  for (; i < a.size(); ++i) {
    const std::string& f = a[i];
    if (f == "--") { ++i; break; }
    if (f == "--json") *json = true;
    else if (f == "--backend") req.sandbox.backend = Need(a, i);
    else if (f == "--cpu") req.sandbox.limits.cpu_millicores = OrUsage(sbx::ParseMillicores(Need(a, i)), f);
    else if (f == "--memory") req.sandbox.limits.memory_bytes = OrUsage(sbx::ParseBytes(Need(a, i)), f);
    else if (f == "--disk") req.sandbox.limits.disk_bytes = OrUsage(sbx::ParseBytes(Need(a, i)), f);
    else if (f == "--pids") req.sandbox.limits.pids = OrUsage(sbx::ParseCount(Need(a, i), 1 << 22), f);
    else if (f == "--fds") req.sandbox.limits.fds = OrUsage(sbx::ParseCount(Need(a, i), 1 << 20), f);
    else if (f == "--timeout") req.exec.timeout_s = OrUsage(sbx::ParseSeconds(Need(a, i)), f);
    else if (f == "--env") SplitKV(f, Need(a, i), &req.sandbox.env);
    else if (f == "--secret") SplitKV(f, Need(a, i), &req.sandbox.secrets);
    else if (f == "--allow") req.sandbox.egress.rules.push_back(OrUsage(sbx::ParseAllowFlag(Need(a, i)), f));
    else if (f == "--host") {
      std::string name, addr;
      sbx::Status s = sbx::ParseHostFlag(Need(a, i), &name, &addr);
      if (!s.ok()) throw UsageError{s.message()};
      req.sandbox.hosts[name] = addr;
    } else if (f == "--template") req.sandbox.template_name = Need(a, i);
    else if (f == "--tenant") req.sandbox.tenant = Need(a, i);
    else if (f == "--tool") req.sandbox.tool = Need(a, i);
    else if (f == "--trust") req.sandbox.trust = OrUsage(sbx::ParseTrust(Need(a, i)), f);
    else if (f == "-h" || f == "--help") throw UsageError{""};
    else if (!f.empty() && f[0] == '-') throw UsageError{fmt::format("unknown option '{}'", f)};
    else break;  // the command starts without "--"
  }
  std::vector<std::string> cmd(a.begin() + static_cast<long>(i), a.end());
  if (!want_command) {
    if (!cmd.empty()) throw UsageError{fmt::format("create: unexpected argument '{}'", cmd[0])};
    return req;
  }
  if (cmd.empty()) throw UsageError{"run: no command given (sandboxctl run [OPTIONS] -- CMD...)"};
  if (cmd.size() == 1) req.exec.command = cmd[0];
  else req.exec.argv = cmd;
  return req;
}

struct Global {
  std::string server, token;
  sbx::http::TlsOptions tls;  // --ca, --pin, --cert, --key
};
Global g_global;

// The runtime in this process: libsbx-runtime.so from ../lib next to this binary, loaded only
// now (runtime_module.h), so that a command sent to a sandboxd never maps its libraries.
sbx::StatusOr<std::unique_ptr<sbx::Runtime>> OpenInProcess() {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return sbx::Status(sbx::Code::kInternal, "cannot find this binary (/proc/self/exe)");
  self[n] = '\0';
  std::string path = (std::filesystem::path(self).parent_path().parent_path() / "lib" /
                      sbx::module::kFileName).string();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return sbx::Status(sbx::Code::kFailedPrecondition,
                       fmt::format("cannot load the runtime: {} (it is built beside sandboxctl, "
                                   "in ../lib)", dlerror()));
  }
  // Never dlclose'd: the runtime's objects and threads live until exit.
  auto open = reinterpret_cast<sbx::module::OpenFn>(dlsym(handle, sbx::module::kOpenSymbol));
  if (open == nullptr) {
    return sbx::Status(sbx::Code::kFailedPrecondition,
                       fmt::format("{} has no {}: not this build's runtime module", path,
                                   sbx::module::kOpenSymbol));
  }
  sbx::RuntimeOptions o;
  sbx::Status error;
  sbx::Runtime* rt = open(&o, &error);
  if (rt == nullptr) return error;
  return std::unique_ptr<sbx::Runtime>(rt);
}

sbx::StatusOr<std::unique_ptr<sbx::Runtime>> OpenRuntime() {
  if (!g_global.server.empty())
    return sbx::client::OpenRemoteRuntime(g_global.server, g_global.token, g_global.tls);
  return OpenInProcess();
}

sbx::StatusOr<std::unique_ptr<sbx::Runtime>> OpenServer(const std::string& cmd) {
  if (g_global.server.empty()) {
    return sbx::Status(sbx::Code::kInvalidArgument,
                       cmd + " needs --server URL (or $SANDBOXCTL_SERVER): a sandbox that lives "
                             "across commands lives in sandboxd, not in this process");
  }
  return OpenRuntime();
}

int EnvFailure(const sbx::Status& s) {
  fmt::print(stderr, "sandboxctl: {}\n", s.ToString());
  return s.code() == sbx::Code::kInvalidArgument ? kExitUsage : kExitEnv;
}

void PrintHuman(const sbx::ExecResult& r) {
  std::fwrite(r.stdout_tail.data(), 1, r.stdout_tail.size(), stdout);
  std::fflush(stdout);
  std::fwrite(r.stderr_tail.data(), 1, r.stderr_tail.size(), stderr);
  fmt::print(stderr, "[sandboxctl] status={} state={} exit={}{} seconds={:.3f} backend={}{}\n",
             sbx::ExecStatusName(r.status), sbx::SandboxStateName(r.state), r.exit_code,
             r.signal ? fmt::format(" signal={}", r.signal) : "", r.seconds, r.backend,
             r.reason.empty() ? "" : " reason=\"" + r.reason + "\"");
}

int CmdRun(const std::vector<std::string>& args) {
  bool json = false;
  sbx::ExecRequest req = ParseRun(args, &json);
  // Through a sandboxd the run is the first request (no GET /v1/info before it: a round trip
  // of a one-shot command's cost, docs/sandboxctl.md). Only when it fails is the server asked
  // what is wrong, so a wrong token or an absent daemon is still an environment failure (exit
  // 3), as when the runtime is opened first.
  const bool remote = !g_global.server.empty();
  auto rt = remote ? sbx::client::OpenRemoteRuntime(g_global.server, g_global.token, g_global.tls,
                                                    /*probe=*/false)
                   : OpenInProcess();
  if (!rt.ok()) return EnvFailure(rt.status());
  sbx::ExecResult r = (*rt)->Run(req);
  if (remote && r.status == sbx::ExecStatus::kSandboxUnavailable) {
    auto probed = sbx::client::OpenRemoteRuntime(g_global.server, g_global.token, g_global.tls);
    if (!probed.ok()) return EnvFailure(probed.status());
  }
  if (json) {
    std::cout << nlohmann::json(r).dump() << "\n";
  } else {
    PrintHuman(r);
  }
  return r.status == sbx::ExecStatus::kSandboxUnavailable ? kExitUnavailable : kExitOk;
}

int PrintStatusError(const sbx::Status& s) {
  fmt::print(stderr, "sandboxctl: {}\n", s.ToString());
  switch (s.code()) {
    case sbx::Code::kInvalidArgument: return kExitUsage;
    case sbx::Code::kNotFound: return kExitUsage;
    case sbx::Code::kSandboxUnavailable: return kExitUnavailable;
    default: return kExitEnv;
  }
}

int CmdCreate(const std::vector<std::string>& args) {
  bool json = false;
  sbx::ExecRequest req = ParseRun(args, &json, /*want_command=*/false);
  auto rt = OpenServer("create");
  if (!rt.ok()) return EnvFailure(rt.status());
  auto id = (*rt)->Create(req.sandbox);
  if (!id.ok()) return PrintStatusError(id.status());
  if (json) std::cout << nlohmann::json{{"sandbox", *id}}.dump() << "\n";
  else std::cout << *id << "\n";
  return kExitOk;
}

// BK-6: the Kubernetes objects a sandbox of these options becomes (docs/kubernetes.md), printed
// as a List for `kubectl apply -f -`. Needs no server and no root.
int CmdManifest(const std::vector<std::string>& args) {
  if (args.empty() || args[0] != "kubernetes")
    throw UsageError{"manifest: which backend? (sandboxctl manifest kubernetes [OPTIONS])"};
  sbx::k8s::ManifestOptions o;
  sbx::k8s::Placement placement;
  std::string id = "sb0000000000";
  std::vector<std::string> rest;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& f = args[i];
    if (f == "--namespace") o.namespace_name = Need(args, i);
    else if (f == "--sandbox-id") id = Need(args, i);
    else if (f == "--runtime-id") o.runtime_id = Need(args, i);
    else if (f == "--microvm-floor") placement.microvm_floor = true;
    else if (f == "--image") {
      std::map<std::string, std::string> kv;
      SplitKV(f, Need(args, i), &kv);
      for (auto& [t, img] : kv) o.images[t] = img;
    } else if (f == "--gateway-dns") o.gateway_dns_ip = Need(args, i);
    else rest.push_back(f);
  }
  bool json = false;
  sbx::ExecRequest req = ParseRun(rest, &json, /*want_command=*/false);
  placement.trust = req.sandbox.trust;
  auto list = sbx::k8s::SandboxManifests(id, req.sandbox, placement, o);
  if (!list.ok()) throw UsageError{"manifest: " + list.status().message()};
  std::cout << list->dump(2) << "\n";
  return kExitOk;
}

int CmdExec(const std::vector<std::string>& a) {
  bool json = false;
  sbx::ExecSpec e;
  std::string id;
  size_t i = 0;
  for (; i < a.size(); ++i) {
    if (a[i] == "--json") json = true;
    else if (a[i] == "--timeout") e.timeout_s = OrUsage(sbx::ParseSeconds(Need(a, i)), "--timeout");
    else if (a[i] == "--") { ++i; break; }
    else if (!a[i].empty() && a[i][0] == '-') throw UsageError{fmt::format("unknown option '{}'", a[i])};
    else if (id.empty()) id = a[i];
    else break;
  }
  if (id.empty()) throw UsageError{"exec: no sandbox ID (sandboxctl exec [--json] [--timeout S] ID -- CMD)"};
  std::vector<std::string> cmd(a.begin() + static_cast<long>(i), a.end());
  if (cmd.empty()) throw UsageError{"exec: no command given"};
  std::string joined;
  for (const auto& c : cmd) joined += (joined.empty() ? "" : " ") + c;
  e.command = joined;  // the Execution API runs `sh -c CMD` in /work
  auto rt = OpenServer("exec");
  if (!rt.ok()) return EnvFailure(rt.status());
  auto r = (*rt)->Exec(id, e);
  if (!r.ok()) return PrintStatusError(r.status());
  if (json) std::cout << nlohmann::json(*r).dump() << "\n";
  else PrintHuman(*r);
  return r->status == sbx::ExecStatus::kSandboxUnavailable ? kExitUnavailable : kExitOk;
}

int CmdLifecycle(const std::string& cmd, const std::vector<std::string>& a) {
  if (a.size() != 1 || a[0].empty() || a[0][0] == '-') throw UsageError{fmt::format("usage: sandboxctl {} ID", cmd)};
  auto rt = OpenServer(cmd);
  if (!rt.ok()) return EnvFailure(rt.status());
  sbx::Runtime& r = **rt;
  sbx::StatusOr<double> s = cmd == "revert"    ? r.Revert(a[0])
                            : cmd == "suspend" ? r.Suspend(a[0])
                            : cmd == "resume"  ? r.Resume(a[0])
                                               : r.Destroy(a[0]);
  if (!s.ok()) return PrintStatusError(s.status());
  fmt::print("{} {} in {:.4f} s\n", a[0], cmd == "destroy" ? "destroyed" : cmd + (cmd == "resume" ? "d" : "ed"), *s);
  return kExitOk;
}

int CmdList() {
  auto rt = OpenServer("list");
  if (!rt.ok()) return EnvFailure(rt.status());
  fmt::print("{:<16} {:<9} {:<8} {:<10} {:<10} {}\n", "SANDBOX", "STATE", "BACKEND", "TENANT", "TEMPLATE", "TOOL");
  for (const auto& i : (*rt)->List()) {
    fmt::print("{:<16} {:<9} {:<8} {:<10} {:<10} {}\n", i.id, sbx::SandboxStateName(i.state), i.backend, i.tenant,
               i.template_name, i.tool);
  }
  return kExitOk;
}

int CmdInfo() {
  auto rt = OpenRuntime();
  if (!rt.ok()) return EnvFailure(rt.status());
  std::cout << (*rt)->Info().dump(2) << "\n";
  return kExitOk;
}

// The memory, CPU and timeout cases of the foundation, as a table (ci/demo until the harness).
int CmdShowcase() {
  auto rto = OpenRuntime();
  if (!rto.ok()) return EnvFailure(rto.status());
  sbx::Runtime& rt = **rto;
  struct Case {
    std::string label, limits, command;
    sbx::Limits l;
    double timeout;
  };
  std::vector<Case> cases = {
      {"CPU work, no cap", "-", "sbx-cpu -n 300", {}, 60},
      {"CPU work, 500m cap", "cpu 500m", "sbx-cpu -n 300", {.cpu_millicores = 500}, 60},
      {"allocate 640 MiB", "memory 256Mi", "sbx-memhog 640", {.memory_bytes = 256 << 20}, 60},
      {"sleep 1000", "timeout 1 s", "sleep 1000", {}, 1},
      {"fork bomb", "pids 64", "sbx-forkbomb", {.pids = 64}, 3},
      {"write 100 MiB", "disk 64Mi", "dd if=/dev/zero of=/work/big bs=1M count=100", {.disk_bytes = 64 << 20}, 30},
  };
  fmt::print("{:<22} {:<14} {:<18} {:<9} {:>5} {:>8}  {}\n", "case", "limit", "status", "state", "exit",
             "seconds", "evidence");
  double base_wall = 0;
  for (const Case& c : cases) {
    sbx::ExecRequest req;
    req.sandbox.limits = c.l;
    req.exec.command = c.command;
    req.exec.timeout_s = c.timeout;
    sbx::ExecResult r = rt.Run(req);
    std::string evidence;
    if (c.command.rfind("sbx-cpu", 0) == 0) {
      if (base_wall == 0) base_wall = r.seconds;
      evidence = fmt::format("wall {:.2f}x of uncapped, host CPU {:.2f} s", r.seconds / base_wall,
                             r.usage.cpu_seconds);
    } else if (r.usage.oom_kills > 0) {
      evidence = fmt::format("OOM kills {}, peak {} MiB", r.usage.oom_kills, r.usage.memory_peak_bytes >> 20);
    } else if (!r.reason.empty()) {
      evidence = r.reason;
    }
    fmt::print("{:<22} {:<14} {:<18} {:<9} {:>5} {:>8.2f}  {}\n", c.label, c.limits,
               sbx::ExecStatusName(r.status), sbx::SandboxStateName(r.state), r.exit_code, r.seconds,
               evidence);
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? kExitUsage : kExitOk;
  }
  try {
    // Global options come before the command.
    if (const char* env = std::getenv("SANDBOXCTL_SERVER")) g_global.server = env;
    if (const char* env = std::getenv("SANDBOXD_TOKEN")) g_global.token = env;
    size_t i = 0;
    for (; i < args.size(); ++i) {
      if (args[i] == "--server") g_global.server = Need(args, i);
      else if (args[i] == "--token") g_global.token = Need(args, i);
      else if (args[i] == "--ca") g_global.tls.ca_file = Need(args, i);
      else if (args[i] == "--pin") g_global.tls.pin_sha256 = Need(args, i);
      else if (args[i] == "--cert") g_global.tls.client_cert_file = Need(args, i);
      else if (args[i] == "--key") g_global.tls.client_key_file = Need(args, i);
      else break;
    }
    if (i >= args.size()) throw UsageError{"no command (see sandboxctl help)"};
    std::string cmd = args[i];
    std::vector<std::string> rest(args.begin() + static_cast<long>(i) + 1, args.end());
    if (cmd == "help" || cmd == "--help" || cmd == "-h") {
      std::fputs(kUsage, stdout);
      return kExitOk;
    }
    if (cmd == "run") return CmdRun(rest);
    if (cmd == "create") return CmdCreate(rest);
    if (cmd == "exec") return CmdExec(rest);
    if (cmd == "revert" || cmd == "suspend" || cmd == "resume" || cmd == "destroy") return CmdLifecycle(cmd, rest);
    if (cmd == "list") return CmdList();
    if (cmd == "info") return CmdInfo();
    if (cmd == "manifest") return CmdManifest(rest);
    if (cmd == "showcase") return CmdShowcase();
    throw UsageError{fmt::format("unknown command '{}'", cmd)};
  } catch (const UsageError& e) {
    if (e.message.empty()) {
      std::fputs(kUsage, stdout);
      return kExitOk;
    }
    fmt::print(stderr, "sandboxctl: {}\n(see sandboxctl help)\n", e.message);
    return kExitUsage;
  }
}
