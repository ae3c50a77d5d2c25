// AdapterDriver: adapter protocol v1 (docs/adapters.md). Every operation is one run of
// `ADAPTER OP` with one JSON object on stdin and one on stdout, bounded by a deadline after which
// the adapter's whole process group is killed. Exit 0 = the operation was carried out (even if
// the command inside failed); exit 64 = unknown operation; anything else — another exit code, a
// signal, a hang, output that is not one JSON object — is the adapter failing (exit code 3).
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "common/subprocess.h"
#include "drivers/target.h"

namespace sandcheck {
namespace {

using nlohmann::json;

constexpr int kExitUnknownOp = 64;

std::string Tail(const std::string& s, size_t n) {
  std::string t = s.size() > n ? "..." + s.substr(s.size() - n) : s;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

class AdapterDriver final : public Target {
 public:
  AdapterDriver(std::string path, TargetOptions options)
      : path_(std::move(path)), options_(std::move(options)) {}

  std::string Kind() const override { return "adapter"; }
  std::string Spec() const override { return "adapter:" + path_; }

  // Each call is its own process: another thread gets another driver on the same adapter.
  sbx::StatusOr<std::unique_ptr<Target>> ForThread() override {
    return std::unique_ptr<Target>(new AdapterDriver(path_, options_));
  }

  sbx::StatusOr<TargetInfo> Info() override {
    ASSIGN_OR_RETURN(json j, Call("info", json::object(), 0));
    auto info = ParseInfo(j);
    if (!info.ok()) return Wrap("info", info.status());
    features_ = info->features;
    return info;
  }

  sbx::StatusOr<std::string> Create(const json& request) override {
    ASSIGN_OR_RETURN(json j, Call("create", request, 0));
    if (!j.is_object() || !j.contains("sandbox") || !j["sandbox"].is_string() ||
        j["sandbox"].get<std::string>().empty()) {
      return sbx::Internal(fmt::format(
          "adapter {} create: answer lacks \"sandbox\" (a non-empty string): {}", path_, j.dump()));
    }
    return j["sandbox"].get<std::string>();
  }

  sbx::StatusOr<ExecAnswer> Exec(const std::string& sandbox, const std::string& cmd,
                                 double timeout_s) override {
    ASSIGN_OR_RETURN(
        json j,
        Call("exec", {{"sandbox", sandbox}, {"cmd", cmd}, {"timeout_s", timeout_s}}, timeout_s));
    auto a = ParseExecAnswer(j);
    if (!a.ok()) return Wrap("exec", a.status());
    return a;
  }

  // POOL-2, POOL-6 through an adapter (an optional op of v1): `run` takes the create object
  // plus "cmd" and "timeout_s", runs the command once in a sandbox of the adapter's pool (or a
  // new one) and answers as exec does. Exit 64: the adapter has no pooled runs (a skip).
  sbx::StatusOr<ExecAnswer> RunPooled(const json& request, const std::string& cmd,
                                      double timeout_s) override {
    json in = request;
    in["cmd"] = cmd;
    in["timeout_s"] = timeout_s;
    auto called = Call("run", in, timeout_s);
    if (!called.ok() && called.status().code() == sbx::Code::kUnsupported) {
      // Said as what is missing for the checks that needed it (NFR-1 pooled, POOL-2, POOL-6).
      return sbx::Unsupported("no one-shot run through a warm pool: " + called.status().message());
    }
    if (!called.ok()) return called.status();
    auto a = ParseExecAnswer(*called);
    if (!a.ok()) return Wrap("run", a.status());
    return a;
  }

  sbx::StatusOr<OpAnswer> Revert(const std::string& sandbox) override {
    return Op("revert", sandbox);
  }
  sbx::StatusOr<OpAnswer> Destroy(const std::string& sandbox) override {
    return Op("destroy", sandbox);
  }

  sbx::StatusOr<OpAnswer> Suspend(const std::string& sandbox) override {
    return Op("suspend", sandbox);
  }
  sbx::StatusOr<OpAnswer> Resume(const std::string& sandbox) override {
    return Op("resume", sandbox);
  }

  // NFR-5 through an adapter (an extension of v1, docs/nfr.md): a target that lists the feature
  // "orphan_sweep" answers `orphan_sweep {"samples","sandboxes"}` with {"seconds":[...]}: it
  // kills its own runtime holding that many sandboxes and times its reaper itself.
  sbx::StatusOr<OrphanSweep> MeasureOrphanSweep(int samples, int sandboxes,
                                                const std::string& backend) override {
    if (std::find(features_.begin(), features_.end(), "orphan_sweep") == features_.end()) {
      return sbx::Unsupported(
          "the adapter does not list the feature orphan_sweep (the op that kills its runtime and "
          "times its reaper, docs/nfr.md)");
    }
    json in = {{"samples", samples}, {"sandboxes", sandboxes}};
    if (!backend.empty()) in["backend"] = backend;
    ASSIGN_OR_RETURN(json j, Call("orphan_sweep", in, 60.0 * samples));
    OrphanSweep out;
    out.clock = "target";
    if (!j.is_object() || !j.contains("seconds") || !j["seconds"].is_array()) {
      return sbx::Internal(
          fmt::format("adapter {} orphan_sweep: answer lacks \"seconds\" (an array)", path_));
    }
    for (const auto& v : j["seconds"]) {
      if (!v.is_number() || v.get<double>() < 0) {
        return sbx::Internal(
            fmt::format("adapter {} orphan_sweep: \"seconds\" holds a non-number", path_));
      }
      out.seconds.push_back(v.get<double>());
    }
    out.evidence = j;
    return out;
  }

  // PROD-1 (target.h): the op's input names the caller ("caller": TENANT), an extension of v1
  // for an adapter that offers `tenants`. Its refusal is an error answer (exit 1 or 2) whose
  // code is not_found, permission_denied or unauthenticated; an adapter without tenants has
  // nobody to refuse.
  sbx::StatusOr<ForeignAnswer> CallAs(const std::string& caller, const std::string& op,
                                      const std::string& sandbox, const std::string& cmd,
                                      double timeout_s) override {
    if (std::find(features_.begin(), features_.end(), "tenants") == features_.end())
      return sbx::Unsupported("the adapter does not offer the feature tenants");
    if (caller.empty()) {
      return sbx::Unsupported(
          "an adapter's caller is the one running it: a call with no credential is an Execution "
          "API's question (over HTTP)");
    }
    if (op != "exec" && op != "revert" && op != "destroy")
      return sbx::InvalidArgument("CallAs: op is exec, revert or destroy, not " + op);
    json in = {{"sandbox", sandbox}, {"caller", caller}};
    if (op == "exec") {
      in["cmd"] = cmd;
      in["timeout_s"] = timeout_s;
    }
    ForeignAnswer f;
    ASSIGN_OR_RETURN(json j, Call(op, in, op == "exec" ? timeout_s : 0, &f));
    if (f.refused) return f;
    f.said = "carried out: " + j.dump().substr(0, 200);
    if (op == "exec") {
      auto a = ParseExecAnswer(j);
      if (!a.ok()) return Wrap("exec (another caller)", a.status());
      f.said = fmt::format("carried out: status {}, exit {}", a->status, a->exit_code);
      f.exec = *a;
    }
    return f;
  }

  sbx::StatusOr<json> GatewayLog(const std::string& sandbox) override {
    // An extension of v1 offered with the feature "egress.log": {"sandbox"} → {"decisions":[...]}.
    ASSIGN_OR_RETURN(json j, Call("gateway_log", {{"sandbox", sandbox}}, 0));
    if (!j.is_object() || !j.contains("decisions") || !j["decisions"].is_array()) {
      return sbx::Internal(
          fmt::format("adapter {} gateway_log: answer lacks \"decisions\" (an array)", path_));
    }
    return j["decisions"];
  }

 private:
  sbx::Status Wrap(const char* op, const sbx::Status& st) const {
    return sbx::Internal(fmt::format("adapter {} {}: {}", path_, op, st.message()));
  }

  sbx::StatusOr<OpAnswer> Op(const char* op, const std::string& sandbox) {
    ASSIGN_OR_RETURN(json j, Call(op, {{"sandbox", sandbox}}, 0));
    auto a = ParseOpAnswer(j);
    if (!a.ok()) return Wrap(op, a.status());
    return a;
  }

  // One adapter run. `extra_s` extends the deadline by the command's own timeout (exec). With
  // `refusal`, an error answer whose code is a refusal (PROD-1) fills it instead of failing.
  sbx::StatusOr<json> Call(const std::string& op, const json& input, double extra_s,
                           ForeignAnswer* refusal = nullptr) {
    SubprocessOptions o;
    o.argv = {path_, op};
    o.stdin_data = input.dump() + "\n";
    o.timeout_s = options_.call_timeout_s + extra_s;
    o.extra_env["SANDCHECK_PROTOCOL"] = "1";
    if (!options_.tools_dir.empty()) o.extra_env["SANDCHECK_TOOLS_DIR"] = options_.tools_dir;
    auto r = RunSubprocess(o);
    if (!r.ok())
      return sbx::Status(r.status().code(),
                         fmt::format("adapter {} {}: {}", path_, op, r.status().message()));
    if (r->timed_out) {
      return sbx::Status(
          sbx::Code::kTimeout,
          fmt::format("adapter {} {} did not answer within {:.1f} s; its process group was killed",
                      path_, op, o.timeout_s));
    }
    if (r->term_signal != 0) {
      return sbx::Internal(fmt::format("adapter {} {} was killed by signal {}; stderr: {}", path_,
                                       op, r->term_signal, Tail(r->err, 500)));
    }
    if (r->exit_code == kExitUnknownOp) {
      return sbx::Unsupported(
          fmt::format("adapter {} does not know the operation '{}' (exit 64)", path_, op));
    }
    if (r->exit_code != 0) {
      // The error object the protocol asks for on stdout, when there is one: its code is what
      // a check may read (sandbox_unavailable is SEL-5's refusal; PROD-1's refusals below).
      json e = json::parse(r->out, nullptr, /*allow_exceptions=*/false);
      std::string code = "?", said;
      if (e.is_object() && e.contains("error") && e["error"].is_object()) {
        const json& err = e["error"];
        if (err.contains("code") && err["code"].is_string()) code = err["code"].get<std::string>();
        said = fmt::format(" ({}: {})", code,
                           err.contains("message") && err["message"].is_string()
                               ? err["message"].get<std::string>().substr(0, 300)
                               : "");
      }
      if (refusal &&
          (code == "not_found" || code == "permission_denied" || code == "unauthenticated")) {
        refusal->refused = true;
        refusal->said = fmt::format("exit {}: {}", r->exit_code, e["error"].dump().substr(0, 280));
        return json::object();
      }
      return sbx::Internal(fmt::format("adapter {} {} failed with exit status {}{}; stderr: {}",
                                       path_, op, r->exit_code, said, Tail(r->err, 500)));
    }
    if (r->output_truncated)
      return sbx::Internal(fmt::format("adapter {} {} printed more than 16 MiB", path_, op));
    json j = json::parse(r->out, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      std::string head = r->out.substr(0, 200);
      return sbx::Internal(fmt::format(
          "adapter {} {} printed something that is not one JSON object: \"{}\"", path_, op, head));
    }
    return j;
  }

  std::string path_;
  TargetOptions options_;
  std::vector<std::string> features_;  // from info
};

}  // namespace

sbx::StatusOr<std::unique_ptr<Target>> MakeAdapterTarget(const std::string& path,
                                                         const TargetOptions& options) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return sbx::InvalidArgument(fmt::format("--target adapter:{}: no such file", path));
  }
  if (::access(path.c_str(), X_OK) != 0) {
    return sbx::InvalidArgument(fmt::format("--target adapter:{}: not executable", path));
  }
  return std::unique_ptr<Target>(new AdapterDriver(path, options));
}

}  // namespace sandcheck
