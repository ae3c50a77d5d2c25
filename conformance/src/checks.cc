#include "checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <regex>

#include "evidence.h"
#include "json_strict.h"
#include "stats.h"

namespace sandcheck {
namespace {

using nlohmann::json;

struct Verdict {
  Outcome outcome = Outcome::kFail;
  std::string reason;
  json evidence = json::object();
};

Verdict Pass(std::string reason) { return {Outcome::kPass, std::move(reason), json::object()}; }
Verdict Fail(std::string reason) { return {Outcome::kFail, std::move(reason), json::object()}; }

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// "exit 1: wget: bad address 'x'" — the short story of a failed command.
std::string Told(const ExecAnswer& a) {
  std::string last;
  for (const std::string* s : {&a.stderr_text, &a.stdout_text}) {
    std::string t = Trimmed(*s);
    if (t.empty()) continue;
    last = t.substr(t.rfind('\n') == std::string::npos ? 0 : t.rfind('\n') + 1);
    break;
  }
  std::string head = a.status == "ok" ? fmt::format("exit {}", a.exit_code)
                                      : fmt::format("status {}, state {}, exit {}", a.status,
                                                    a.state, a.exit_code);
  return last.empty() ? head : fmt::format("{}: {}", head, last.substr(0, 200));
}

bool Ran(const ExecAnswer& a) { return a.status == "ok" || a.status == "timeout"; }

json DecisionsFor(const json& log, const std::string& needle) {
  json out = json::array();
  if (!log.is_array()) return out;
  for (const auto& d : log) {
    if (d.is_object() && d.value("destination", std::string()).find(needle) != std::string::npos)
      out.push_back(d);
  }
  return out;
}

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
  if (!info.Has("egress.log")) {
    v.evidence["gateway"] = "not offered by the target (feature egress.log)";
    return {
        Outcome::kPass,
        fmt::format("\"{}\" saved and listed, exit 0 (the target offers no gateway log)", content),
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
  v.reason = fmt::format("\"{}\" saved, exit 0, through the gateway ({} allow decision(s) for {})",
                         content, allowed.size(), host);
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

// A number the target reported in the exec answer's usage object (its cgroup's figures), if any.
std::optional<double> UsageOf(const ExecAnswer& a, const char* key) {
  if (!a.extra.contains("usage") || !a.extra["usage"].is_object()) return std::nullopt;
  const json& u = a.extra["usage"];
  if (!u.contains(key) || !u[key].is_number()) return std::nullopt;
  double v = u[key].get<double>();
  if (v < 0) return std::nullopt;
  return v;
}

Verdict CpuThrottled(TaskRecord& t, const json& p, int64_t millicores) {
  const ExecAnswer& a = t.task->answer;
  double min_ratio = p["min_ratio"];
  double max_ratio = p["max_ratio"];
  Verdict v;
  std::vector<double> calib;
  std::optional<double> calib_cpu;  // CPU seconds of the fastest calibration run (usage report)
  double best = 1e300;
  json runs = json::array();
  for (const Step& s : t.calibration) {
    runs.push_back(ExecEvidence(s));
    if (s.answer.status != "ok" || s.answer.exit_code != 0) continue;
    calib.push_back(s.wall_seconds);
    if (s.wall_seconds < best) {
      best = s.wall_seconds;
      calib_cpu = UsageOf(s.answer, "cpu_seconds");
    }
  }
  v.evidence["calibration"] = runs;
  v.evidence["calibration_millicores"] = p["calibration_millicores"];
  v.evidence["requested_millicores"] = millicores;
  auto inside = ParseCpuTool(a.stdout_text);
  if (inside) {
    // Recorded to show what the sandbox believes; never used for the verdict (SCN-5).
    v.evidence["inside_sandbox"] = {{"wall_seconds", inside->wall_seconds},
                                    {"cpu_seconds", inside->cpu_seconds},
                                    {"threads", inside->threads},
                                    {"note", "reported inside; not used for the verdict"}};
  }
  t.refused = false;
  if (a.status != "ok" || a.exit_code != 0) {
    t.got = Told(a);
    t.refused = true;
    return {Outcome::kFail,
            fmt::format("the fixed work did not complete under the limit: {}", Told(a)),
            v.evidence};
  }
  if (calib.empty()) {
    t.got = fmt::format("{:.2f} s of wall time", t.task->wall_seconds);
    return {Outcome::kFail, "the unthrottled calibration run did not complete", v.evidence};
  }
  double base = *std::min_element(calib.begin(), calib.end());
  double wall = t.task->wall_seconds;
  double ratio = base > 0 ? wall / base : 0;
  // With the target's usage report the throttled wall time is also set against the CPU time
  // the work needed unthrottled (host cgroup accounting, never the in-sandbox reading): a busy
  // neighbour slows the unthrottled run's wall clock, not its CPU seconds.
  std::optional<double> vs_cpu;
  if (calib_cpu && *calib_cpu > 0) vs_cpu = wall / *calib_cpu;
  std::optional<double> share, throttled_cpu = UsageOf(a, "cpu_seconds");
  if (throttled_cpu && wall > 0) share = *throttled_cpu / wall;
  v.evidence["throttled_wall_seconds"] = wall;
  v.evidence["unthrottled_wall_seconds"] = base;
  v.evidence["ratio"] = ratio;
  v.evidence["min_ratio"] = min_ratio;
  v.evidence["max_ratio"] = max_ratio;
  if (vs_cpu) {
    v.evidence["unthrottled_cpu_seconds"] = *calib_cpu;
    v.evidence["ratio_vs_cpu"] = *vs_cpu;
  }
  if (share) v.evidence["throttled_host_share"] = *share;
  t.got = fmt::format("{:.2f} s of wall time ({:.1f}x unthrottled)", wall, ratio);
  std::string story = fmt::format(
      "fixed work took {:.3f} s under the limit and {:.3f} s without it: {:.2f}x (harness wall "
      "clock){}",
      wall, base, ratio,
      vs_cpu ? fmt::format(", {:.2f}x the {:.3f} CPU seconds it needed unthrottled (the "
                           "target's usage report)",
                           *vs_cpu, *calib_cpu)
             : "");
  std::vector<std::string> bad;
  // The cap bites: either measure shows the slowdown (the CPU-time one survives a busy host).
  double low = vs_cpu ? std::max(ratio, *vs_cpu) : ratio;
  if (low < min_ratio) bad.push_back(fmt::format("a hard cap needs >= {:.2f}x", min_ratio));
  // ... at the requested quota, not a lower one: the exact measure where there is one.
  double high = vs_cpu ? *vs_cpu : ratio;
  if (max_ratio > 0 && high > max_ratio) {
    bad.push_back(fmt::format(
        "{:.2f}x is more than {:.2f}x: the work was held to less CPU than the {} millicores asked "
        "for (a cap below the requested one)",
        high, max_ratio, millicores));
  }
  // ... and never above it: the capped run's host CPU share (cgroup CPU seconds / wall).
  if (share && millicores > 0) {
    double cap = static_cast<double>(millicores) / 1000.0;
    if (*share > cap * 1.15 + 0.02) {
      bad.push_back(fmt::format(
          "it got {:.2f} of a CPU (the target's usage report) under a {:.2f} CPU cap", *share, cap));
    }
  }
  if (bad.empty()) return {Outcome::kPass, story, v.evidence};
  return {Outcome::kFail, fmt::format("{}; {}", story, Join(bad, "; ")), v.evidence};
}

// "256 MiB" / "1.5 GiB".
std::string Mib(double bytes) {
  double mib = bytes / (1024.0 * 1024.0);
  return mib >= 1024 ? fmt::format("{:.3g} GiB", mib / 1024) : fmt::format("{:.4g} MiB", mib);
}

Verdict ResourceExceeded(TaskRecord& t, const json& p, int64_t limit_bytes) {
  const ExecAnswer& a = t.task->answer;
  Verdict v;
  bool ended = a.status == "resource_exceeded" || a.state == "CRASHED";
  t.refused = a.status != "ok" || a.state != "RUNNING" || a.exit_code != 0;
  t.got = ended ? fmt::format("{}, {}", a.status, a.state) : Told(a);
  if (t.recover) v.evidence["recover"] = ExecEvidence(*t.recover);
  v.evidence["limit_bytes"] = limit_bytes;
  if (!ended) {
    HogProgress hog = ParseHogProgress(a.stdout_text);
    std::string marker = p["survivor_marker"];
    bool ran_on = !marker.empty() && a.stdout_text.find(marker) != std::string::npos;
    std::string why =
        hog.done ? "the allocation completed (no memory limit?)"
                 : fmt::format("the breach was not reported (status must be resource_exceeded or "
                               "state CRASHED){}",
                               ran_on ? ", and the shell ran on after the hog died" : "");
    return {Outcome::kFail,
            fmt::format("{}: status {}, state {}, exit {}{}", why, a.status, a.state, a.exit_code,
                        hog.done || hog.last_mib < 0
                            ? ""
                            : fmt::format(" (the hog's last progress line: {} MiB)", hog.last_mib)),
            v.evidence};
  }
  std::vector<std::string> held, bad;
  held.push_back(fmt::format("ended as {} / {}", a.status, a.state));
  // RES-8: the breach ends the SANDBOX, not one process of it: the shell must not go on.
  std::string marker = p["survivor_marker"];
  if (!marker.empty()) {
    if (a.stdout_text.find(marker) != std::string::npos) {
      bad.push_back(fmt::format(
          "the shell went on after the hog was killed (stdout holds \"{}\"): the sandbox was "
          "not ended, one process was",
          marker));
    } else {
      held.push_back("nothing ran on after the breach");
    }
  }
  // The kill came at the REQUESTED limit, as far as the output and the usage report show.
  if (limit_bytes > 0) {
    const double limit_mib = static_cast<double>(limit_bytes) / (1024.0 * 1024.0);
    HogProgress hog = ParseHogProgress(a.stdout_text);
    v.evidence["hog_last_progress_mib"] = hog.last_mib;
    if (hog.done) {
      bad.push_back("the hog printed that it finished its allocation");
    } else if (hog.last_mib >= 0) {
      double floor = p["progress_floor"].get<double>() * limit_mib;
      if (static_cast<double>(hog.last_mib) >= limit_mib) {
        bad.push_back(fmt::format(
            "the hog got to {} MiB before the kill, past the {} limit asked for (the limit "
            "applied is another one)",
            hog.last_mib, Mib(static_cast<double>(limit_bytes))));
      } else if (static_cast<double>(hog.last_mib) < floor) {
        bad.push_back(fmt::format(
            "the hog was killed after only {} MiB, far below the {} limit asked for (under {:.0f} "
            "MiB: the limit applied is a lower one)",
            hog.last_mib, Mib(static_cast<double>(limit_bytes)), floor));
      } else {
        held.push_back(fmt::format("the hog's last progress line was {} MiB, below the {} limit",
                                   hog.last_mib, Mib(static_cast<double>(limit_bytes))));
      }
    }
    if (auto peak = UsageOf(a, "memory_peak_bytes"); peak && *peak > 0) {
      double slack = p["peak_slack"];
      double lim = static_cast<double>(limit_bytes);
      v.evidence["reported_peak_bytes"] = *peak;
      if (*peak > lim * (1 + slack) || *peak < lim * (1 - 2 * slack)) {
        bad.push_back(fmt::format(
            "the target reports a peak of {} where the limit asked for is {} (the kill did not "
            "come at the requested limit)",
            Mib(*peak), Mib(lim)));
      } else {
        held.push_back(fmt::format("the reported peak {} is the limit", Mib(*peak)));
      }
    }
  }
  std::string want = p["recover_stdout"];
  std::string after = t.revert ? "after the revert" : "without a revert (the target offers none)";
  if (!t.recover) {
    bad.push_back("the recovery command was not run");
  } else {
    const ExecAnswer& r = t.recover->answer;
    if (r.status != "ok" || r.exit_code != 0 || Trimmed(r.stdout_text) != want) {
      bad.push_back(fmt::format("{} '{}' failed: {}", after, t.recover->command, Told(r)));
    } else {
      held.push_back(fmt::format("{} '{}' printed \"{}\"", after, t.recover->command, want));
    }
  }
  // The bracket: just below the limit completes, just above it is ended.
  json bracket = json::array();
  for (const Step& s : t.bracket) {
    bracket.push_back(s.is_exec ? ExecEvidence(s)
                                : json{{"phase", s.phase},
                                       {"wall_seconds", s.wall_seconds},
                                       {"error", s.error}});
    if (!s.is_exec) continue;
    const ExecAnswer& r = s.answer;
    if (s.phase == "bracket-under") {
      std::string done = p["under_stdout"];
      if (r.status != "ok" || r.exit_code != 0 ||
          (!done.empty() && r.stdout_text.find(done) == std::string::npos)) {
        bad.push_back(fmt::format("'{}', below the limit, did not complete ({}): the limit applied "
                                  "is lower than the one asked for",
                                  s.command, Told(r)));
      } else {
        held.push_back(fmt::format("'{}' (below the limit) completed", s.command));
      }
    } else if (s.phase == "bracket-over") {
      if (r.status == "resource_exceeded" || r.state == "CRASHED") {
        held.push_back(fmt::format("'{}' (just above the limit) was ended too", s.command));
      } else {
        bad.push_back(fmt::format("'{}', just above the limit, was not ended ({}): the limit "
                                  "applied is higher than the one asked for",
                                  s.command, Told(r)));
      }
    }
  }
  bool wanted_bracket = !p["under_command"].get<std::string>().empty() ||
                        !p["over_command"].get<std::string>().empty();
  if (wanted_bracket) {
    v.evidence["bracket"] = bracket;
    if (t.bracket.empty() && t.recover && t.recover->answer.status == "ok") {
      bad.push_back(t.revert ? "the allocations below and above the limit were not run"
                             : "the allocations below and above the limit need a revert");
    }
  }
  v.evidence["held"] = held;
  v.evidence["failed"] = bad;
  if (!bad.empty()) return {Outcome::kFail, Join(bad, "; "), v.evidence};
  return {Outcome::kPass, Join(held, "; "), v.evidence};
}

Verdict ExitOk(TaskRecord& t, const json& p) {
  const ExecAnswer& a = t.task->answer;
  std::string want = p["stdout_contains"];
  t.got = Told(a);
  t.refused = a.status != "ok" || a.exit_code != 0;
  if (t.refused) return Fail(fmt::format("expected exit 0: {}", Told(a)));
  if (!want.empty() && a.stdout_text.find(want) == std::string::npos) {
    return Fail(fmt::format("stdout lacks \"{}\"", want));
  }
  return Pass("exit 0");
}

// --- kind `expect` -----------------------------------------------------------------------

// What one expectation object found: the conditions that held and those that did not.
struct Findings {
  std::vector<std::string> held, failed;
};

std::string Quoted(const std::string& s) {
  std::string t = s.size() > 60 ? s.substr(0, 57) + "..." : s;
  return "\"" + t + "\"";
}

// The first line of stdout that parses as a JSON object (sbx-probe and friends print one).
std::optional<json> FirstJsonLine(const std::string& out) {
  size_t pos = 0;
  while (pos < out.size()) {
    size_t nl = out.find('\n', pos);
    std::string line = out.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? out.size() : nl + 1;
    size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] != '{') continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) return j;
  }
  return std::nullopt;
}

bool SameValue(const json& got, const json& want) {
  if (got.is_number() && want.is_number()) return got.get<double>() == want.get<double>();
  return got == want;
}

// Judges an exec answer (and the harness's wall time of the call) against the expectation
// vocabulary shared by the task, its `then` command and each `any_of` alternative.
Findings JudgeAnswer(const ExecAnswer& a, double wall_seconds, const json& e) {
  Findings f;
  auto list = [&](const char* key) { return e[key].get<std::vector<std::string>>(); };
  std::vector<std::string> statuses = list("status");
  if (!statuses.empty()) {
    if (std::find(statuses.begin(), statuses.end(), a.status) == statuses.end()) {
      f.failed.push_back(fmt::format("status {} (expected {}){}", a.status, Join(statuses, " or "),
                                     a.status == "ok" ? "" : fmt::format(", state {}", a.state)));
    } else {
      f.held.push_back("status " + a.status);
    }
  }
  std::string state = e["state"];
  if (!state.empty()) {
    if (a.state != state)
      f.failed.push_back(fmt::format("state {} (expected {})", a.state, state));
    else
      f.held.push_back("state " + state);
  }
  if (e["exit"].is_number_integer()) {
    int want = e["exit"];
    if (a.exit_code != want)
      f.failed.push_back(fmt::format("exit {} (expected {})", a.exit_code, want));
    else
      f.held.push_back(fmt::format("exit {}", want));
  }
  if (e["exit_nonzero"].get<bool>()) {
    if (a.exit_code == 0)
      f.failed.push_back("exit 0 (expected a failure)");
    else
      f.held.push_back(fmt::format("exit {} (non-zero)", a.exit_code));
  }
  for (const auto& x : list("stdout_contains")) {
    if (a.stdout_text.find(x) == std::string::npos)
      f.failed.push_back("stdout lacks " + Quoted(x));
    else
      f.held.push_back("stdout holds " + Quoted(x));
  }
  for (const auto& x : list("stdout_not_contains")) {
    if (a.stdout_text.find(x) != std::string::npos)
      f.failed.push_back("stdout holds " + Quoted(x));
    else
      f.held.push_back("stdout lacks " + Quoted(x));
  }
  for (const auto& x : list("stderr_contains")) {
    if (a.stderr_text.find(x) == std::string::npos)
      f.failed.push_back("stderr lacks " + Quoted(x));
    else
      f.held.push_back("stderr holds " + Quoted(x));
  }
  for (const auto& x : list("output_not_contains")) {
    bool out = a.stdout_text.find(x) != std::string::npos;
    bool err = a.stderr_text.find(x) != std::string::npos;
    if (out || err)
      f.failed.push_back(fmt::format("{} holds {}", out ? "stdout" : "stderr", Quoted(x)));
    else
      f.held.push_back("output lacks " + Quoted(x));
  }
  if (e["stdout_equals"].is_string()) {
    std::string want = e["stdout_equals"];
    if (Trimmed(a.stdout_text) != Trimmed(want))
      f.failed.push_back(
          fmt::format("stdout is {}, expected {}", Quoted(Trimmed(a.stdout_text)), Quoted(want)));
    else
      f.held.push_back("stdout is " + Quoted(want));
  }
  std::string output = a.stdout_text + a.stderr_text;
  auto regex = [&](const char* key, const std::string& text, const char* where, bool want) {
    for (const auto& x : list(key)) {
      bool hit = std::regex_search(text, std::regex(x, std::regex::ECMAScript));
      if (hit != want) {
        f.failed.push_back(
            fmt::format("{} {} /{}/", where, want ? "does not match" : "matches", x));
      } else {
        f.held.push_back(fmt::format("{} {} /{}/", where, want ? "matches" : "does not match", x));
      }
    }
  };
  regex("stdout_matches", a.stdout_text, "stdout", true);
  regex("stdout_not_matches", a.stdout_text, "stdout", false);
  regex("output_matches", output, "output", true);
  regex("output_not_matches", output, "output", false);
  if (!e["json"].empty()) {
    auto doc = FirstJsonLine(a.stdout_text);
    if (!doc) {
      f.failed.push_back("no JSON object on stdout");
    } else {
      for (auto it = e["json"].begin(); it != e["json"].end(); ++it) {
        json::json_pointer ptr(it.key());
        if (!doc->contains(ptr)) {
          f.failed.push_back(fmt::format("{} missing from the JSON on stdout", it.key()));
          continue;
        }
        const json& got = (*doc)[ptr];
        const json& want = it.value();
        if (want.is_object()) {
          bool numeric = got.is_number();
          double v = numeric ? got.get<double>() : 0;
          bool ok = numeric && (!want.contains("min") || v >= want["min"].get<double>()) &&
                    (!want.contains("max") || v <= want["max"].get<double>());
          std::string bounds = fmt::format(
              "{}{}{}", want.contains("min") ? fmt::format(">= {}", want["min"].dump()) : "",
              want.contains("min") && want.contains("max") ? " and " : "",
              want.contains("max") ? fmt::format("<= {}", want["max"].dump()) : "");
          (ok ? f.held : f.failed)
              .push_back(fmt::format("{} is {}{}", it.key(), got.dump(),
                                     ok ? "" : ", expected " + bounds));
        } else if (!SameValue(got, want)) {
          f.failed.push_back(
              fmt::format("{} is {}, expected {}", it.key(), got.dump(), want.dump()));
        } else {
          f.held.push_back(fmt::format("{} is {}", it.key(), got.dump()));
        }
      }
    }
  }
  if (e.contains("figure") && e["figure"].is_object()) {
    // The target's own evidence first (its usage report, read from the cgroup), the command's
    // own count only where the target reports none.
    const json& fig = e["figure"];
    std::string usage = fig["usage"], ptr = fig["json"], what = fig["what"];
    std::string last = fig.value("last_match", "");
    std::optional<double> value;
    std::string source;
    if (!usage.empty() && a.extra.contains("usage") && a.extra["usage"].is_object() &&
        a.extra["usage"].contains(usage) && a.extra["usage"][usage].is_number() &&
        a.extra["usage"][usage].get<double>() >= 0) {
      value = a.extra["usage"][usage].get<double>();
      source = fmt::format("the target's usage report ({})", usage);
    } else if (!ptr.empty()) {
      auto doc = FirstJsonLine(a.stdout_text);
      json::json_pointer jp(ptr);
      if (doc && doc->contains(jp) && (*doc)[jp].is_number()) {
        value = (*doc)[jp].get<double>();
        source = fmt::format("the command's own count ({})", ptr);
      }
    } else if (!last.empty()) {
      // The command's own progress: the number in the LAST line that matches (how far it got
      // before it was stopped).
      std::regex re(last, std::regex::ECMAScript);
      std::optional<double> seen;
      for (auto it = std::sregex_iterator(a.stdout_text.begin(), a.stdout_text.end(), re);
           it != std::sregex_iterator(); ++it) {
        char* end = nullptr;
        std::string g = (*it)[1].str();
        double d = std::strtod(g.c_str(), &end);
        if (!g.empty() && end && *end == '\0') seen = d;
      }
      if (seen) {
        value = seen;
        source = fmt::format("the command's last progress line (/{}/)", last);
      }
    }
    std::string bounds =
        fmt::format("{}{}{}", fig.contains("min") ? fmt::format(">= {}", fig["min"].dump()) : "",
                    fig.contains("min") && fig.contains("max") ? " and " : "",
                    fig.contains("max") ? fmt::format("<= {}", fig["max"].dump()) : "");
    if (!value) {
      f.failed.push_back(fmt::format(
          "no {} to judge: the target reports no usage.{} and stdout holds no {}", what,
          usage.empty() ? "?" : usage,
          !ptr.empty() ? ptr : !last.empty() ? fmt::format("line matching /{}/", last) : "?"));
    } else {
      bool ok = (!fig.contains("min") || *value >= fig["min"].get<double>()) &&
                (!fig.contains("max") || *value <= fig["max"].get<double>());
      (ok ? f.held : f.failed)
          .push_back(fmt::format("{} {:g} from {}{}", what, *value, source,
                                 ok ? "" : ", expected " + bounds));
    }
  }
  double max_s = e["max_seconds"];
  if (max_s > 0) {
    if (wall_seconds > max_s)
      f.failed.push_back(
          fmt::format("took {:.2f} s (harness clock), more than {:g} s", wall_seconds, max_s));
    else
      f.held.push_back(fmt::format("{:.2f} s <= {:g} s", wall_seconds, max_s));
  }
  return f;
}

// The value at a dotted path ("stages.allocate") of the exec answer's extra keys.
const json* AnswerPath(const json& extra, const std::string& path) {
  const json* cur = &extra;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t dot = path.find('.', pos);
    std::string key = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (!cur->is_object() || !cur->contains(key)) return nullptr;
    cur = &(*cur)[key];
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return cur;
}

Verdict Expect(TaskRecord& t, const json& p) {
  Verdict v;
  if (!t.own_request.is_null()) {
    v.evidence["own_sandbox"] = {{"request", t.own_request}, {"id", t.own_sandbox}};
  }
  if (!t.create_refused.empty()) {
    // Only reachable with may_refuse: refusing is one of the allowed answers (e.g. SEL-5: never
    // run it on a weaker backend).
    t.got = "refused to create the sandbox";
    t.refused = true;
    v.evidence["create_refused"] = t.create_refused;
    return {Outcome::kPass, "the target refused to create the sandbox: " + t.create_refused,
            v.evidence};
  }
  const ExecAnswer& a = t.task->answer;
  t.got = Told(a);
  t.refused = a.status != "ok" || a.exit_code != 0;
  Findings f = JudgeAnswer(a, t.task->wall_seconds, p);
  if (!p["any_of"].empty()) {
    json alts = json::array();
    std::vector<std::string> misses;
    bool one = false;
    for (size_t i = 0; i < p["any_of"].size(); ++i) {
      Findings af = JudgeAnswer(a, t.task->wall_seconds, p["any_of"][i]);
      alts.push_back({{"held", af.held}, {"failed", af.failed}});
      if (af.failed.empty()) {
        if (!one) f.held.push_back(fmt::format("alternative {}: {}", i + 1, Join(af.held, ", ")));
        one = true;
      } else {
        misses.push_back(fmt::format("alternative {}: {}", i + 1, Join(af.failed, ", ")));
      }
    }
    v.evidence["any_of"] = alts;
    if (!one) f.failed.push_back("none of the alternatives held (" + Join(misses, "; ") + ")");
  }
  for (const auto& key : p["answer_has"].get<std::vector<std::string>>()) {
    const json* got = AnswerPath(a.extra, key);
    if (!got || got->is_null()) {
      f.failed.push_back(fmt::format("the answer does not report '{}'", key));
    } else if (got->is_number() && got->get<double>() < 0) {
      // -1 is "not measured" (the convention of the answers): present, but no figure.
      f.failed.push_back(
          fmt::format("the answer reports '{}' as {} (not measured)", key, got->dump()));
    } else if (got->is_number() && key.rfind("stages.", 0) == 0 &&
               got->get<double>() > t.task->wall_seconds + 0.1) {
      // A stage of the call cannot take longer than the whole call took by the harness's
      // clock (a figure in milliseconds, or a made-up one, does).
      f.failed.push_back(fmt::format("the answer reports '{}' as {:g} s, longer than the whole "
                                     "call ({:.3f} s by the harness's clock)",
                                     key, got->get<double>(), t.task->wall_seconds));
    }
  }
  // Figures the answer reports that must be at least this much: a stage of a command that
  // sleeps 0.3 s cannot have taken 0 s (a runtime that reports made-up timings fails).
  for (auto it = p["answer_min"].begin(); it != p["answer_min"].end(); ++it) {
    const json* got = AnswerPath(a.extra, it.key());
    double least = it.value().get<double>();
    if (!got || !got->is_number()) {
      f.failed.push_back(fmt::format("the answer reports no number at '{}'", it.key()));
    } else if (got->get<double>() < least) {
      f.failed.push_back(fmt::format("'{}' is {:g}, less than {:g}", it.key(), got->get<double>(),
                                     least));
    } else {
      f.held.push_back(fmt::format("'{}' is {:g} >= {:g}", it.key(), got->get<double>(), least));
    }
  }
  if (!p["answer_has"].empty() && f.failed.empty()) {
    f.held.push_back(fmt::format("the answer reports {}",
                                 Join(p["answer_has"].get<std::vector<std::string>>(), ", ")));
  }
  if (p["then"].is_object()) {
    const json& then = p["then"];
    std::string when = then["after_revert"].get<bool>() ? "after the revert" : "next";
    if (!t.then) {
      f.failed.push_back(fmt::format("the follow-up '{}' ({}) was not run{}",
                                     then["command"].get<std::string>(), when,
                                     t.revert ? "" : ": no revert"));
    } else {
      v.evidence["then"] = ExecEvidence(*t.then);
      Findings tf = JudgeAnswer(t.then->answer, t.then->wall_seconds, then);
      std::string head = fmt::format("{}, '{}'", when, t.then->command);
      if (!tf.failed.empty())
        f.failed.push_back(fmt::format("{}: {}", head, Join(tf.failed, ", ")));
      else
        f.held.push_back(fmt::format("{}: {}", head, Join(tf.held, ", ")));
    }
  }
  if (p["host_absent"].is_object()) {
    v.evidence["host_scans"] = t.host_scans;
    if (t.host_scans.empty()) {
      f.held.push_back(t.host_note.empty() ? "host not scanned" : t.host_note);
      if (!t.host_note.empty()) v.evidence["host_note"] = t.host_note;
    }
    for (const auto& scan : t.host_scans) {
      std::string after = scan["after"] == "destroy" ? "the destroy" : "the task";
      if (scan["found"].empty()) {
        f.held.push_back(fmt::format("no '{}' left on this host after {}",
                                     scan["process"].get<std::string>(), after));
      } else {
        const json& p0 = scan["found"][0];
        f.failed.push_back(fmt::format(
            "still running on this host {:.1f} s after {}: pid {} '{}'{}",
            scan["waited_seconds"].get<double>(), after, p0["pid"].get<long>(),
            p0["cmdline"].get<std::string>().substr(0, 120),
            scan["found"].size() > 1 ? fmt::format(" and {} more", scan["found"].size() - 1) : ""));
      }
    }
  }
  std::vector<std::string> backends = p["backend_in"];
  if (!backends.empty() && f.failed.empty()) {
    const json* b = AnswerPath(a.extra, "backend");
    if (!b || !b->is_string()) {
      v.evidence["held"] = f.held;
      return {Outcome::kSkip,
              fmt::format("{}; but the target does not report which backend ran the command (the "
                          "exec answer has no 'backend'), so the choice cannot be judged",
                          Join(f.held, "; ")),
              v.evidence};
    }
    std::string got = *b;
    if (std::find(backends.begin(), backends.end(), got) == backends.end()) {
      f.failed.push_back(
          fmt::format("it ran on backend '{}' (expected {})", got, Join(backends, " or ")));
    } else {
      f.held.push_back(fmt::format("it ran on backend '{}'", got));
    }
  }
  v.evidence["held"] = f.held;
  v.evidence["failed"] = f.failed;
  if (!f.failed.empty()) return {Outcome::kFail, Join(f.failed, "; "), v.evidence};
  return {Outcome::kPass, Join(f.held, "; "), v.evidence};
}

// SNAP-2, LC-10: what the canaries planted before a task's revert say about it: "" if the
// revert erased everything planted (or nothing was planted, with the reason in `note`), else
// the problem. `e` receives the evidence.
std::string CanaryFindings(const TaskRecord& t, json* e, std::string* note) {
  if (!t.canary_note.empty()) {
    *note = t.canary_note;
    return "";
  }
  if (!t.plant) return "";  // the scenario plants none
  (*e)["plant"] = ExecEvidence(*t.plant);
  const ExecAnswer& pa = t.plant->answer;
  auto planted = ParseCanaryPlant(pa.stdout_text);
  if ((pa.status == "sandbox_unavailable" || pa.state == "CRASHED") &&
      t.spec->check && t.spec->check->kind == "resource_exceeded") {
    // The task's own breach ended the sandbox although its answer did not say so: that answer
    // is the memory check's to judge; there was nothing left to plant canaries in.
    *note = fmt::format("none planted: the sandbox had ended after the task ('{}': {})",
                        t.plant->command, Told(pa));
    return "";
  }
  if (pa.status != "ok" || !planted) {
    return fmt::format(
        "the canaries could not be planted before the revert ('{}': {}){}", t.plant->command,
        Told(pa),
        pa.exit_code == 127 ? "; the target's image needs the fixture tool sbx-canary "
                              "(docs/images.md)"
                            : "");
  }
  (*e)["planted"] = planted->planted;
  (*e)["not_planted"] = planted->not_planted;
  if (planted->planted.empty()) {
    *note = "nothing could be planted (read-only everywhere)";
    return "";
  }
  if (!t.canary_check) return "the canaries were planted but not checked after the revert";
  (*e)["canary_check"] = ExecEvidence(*t.canary_check);
  const ExecAnswer& ca = t.canary_check->answer;
  auto checked = ParseCanaryCheck(ca.stdout_text);
  if (ca.status != "ok" || !checked) {
    return fmt::format("the canary check after the revert failed ({})", Told(ca));
  }
  std::vector<std::string> survived;
  for (const auto& k : checked->survivors) {
    if (std::find(planted->planted.begin(), planted->planted.end(), k) != planted->planted.end())
      survived.push_back(k);
  }
  (*e)["survivors"] = survived;
  if (survived.empty()) return "";
  return fmt::format("{} of {} canaries survived ({})", survived.size(), planted->planted.size(),
                     Join(survived, ", "));
}

Verdict CleanAfterRevert(ScenarioRun& run, const json& p) {
  int64_t want = p["expect_files"];
  Verdict v;
  json per = json::array();
  std::vector<std::pair<std::vector<std::string>, std::string>> bad;  // tasks → finding
  int checked = 0, canaries = 0;
  for (const TaskRecord& t : run.tasks) {
    if (!t.ran || !t.revert) continue;
    ++checked;
    json e = {{"task", t.spec->id},
              {"files_after", t.files_after ? json(*t.files_after) : json(nullptr)}};
    if (t.clean_check) e["clean_check"] = ExecEvidence(*t.clean_check);
    std::vector<std::string> wrong;
    if (!t.files_after) {
      wrong.push_back(fmt::format("the file count failed ({})",
                                  t.clean_check ? Told(t.clean_check->answer) : "not run"));
    } else if (*t.files_after != want) {
      wrong.push_back(
          fmt::format("{} file{} in /work", *t.files_after, *t.files_after == 1 ? "" : "s"));
    }
    std::string note;
    json ce = json::object();
    std::string canary = CanaryFindings(t, &ce, &note);
    if (t.plant || !t.canary_note.empty()) {
      if (!note.empty()) ce["note"] = note;
      e["canaries"] = ce;
      if (t.plant && note.empty()) ++canaries;
    }
    if (!canary.empty()) wrong.push_back(canary);
    per.push_back(e);
    if (!wrong.empty()) {
      // Tasks with the same finding are named together.
      std::string finding = Join(wrong, "; ");
      auto same = std::find_if(bad.begin(), bad.end(),
                               [&](const auto& b) { return b.second == finding; });
      if (same == bad.end())
        bad.push_back({{t.spec->id}, finding});
      else
        same->first.push_back(t.spec->id);
    }
  }
  v.evidence["after_each_task"] = per;
  if (checked == 0) return {Outcome::kSkip, "no task ran with a revert", v.evidence};
  if (!bad.empty()) {
    std::vector<std::string> parts;
    for (const auto& [tasks, finding] : bad) {
      parts.push_back(fmt::format("after '{}': {}", Join(tasks, "', '"), finding));
    }
    return {Outcome::kFail, fmt::format("not clean after revert: {}", Join(parts, "; ")),
            v.evidence};
  }
  return {Outcome::kPass,
          fmt::format("{} files in /work after each of {} reverts{}", want, checked,
                      canaries ? fmt::format("; every canary planted before {} of them (hidden "
                                             "files, /tmp, $HOME, outside /work, a process, a "
                                             "listening socket) was gone after",
                                             canaries)
                               : ""),
          v.evidence};
}

Verdict RevertMeasured(ScenarioRun& run) {
  std::vector<double> reported, wall, first;
  int reverts = 0;
  for (const TaskRecord& t : run.tasks) {
    if (!t.revert) continue;
    ++reverts;
    wall.push_back(t.revert->wall_seconds);
    if (t.revert->op.seconds >= 0) reported.push_back(t.revert->op.seconds);
    if (t.clean_check) first.push_back(t.clean_check->wall_seconds);
  }
  Verdict v;
  v.evidence["revert_wall_seconds"] = StatsJson(wall);
  v.evidence["revert_reported_seconds"] = StatsJson(reported);
  v.evidence["first_request_after_revert_seconds"] = StatsJson(first);
  if (reverts == 0) return {Outcome::kSkip, "no revert ran", v.evidence};
  if (static_cast<int>(reported.size()) != reverts) {
    return {Outcome::kFail,
            fmt::format("the target reported its own time for {} of {} reverts", reported.size(),
                        reverts),
            v.evidence};
  }
  Stats w = ComputeStats(wall);
  return {Outcome::kPass,
          fmt::format(
              "{} reverts: p50 {:.4f} s, max {:.4f} s (harness); first request after: p50 {:.4f} s",
              reverts, w.p50, w.max, ComputeStats(first).p50),
          v.evidence};
}

// A limit of the create request of the sandbox the task ran in (its own, or the scenario's).
int64_t RequestedLimit(const ScenarioRun& run, const TaskRecord& t, const char* key) {
  const json& req = t.own_request.is_null() ? run.create_request : t.own_request;
  if (!req.is_object() || !req.contains("limits") || !req["limits"].is_object()) return 0;
  const json& l = req["limits"];
  return l.contains(key) && l[key].is_number_integer() ? l[key].get<int64_t>() : 0;
}

const CheckResult* FindResult(const std::vector<CheckResult>& results, const std::string& id) {
  for (const auto& r : results) {
    if (r.spec->id == id) return &r;
  }
  return nullptr;
}

}  // namespace

json ExecEvidence(const Step& s) {
  json e = {{"phase", s.phase},
            {"command", s.command},
            {"status", s.answer.status},
            {"state", s.answer.state},
            {"exit", s.answer.exit_code},
            {"stdout_tail", TailOf(s.answer.stdout_text, 2000)},
            {"stderr_tail", TailOf(s.answer.stderr_text, 1000)},
            {"reported_seconds", s.answer.seconds},
            {"wall_seconds", s.wall_seconds}};
  if (s.answer.http_status) e["http_status"] = s.answer.http_status;
  return e;
}

void JudgeScenario(ScenarioRun& run, const TargetInfo& info) {
  run.checks.clear();
  for (const CheckSpec* c : run.scenario->AllChecks()) {
    CheckResult r;
    r.spec = c;
    TaskRecord* task = nullptr;
    for (auto& t : run.tasks) {
      if (t.spec->id == c->task_id) task = &t;
    }
    Verdict v;
    std::vector<std::string> missing;
    for (const auto& f : c->features) {
      if (!info.Has(f)) missing.push_back(f);
    }
    if (!run.fatal_error.empty()) {
      v = {Outcome::kError, "not run: " + run.fatal_error, json::object()};
    } else if (!run.skip_reason.empty()) {
      v = {Outcome::kSkip, run.skip_reason, json::object()};
    } else if (!missing.empty()) {
      v = {Outcome::kSkip,
           fmt::format("the target does not offer feature{} {} (its info lists: {})",
                       missing.size() > 1 ? "s" : "", Join(missing, ", "),
                       info.features.empty() ? "none" : Join(info.features, ", ")),
           json::object()};
    } else if (task && !task->create_refused.empty()) {
      json p = c->params;
      SubstituteHarness(p, run.harness);
      v = Expect(*task, p);
    } else if (task && task->task && !task->task->error.empty()) {
      v = {Outcome::kError, "not judged: the target failed: " + task->task->error, json::object()};
    } else if (task && (!task->ran || !task->task)) {
      v = {run.abort_error.empty() ? Outcome::kSkip : Outcome::kError,
           run.abort_error.empty() ? task->skip_reason : "not judged: " + run.abort_error,
           json::object()};
    } else if (!task && !run.abort_error.empty()) {
      v = {Outcome::kError, "not judged: " + run.abort_error, json::object()};
    } else {
      json p = c->params;
      SubstituteHarness(p, run.harness);
      if (c->kind == "allowed_download")
        v = AllowedDownload(*task, p, info);
      else if (c->kind == "name_not_resolved")
        v = NameNotResolved(*task, p);
      else if (c->kind == "gateway_refused")
        v = GatewayRefused(*task, p, info);
      else if (c->kind == "cpu_throttled")
        v = CpuThrottled(*task, p, RequestedLimit(run, *task, "cpu_millicores"));
      else if (c->kind == "resource_exceeded")
        v = ResourceExceeded(*task, p,
                             p["limit_bytes"].get<int64_t>() > 0
                                 ? p["limit_bytes"].get<int64_t>()
                                 : RequestedLimit(run, *task, "memory_bytes"));
      else if (c->kind == "exit_ok")
        v = ExitOk(*task, p);
      else if (c->kind == "expect")
        v = Expect(*task, p);
      else if (c->kind == "clean_after_revert")
        v = CleanAfterRevert(run, p);
      else if (c->kind == "revert_measured")
        v = RevertMeasured(run);
      else
        v = {Outcome::kError, "no evaluator for kind " + c->kind, json::object()};
      if (task) {
        json ev = ExecEvidence(*task->task);
        ev.update(v.evidence);
        v.evidence = ev;
        r.seconds = task->task->wall_seconds;
      }
    }
    // Counts only if the checks it builds on passed in this run.
    if (v.outcome == Outcome::kPass || v.outcome == Outcome::kFail) {
      for (const auto& dep_id : c->requires_pass) {
        const CheckResult* dep = FindResult(run.checks, dep_id);
        if (!dep || dep->raw == Outcome::kPass) continue;
        std::string own = v.reason;
        if (dep->raw == Outcome::kSkip || dep->raw == Outcome::kError) {
          v.outcome = dep->raw;
          v.reason = fmt::format("depends on {}, which did not run: {}", dep_id, dep->reason);
        } else {
          bool download_failed =
              dep->spec->kind == "allowed_download" && !dep->evidence.value("downloaded", false);
          v.outcome = Outcome::kFail;
          v.reason =
              download_failed
                  ? fmt::format("no egress at all: allowed download failed (own evidence: {})", own)
                  : fmt::format(
                        "counts only if {} passed in this run; it failed: {} (own "
                        "evidence: {})",
                        dep_id, dep->reason, own);
        }
        break;
      }
    }
    if (task && !task->ran) task->got = v.outcome == Outcome::kSkip ? "skipped" : "not run";
    r.raw = v.outcome;
    r.outcome = v.outcome;
    r.reason = v.reason;
    r.evidence = v.evidence;
    run.checks.push_back(std::move(r));
  }
}

}  // namespace sandcheck
