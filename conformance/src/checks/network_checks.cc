// The network checks of the six tasks: the allowed download, a name that must not resolve, a
// destination the gateway must refuse (EGR-1..EGR-3, SCN-2..SCN-4).
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <regex>

#include "checks/checks.h"
#include "checks/evidence.h"
#include "checks/verdict.h"
#include "common/json_strict.h"
#include "common/stats.h"

namespace sandcheck::eval {

using nlohmann::json;

namespace {

// A denial task's evidence from the harness's own mirror: nothing may have reached it while the
// task ran (the command tries only the denied destination). Returns the failure, or "".
std::string MirrorReached(const TaskRecord& t, Verdict& v) {
  if (!t.mirror_log) return "";
  v.evidence["mirror_log"] = *t.mirror_log;
  if (t.mirror_log->empty()) return "";
  return fmt::format(
      "the harness's mirror logged '{}' while the task ran{}: the request got out to a service "
      "it must not reach",
      t.mirror_log->front(),
      t.mirror_log->size() > 1 ? fmt::format(" (and {} more)", t.mirror_log->size() - 1) : "");
}

}  // namespace

Verdict AllowedDownload(TaskRecord& t, const json& p, const TargetInfo& info) {
  const ExecAnswer& a = t.task->answer;
  NetEvidence net = ClassifyNetwork(a.stdout_text, a.stderr_text);
  std::string content = p["content"], file = p["file"], host = p["host"];
  Verdict v;
  v.evidence["network"] = net.ToJson();
  bool saved = a.status == "ok" && a.exit_code == 0 &&
               a.stdout_text.find(content) != std::string::npos &&
               (file.empty() || a.stdout_text.find(file) != std::string::npos);
  t.refused = !saved;
  v.evidence["downloaded"] = saved;
  if (!saved) {
    t.got = a.status != "ok" ? fmt::format("{}, {}", a.status, a.state)
                             : (net.wget != WgetOutcome::kNotRun ? net.Summary() : Told(a));
    v.outcome = Outcome::kFail;
    v.reason =
        fmt::format("the allowed download failed ({}); expected exit 0 and \"{}\"{}", Told(a),
                    content, file.empty() ? "" : fmt::format(" and {} listed", file));
    return v;
  }
  t.got = "file saved, exit 0";
  if (t.mirror_log) {
    // The harness's own mirror says whether the file really came from it: output can be made
    // up, the mirror's request log cannot be written from inside the sandbox.
    v.evidence["mirror_log"] = *t.mirror_log;
    std::string want = host;
    std::transform(want.begin(), want.end(), want.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    bool reached = std::any_of(t.mirror_log->begin(), t.mirror_log->end(), [&](const auto& l) {
      return l.rfind("GET ", 0) == 0 && MirrorLogHost(l) == want;
    });
    if (!reached) {
      v.outcome = Outcome::kFail;
      v.reason = fmt::format(
          "\"{}\" came back, but the harness's mirror logged no GET for {} while the task ran "
          "(it logged {} line(s)): the file did not come from the mirror",
          content, host, t.mirror_log->size());
      return v;
    }
  }
  if (!info.Has("egress.log")) {
    v.evidence["gateway"] = "not offered by the target (feature egress.log)";
    return {
        Outcome::kPass,
        fmt::format("\"{}\" saved and listed, exit 0 (the target offers no gateway log){}", content,
                    t.mirror_log ? "; the mirror logged the GET" : ""),
        v.evidence};
  }
  json allowed = json::array();
  for (const auto& d : DecisionsFor(t.gateway, host)) {
    if (d.value("verdict", std::string()) == "allow") allowed.push_back(d);
  }
  v.evidence["gateway"] = DecisionsFor(t.gateway, host);
  if (allowed.empty()) {
    v.outcome = Outcome::kFail;
    v.reason = fmt::format(
        "the file came back but the gateway log shows no 'allow' for {}: it did not go "
        "through the gateway",
        host);
    return v;
  }
  v.outcome = Outcome::kPass;
  v.reason = fmt::format("\"{}\" saved, exit 0, through the gateway ({} allow decision(s) for {}){}",
                         content, allowed.size(), host,
                         t.mirror_log ? "; the mirror logged the GET" : "");
  return v;
}

Verdict NameNotResolved(TaskRecord& t, const json& p) {
  const ExecAnswer& a = t.task->answer;
  NetEvidence net = ClassifyNetwork(a.stdout_text, a.stderr_text);
  std::string name = p["name"];
  bool need_nx = p["require_nxdomain"];
  Verdict v;
  v.evidence["network"] = net.ToJson();
  t.got = net.Summary();
  t.refused = net.wget != WgetOutcome::kOk;
  if (!Ran(a)) {
    t.got = fmt::format("{}, {}", a.status, a.state);
    return {Outcome::kFail, fmt::format("the command did not run: {}", Told(a)), v.evidence};
  }
  if (net.lookup == LookupOutcome::kResolved) {
    v.reason = fmt::format("{} resolved ({})", name, net.lookup_line);
  } else if (net.wget == WgetOutcome::kNotRun) {
    v.reason = fmt::format("no wget outcome in the output ({})", Told(a));
  } else if (net.wget != WgetOutcome::kBadAddress) {
    v.reason = fmt::format("{} resolved: wget went on to '{}'{}", name, net.Summary(),
                           net.wget_line.empty() ? "" : " (" + net.wget_line + ")");
  } else if (std::string reached = MirrorReached(t, v); !reached.empty()) {
    v.reason = fmt::format("{} looked unresolved from inside, but {}", name, reached);
  } else if (need_nx && net.lookup != LookupOutcome::kNxdomain) {
    v.reason = fmt::format(
        "wget reports a bad address, but nslookup did not get NXDOMAIN ({}): the name "
        "is not refused by the resolver",
        net.lookup_line.empty() ? LookupOutcomeName(net.lookup) : net.lookup_line);
  } else {
    return {Outcome::kPass,
            fmt::format("{} not resolved: {}", name,
                        net.lookup == LookupOutcome::kNxdomain
                            ? "NXDOMAIN, and wget reports a bad address"
                            : "wget reports a bad address"),
            v.evidence};
  }
  v.outcome = Outcome::kFail;
  return v;
}

Verdict GatewayRefused(TaskRecord& t, const json& p, const TargetInfo& info) {
  const ExecAnswer& a = t.task->answer;
  NetEvidence net = ClassifyNetwork(a.stdout_text, a.stderr_text);
  std::string address = p["address"];
  Verdict v;
  v.evidence["network"] = net.ToJson();
  if (info.Has("egress.log")) v.evidence["gateway"] = DecisionsFor(t.gateway, address);
  t.got = net.Summary();
  t.refused = net.wget != WgetOutcome::kOk;
  if (!Ran(a)) {
    t.got = fmt::format("{}, {}", a.status, a.state);
    return {Outcome::kFail, fmt::format("the command did not run: {}", Told(a)), v.evidence};
  }
  if (std::string reached = MirrorReached(t, v); !reached.empty()) {
    return {Outcome::kFail, fmt::format("{} is not to be reached, but {}", address, reached),
            v.evidence};
  }
  if (info.Has("egress.log")) {
    // The gateway's own log may only make the verdict stricter: an `allow` for a denied
    // address fails whatever the command printed.
    for (const auto& d : DecisionsFor(t.gateway, address)) {
      if (d.value("verdict", std::string()) == "allow") {
        return {Outcome::kFail,
                fmt::format("the gateway's log shows an 'allow' for {} ({})", address, d.dump()),
                v.evidence};
      }
    }
  }
  switch (net.wget) {
    case WgetOutcome::kHttp403:
      return {Outcome::kPass, fmt::format("{} met the gateway, which answered 403", address),
              v.evidence};
    case WgetOutcome::kOk:
      v.reason = fmt::format("IP traffic to {} went through: data came back", address);
      break;
    case WgetOutcome::kUnreachable:
    case WgetOutcome::kRefused:
    case WgetOutcome::kTimeout:
      v.reason = fmt::format(
          "{} did not meet the gateway: {} ({}); the command can learn whether the address exists",
          address, net.Summary(), net.wget_line);
      break;
    default:
      v.reason =
          fmt::format("expected 403 from the gateway for {}, got: {}", address, net.Summary());
  }
  v.outcome = Outcome::kFail;
  return v;
}

}  // namespace sandcheck::eval
