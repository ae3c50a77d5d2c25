// Over 600 lines: the whole expectation vocabulary of scenarios.md, one judge per word, in one
// place so that a word means one thing everywhere.
// Kind `expect`: an exec answer judged against the expectation vocabulary of scenarios.md.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <regex>
#include <sstream>

#include "checks/checks.h"
#include "checks/evidence.h"
#include "checks/kernel_evidence.h"
#include "checks/verdict.h"
#include "common/json_strict.h"
#include "common/stats.h"

namespace sandcheck::eval {

using nlohmann::json;

namespace {

// What one expectation object found: the conditions that held and those that did not.
struct Findings {
  std::vector<std::string> held, failed;
};

// The number at JSON pointer `ptr` in the first stdout line that is a JSON object, if any.
std::optional<double> JsonNumberAt(const std::string& text, const std::string& ptr) {
  auto doc = FirstJsonLine(text);
  json::json_pointer jp(ptr);
  if (!doc || !doc->contains(jp) || !(*doc)[jp].is_number()) return std::nullopt;
  return (*doc)[jp].get<double>();
}

// For a missing `"survivors":[]`: " (survivors: A, B)", the canaries an sbx-canary check line
// of `out` names, so that the reason says what survived and not only that something did.
std::string NamedSurvivors(const std::string& wanted, const std::string& out) {
  if (wanted.find("survivors") == std::string::npos) return "";
  std::vector<std::string> names;
  size_t pos = 0;
  while (pos < out.size()) {
    size_t nl = out.find('\n', pos);
    std::string line = out.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? out.size() : nl + 1;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("survivors") || !j["survivors"].is_array()) continue;
    for (const auto& n : j["survivors"]) {
      if (n.is_string()) names.push_back(n.get<std::string>());
    }
  }
  if (names.empty()) return "";
  return " (survivors: " + Join(names, ", ") + ")";
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
      f.failed.push_back("stdout lacks " + Quoted(x) + NamedSurvivors(x, a.stdout_text));
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
    // The harness's evidence decides: the command's own count (a JSON figure or its last
    // progress line). The target's usage report (its cgroup's figure) may only make the verdict
    // stricter, never pass one the command's count fails (issue 32, RES-4): a peak is judged
    // against the upper bound as max(reported, measured); the lower bound is the measured
    // figure's alone (a higher reported peak must not lift a count that stayed low). Only a
    // figure that names no command count is judged on the report alone.
    const json& fig = e["figure"];
    std::string usage = fig["usage"], ptr = fig["json"], what = fig["what"];
    std::string last = fig.value("last_match", "");
    std::optional<double> measured, reported;
    std::string source;
    if (!usage.empty() && a.extra.contains("usage") && a.extra["usage"].is_object() &&
        a.extra["usage"].contains(usage) && a.extra["usage"][usage].is_number() &&
        a.extra["usage"][usage].get<double>() >= 0) {
      reported = a.extra["usage"][usage].get<double>();
    }
    if (!ptr.empty()) {
      measured = JsonNumberAt(a.stdout_text, ptr);
      if (measured) source = fmt::format("the command's own count ({})", ptr);
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
        measured = seen;
        source = fmt::format("the command's last progress line (/{}/)", last);
      }
    }
    const bool counts = !ptr.empty() || !last.empty();
    std::string bounds =
        fmt::format("{}{}{}", fig.contains("min") ? fmt::format(">= {}", fig["min"].dump()) : "",
                    fig.contains("min") && fig.contains("max") ? " and " : "",
                    fig.contains("max") ? fmt::format("<= {}", fig["max"].dump()) : "");
    if (counts && !measured) {
      f.failed.push_back(fmt::format(
          "no {} to judge: stdout holds no {}{}", what,
          !ptr.empty() ? ptr : fmt::format("line matching /{}/", last),
          reported ? fmt::format(" (the target's usage.{} of {:g} alone cannot pass it)", usage,
                                 *reported)
                   : ""));
    } else if (!counts && !reported) {
      f.failed.push_back(fmt::format("no {} to judge: the target reports no usage.{}", what,
                                     usage.empty() ? "?" : usage));
    } else {
      // Lower bound: the command's count (the report where the figure names no count).
      // Upper bound: the larger of the two.
      double low = counts ? *measured : *reported;
      double high = reported ? std::max(low, *reported) : low;
      std::vector<std::string> off;
      if (fig.contains("min") && low < fig["min"].get<double>())
        off.push_back(fmt::format("expected >= {}", fig["min"].dump()));
      if (fig.contains("max") && high > fig["max"].get<double>()) {
        off.push_back(fmt::format(
            "expected <= {}{}", fig["max"].dump(),
            reported && *reported > low && counts
                ? fmt::format(" (the target's usage.{} of {:g} is the larger)", usage, *reported)
                : ""));
      }
      std::string what_got =
          counts ? fmt::format("{} {:g} from {}{}", what, low, source,
                               reported ? fmt::format(", the target's usage.{}: {:g}", usage,
                                                      *reported)
                                        : "")
                 : fmt::format("{} {:g} from the target's usage report ({})", what, low, usage);
      (off.empty() ? f.held : f.failed)
          .push_back(off.empty() ? what_got : fmt::format("{}, {}", what_got, Join(off, ", ")));
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

// EGR-1 from what the harness itself recorded, never from what the command printed: nothing may
// have reached the egress sink (sink_untouched) or the mirror (mirror_untouched, or a request for
// one of mirror_not_for) while the task ran. The probe's own report only shows that it tried
// every way out it was given.
void JudgeEgressEvidence(const TaskRecord& t, const json& p, Findings& f, Verdict& v) {
  if (p["sink_untouched"].is_object()) {
    std::vector<std::string> targets;
    std::istringstream in(p["sink_untouched"]["probe_args"].get<std::string>());
    for (std::string word; in >> word;) {
      if (word != "--connect") targets.push_back(word);
    }
    if (!t.sink_log) {
      f.failed.push_back("the run has no egress sink to judge by (cannot judge; never a pass)");
    } else if (!t.sink_log->empty()) {
      v.evidence["sink_log"] = *t.sink_log;
      f.failed.push_back(fmt::format(
          "the harness's sink recorded '{}'{} while the task ran: traffic that is not HTTP to a "
          "listed host got out of the sandbox",
          t.sink_log->front(),
          t.sink_log->size() > 1 ? fmt::format(" and {} more", t.sink_log->size() - 1) : ""));
    } else {
      auto doc = FirstJsonLine(t.task->answer.stdout_text);
      const json* tried = doc && doc->contains("connect") && (*doc)["connect"].is_object()
                              ? &(*doc)["connect"]
                              : nullptr;
      std::vector<std::string> untried;
      for (const auto& target : targets) {
        if (!tried || !tried->contains(target)) untried.push_back(target);
      }
      if (tried) v.evidence["probe_connect"] = *tried;
      if (targets.empty() || !untried.empty()) {
        f.failed.push_back(fmt::format(
            "the probe's report shows no attempt at {} (sbx-probe --connect prints one result "
            "per target): nothing shows the ways out were tried",
            targets.empty() ? "any target" : Join(untried, ", ")));
      } else {
        f.held.push_back(fmt::format(
            "none of {} attempts (tcp, udp, tls, an explicit resolver, IPv6 where the host has "
            "it) reached the harness's sink",
            targets.size()));
      }
    }
  }
  if (p["sink_reached"].is_object() || p["sink_silent"].is_object()) {
    const bool want = p["sink_reached"].is_object();
    if (!t.sink_log) {
      f.failed.push_back("the run has no sink to judge by (cannot judge; never a pass)");
    } else {
      v.evidence["sink_log"] = *t.sink_log;
      if (want && t.sink_log->empty()) {
        f.failed.push_back(
            "the harness's sink, the service behind the name, recorded no connection while the "
            "task ran: the allowed connection did not get through");
      } else if (want) {
        f.held.push_back(fmt::format("the harness's sink recorded '{}'", t.sink_log->front()));
      } else if (!t.sink_log->empty()) {
        f.failed.push_back(fmt::format(
            "the harness's sink, the service behind the name, recorded '{}' while the task ran: "
            "a connection that must be denied got through",
            t.sink_log->front()));
      } else {
        f.held.push_back("the harness's sink recorded nothing");
      }
    }
  }
  auto not_for = p["mirror_not_for"].get<std::vector<std::string>>();
  for (auto& n : not_for) {
    std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  }
  if (p["mirror_untouched"].get<bool>() || !not_for.empty()) {
    if (!t.mirror_log) {
      v.evidence["mirror_log"] = "none (no local mirror fixture): judged by the output only";
      return;
    }
    v.evidence["mirror_log"] = *t.mirror_log;
    std::vector<std::string> hit;
    for (const auto& line : *t.mirror_log) {
      std::string host = MirrorLogHost(line);
      bool named = std::find(not_for.begin(), not_for.end(), host) != not_for.end();
      if (p["mirror_untouched"].get<bool>() || named) hit.push_back(line);
    }
    if (!hit.empty()) {
      f.failed.push_back(fmt::format(
          "the harness's mirror logged '{}'{} while the task ran: the request got through to a "
          "service it must not reach",
          hit.front(), hit.size() > 1 ? fmt::format(" and {} more", hit.size() - 1) : ""));
    } else {
      f.held.push_back(p["mirror_untouched"].get<bool>()
                           ? "the harness's mirror logged nothing"
                           : fmt::format("the harness's mirror logged no request for {}",
                                         Join(not_for, ", ")));
    }
  }
}

}  // namespace

// What the stages of one call may add up to (and one stage may take), against the call's
// harness-timed wall seconds: all of it, plus 5 % and 20 ms for the two clocks (the target's
// and the harness's) and their granularity. Stated in docs/sandcheck.md.
double StageBudget(double call_wall_seconds) { return call_wall_seconds * 1.05 + 0.02; }

// SNAP-3 from a heartbeat, judged by the harness's clock (TaskSpec::suspend): the command left a
// process counting beats. The follow-up's command runs twice: as a control before the suspend
// and as the follow-up after the resume; each prints the count it read first (`beats`) and the
// beats of the second after it (`per_second`). Between the end of the control and the start of
// the follow-up (W seconds) the sandbox was held suspended for F of them (from the end of the
// suspend call to the start of the resume): the beats gained may be what the awake W - F seconds
// allow, with a margin (x1.5, +0.5 s, +2 beats), never what all W allow. A count that went back,
// or a heartbeat that stopped, is a sandbox that was restarted rather than resumed. A heartbeat
// that did not beat in the control is a runtime that ends background processes with their
// command: a suspend cannot be seen from inside it (a skip, with the reason; never a pass).
// Returns the skip's reason, or "" when judged (into f).
std::string JudgeSuspended(const TaskRecord& t, const json& p, Findings& f, Verdict& v) {
  if (!p["suspended"].is_object()) return "";
  if (!t.suspend_control || !t.suspend || !t.resume || !t.then) {
    f.failed.push_back("the sandbox was not suspended, resumed and looked at (cannot judge)");
    return "";
  }
  const std::string beats_ptr = p["suspended"]["beats"], rate_ptr = p["suspended"]["per_second"];
  const std::string& control_out = t.suspend_control->answer.stdout_text;
  auto control_beats = JsonNumberAt(control_out, beats_ptr);
  auto control_rate = JsonNumberAt(control_out, rate_ptr);
  auto after = JsonNumberAt(t.then->answer.stdout_text, beats_ptr);
  auto rate = JsonNumberAt(t.then->answer.stdout_text, rate_ptr);
  if (!control_beats || !control_rate || !after || !rate) {
    f.failed.push_back(fmt::format(
        "no heartbeat figures ({} and {} in the JSON of the control and of the follow-up): "
        "cannot judge, never a pass",
        beats_ptr, rate_ptr));
    return "";
  }
  if (*control_rate < 1) {
    v.evidence["suspended"] = {{"control_beats_per_second", *control_rate}};
    return "the heartbeat the command left did not beat in the second after it, before any "
           "suspend: this target ends a command's background processes with the command, so "
           "what a suspend does cannot be seen from inside its sandbox";
  }
  const double before = *control_beats + *control_rate;  // its last reading
  const double control_end = t.suspend_control->started_unix + t.suspend_control->wall_seconds;
  const double wall = t.then->started_unix - control_end;
  const double frozen =
      t.resume->started_unix - (t.suspend->started_unix + t.suspend->wall_seconds);
  const double gained = *after - before;
  const double allowed = 1.5 * *rate * (std::max(0.0, wall - frozen) + 0.5) + 2;
  v.evidence["suspended"] = {{"beats_before", before},           {"beats_after", *after},
                             {"beats_per_second", *rate},        {"harness_seconds", wall},
                             {"held_suspended_seconds", frozen}, {"beats_allowed", allowed}};
  if (*rate < 1) {
    f.failed.push_back(fmt::format(
        "after the resume the heartbeat no longer beats ({:g} in a second; {:g} before the "
        "suspend): the sandbox's processes did not come back",
        *rate, *control_rate));
  } else if (gained < 0) {
    f.failed.push_back(fmt::format(
        "the heartbeat's count went back from {:g} to {:g}: the sandbox was restarted, not "
        "resumed",
        before, *after));
  } else if (gained > allowed) {
    f.failed.push_back(fmt::format(
        "the heartbeat kept beating while suspended: {:g} beats in {:.2f} s, of which {:.2f} s "
        "held suspended; at {:g} beats/s the {:.2f} s awake allow at most {:.0f}",
        gained, wall, frozen, *rate, std::max(0.0, wall - frozen), allowed));
  } else {
    f.held.push_back(fmt::format(
        "suspended for {:.2f} s of {:.2f} s: the heartbeat gained {:g} beats (at {:g} beats/s "
        "the awake part allows {:.0f}, all of it {:.0f}) and beats again after the resume",
        frozen, wall, gained, *rate, allowed, *rate * wall));
  }
  return "";
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
    // The refusal SEL-5 allows is the API's sandbox_unavailable ("no backend can provide it"),
    // not any failure: a create that fails for another reason (a credential the front does not
    // pass on, a crash) is no proof that the sandbox would not have run on a weaker backend.
    if (t.create_refused.find("sandbox_unavailable") == std::string::npos) {
      return {Outcome::kFail,
              "the target failed to create the sandbox, and not as sandbox_unavailable (the "
              "refusal the requirement allows): " +
                  t.create_refused.substr(0, 300),
              v.evidence};
    }
    return {Outcome::kPass, "the target refused to create the sandbox: " + t.create_refused,
            v.evidence};
  }
  if (p["must_refuse"].get<bool>()) {
    // SEL-5, FAIL-1: a request no worker of the target can provision. The create made a sandbox,
    // so the refusal may only come as its first command's sandbox_unavailable, with nothing run.
    const ExecAnswer& a = t.task->answer;
    t.got = Told(a);
    t.refused = a.status == "sandbox_unavailable";
    std::string asked = t.own_request.value("backend", std::string("?"));
    if (a.status == "sandbox_unavailable" && a.stdout_text.empty()) {
      return {Outcome::kPass,
              fmt::format("the target made a sandbox for backend '{}', which it does not offer, "
                          "and refused its first command as sandbox_unavailable, running nothing",
                          asked),
              v.evidence};
    }
    std::string ran_on =
        a.extra.contains("backend") && a.extra["backend"].is_string()
            ? fmt::format(" (its answer names backend '{}')", a.extra["backend"].get<std::string>())
            : "";
    return {Outcome::kFail,
            fmt::format("the target does not offer backend '{}', yet it made the sandbox and "
                        "answered its command with status {}, exit {}{}: a request no worker can "
                        "provision must end as sandbox_unavailable, never run elsewhere; stdout "
                        "{}",
                        asked, a.status, a.exit_code, ran_on, Quoted(a.stdout_text.substr(0, 200))),
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
               got->get<double>() > StageBudget(t.task->wall_seconds)) {
      // A stage of the call cannot take longer than the whole call took by the harness's
      // clock (a figure in milliseconds, or a made-up one, does).
      f.failed.push_back(
          fmt::format("the answer reports '{}' as {:g} s, longer than the whole "
                      "call ({:.3f} s by the harness's clock)",
                      key, got->get<double>(), t.task->wall_seconds));
    }
  }
  // LC-1: the stages are parts of the call, one after the other: together they cannot take
  // longer than the whole call by the harness's clock (within StageBudget's margin for two
  // clocks). Stages padded, or timed from the start of the call, add up to more (issue 32).
  const auto has_keys = p["answer_has"].get<std::vector<std::string>>();
  if (std::any_of(has_keys.begin(), has_keys.end(),
                  [](const std::string& k) { return k.rfind("stages.", 0) == 0; }) &&
      a.extra.contains("stages") && a.extra["stages"].is_object()) {
    double sum = 0;
    int n = 0;
    for (const auto& [k, st] : a.extra["stages"].items()) {
      if (st.is_number() && st.get<double>() >= 0) {
        sum += st.get<double>();
        ++n;
      }
    }
    const double budget = StageBudget(t.task->wall_seconds);
    v.evidence["stages_sum_seconds"] = sum;
    v.evidence["stages_budget_seconds"] = budget;
    if (sum > budget) {
      f.failed.push_back(fmt::format(
          "the {} stages the answer reports add up to {:.3f} s, more than the whole call took "
          "({:.3f} s by the harness's clock; allowed: {:.3f} s)",
          n, sum, t.task->wall_seconds, budget));
    } else if (n > 0) {
      f.held.push_back(fmt::format("the {} stages add up to {:.3f} s, within the call's {:.3f} s",
                                   n, sum, t.task->wall_seconds));
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
      f.failed.push_back(
          fmt::format("'{}' is {:g}, less than {:g}", it.key(), got->get<double>(), least));
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
  std::string cannot_judge;  // the evidence shows nothing either way: a skip, never a pass
  if (p["host_absent"].is_object()) {
    v.evidence["host_scans"] = t.host_scans;
    if (t.host_scans.empty()) {
      f.held.push_back(t.host_note.empty() ? "host not scanned" : t.host_note);
      if (!t.host_note.empty()) v.evidence["host_note"] = t.host_note;
    }
    for (const auto& scan : t.host_scans) {
      if (scan["after"] == "before-destroy") {
        // The control: seen on this host while the sandbox lived, or the scan after the
        // destroy cannot tell an ended process from one the host never showed.
        if (scan["found"].empty()) {
          cannot_judge = fmt::format(
              "'{}' was not seen on this host even before the destroy: the sandbox's processes "
              "are not the host's (a guest's, gVisor's) or its background processes end with "
              "their command, so that none is seen after the destroy proves nothing",
              scan["process"].get<std::string>());
        } else {
          f.held.push_back(fmt::format("'{}' seen on this host before the destroy (pid {})",
                                       scan["process"].get<std::string>(),
                                       scan["found"][0]["pid"].get<long>()));
        }
        continue;
      }
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
  if (p["beacon"].is_object()) {
    // LC-7 judged by the mirror's own log, wherever the sandbox runs (a guest, gVisor, a remote
    // worker): the beacon's beats must stop when the destroy answers.
    const json& b = t.beacon;
    v.evidence["beacon"] = b;
    if (b.contains("note")) {
      cannot_judge = b["note"].get<std::string>();
    } else if (!b.contains("before")) {
      f.failed.push_back("the beacon was not counted (cannot judge; never a pass)");
    } else if (b["before"].get<int>() < 2) {
      cannot_judge = fmt::format(
          "the beacon's beats ({}) did not reach the mirror twice while the sandbox lived: its "
          "background processes end with their command, or its egress does not reach the "
          "mirror, so that none came after the destroy proves nothing",
          b["path"].get<std::string>());
    } else if (!b.contains("after")) {
      f.failed.push_back("the beacon was not listened for after the destroy (cannot judge)");
    } else if (b["after"].get<int>() >= 2) {
      f.failed.push_back(fmt::format(
          "{} beats of the beacon ({}) reached the mirror in the {:.1f} s after the destroy "
          "answered: a process of the destroyed sandbox lives on (the mirror's own log)",
          b["after"].get<int>(), b["path"].get<std::string>(), b["wait_s"].get<double>()));
    } else {
      f.held.push_back(fmt::format(
          "the beacon reached the mirror {} times while the sandbox lived and {} in the {:.1f} s "
          "after the destroy",
          b["before"].get<int>(), b["after"].get<int>(), b["wait_s"].get<double>()));
    }
  }
  // The kernel and the namespaces the sandbox really has, from the probe's facts against the
  // harness's host (checks/kernel_evidence.h): never from what the target says it ran.
  std::optional<KernelFinding> kernel_seen;
  if (p["kernel"].is_object() || p["namespaces_apart"].is_object()) {
    auto doc = FirstJsonLine(a.stdout_text);
    const json& kp = p["kernel"].is_object() ? p["kernel"] : p["namespaces_apart"];
    json host = json::parse(kp[p["kernel"].is_object() ? "host" : "kernel"].get<std::string>(),
                            nullptr, false);
    if (!doc || !doc->contains("kernel_id")) {
      f.failed.push_back(
          "no evidence of the sandbox's kernel: stdout holds no sbx-probe JSON with kernel_id "
          "(cannot judge; never a pass)");
    } else if (host.is_discarded()) {
      f.failed.push_back("the harness has no reading of its own host's kernel to compare with");
    } else {
      kernel_seen = JudgeKernel((*doc)["kernel_id"], host);
      v.evidence["kernel"] = {{"sandbox", (*doc)["kernel_id"]}, {"host", host},
                              {"finding", kernel_seen->evidence}};
    }
  }
  if (p["kernel"].is_object() && kernel_seen) {
    const std::string want = p["kernel"]["want"];
    const KernelSeen want_seen = want == "own" ? KernelSeen::kOwn : KernelSeen::kHost;
    if (kernel_seen->seen == want_seen) {
      f.held.push_back(want == "own" ? "not the host's kernel: " + kernel_seen->evidence
                                     : "the host's kernel: " + kernel_seen->evidence);
    } else if (kernel_seen->seen == KernelSeen::kUnknown) {
      f.failed.push_back("cannot tell the sandbox's kernel (never a pass): " +
                         kernel_seen->evidence);
    } else {
      f.failed.push_back(want == "own"
                             ? "it runs on the host's own kernel, not a kernel of its own: " +
                                   kernel_seen->evidence
                             : "it does not run on the host's kernel: " + kernel_seen->evidence);
    }
  }
  if (p["namespaces_apart"].is_object() && kernel_seen) {
    const json& np = p["namespaces_apart"];
    if (kernel_seen->seen == KernelSeen::kOwn) {
      f.held.push_back("namespaces of another kernel (" + kernel_seen->evidence +
                       "): none can be the harness's");
    } else {
      auto doc = FirstJsonLine(a.stdout_text);
      json harness = json::parse(np["host"].get<std::string>(), nullptr, false);
      NamespaceFinding nf = JudgeNamespaces(doc->value("namespaces", json::object()), harness,
                                            np["names"].get<std::vector<std::string>>());
      v.evidence["namespaces"] = {{"sandbox", doc->value("namespaces", json::object())},
                                  {"harness", harness}};
      if (!nf.shared.empty()) {
        f.failed.push_back(fmt::format(
            "it shares the harness's {} namespace{} (the same inode in /proc/self/ns)",
            Join(nf.shared, ", "), nf.shared.size() > 1 ? "s" : ""));
      }
      if (!nf.not_shown.empty()) {
        f.failed.push_back(fmt::format(
            "it shows no /proc/self/ns/{} on the host's kernel: cannot judge (never a pass)",
            Join(nf.not_shown, ", /proc/self/ns/")));
      }
      if (nf.shared.empty() && nf.not_shown.empty()) {
        f.held.push_back(fmt::format("its own {} namespaces (inodes differ from the harness's)",
                                     Join(nf.apart, ", ")));
      }
    }
  }
  JudgeEgressEvidence(t, p, f, v);
  if (std::string why = JudgeSuspended(t, p, f, v); !why.empty() && f.failed.empty()) {
    v.evidence["held"] = f.held;
    return {Outcome::kSkip, why, v.evidence};
  }
  if (t.spec->neighbour) {
    // The neighbour must really have held its load, or nothing was shown about a limit per
    // sandbox (a runtime that failed the neighbour would pass by default).
    const auto& nb = *t.spec->neighbour;
    const Step* n = t.neighbour ? &*t.neighbour : nullptr;
    if (n) v.evidence["neighbour"] = ExecEvidence(*n);
    std::string why;
    if (!n) {
      why = t.neighbour_create && !t.neighbour_create->error.empty()
                ? "its sandbox was not made: " + t.neighbour_create->error
                : "it did not run";
    } else if (!n->error.empty()) {
      why = n->error;
    } else if (n->answer.status != "ok" || n->answer.exit_code != 0) {
      why = fmt::format("status {}, exit {}", n->answer.status, n->answer.exit_code);
    } else if (n->answer.stdout_text.find(nb.stdout_contains) == std::string::npos) {
      why = fmt::format("its stdout lacks \"{}\"", nb.stdout_contains);
    }
    // The command as it ran (harness values substituted), else as the scenario wrote it.
    const std::string& shown = n && !n->command.empty() ? n->command : nb.command;
    if (!why.empty()) {
      f.failed.push_back(fmt::format(
          "the neighbour sandbox did not hold its load ('{}': {}): nothing was shown beside it "
          "(cannot judge; never a pass)",
          shown, why));
    } else {
      f.held.push_back(fmt::format(
          "beside a neighbour sandbox that held its load ('{}'{})", shown,
          nb.stdout_contains.empty() ? "" : fmt::format(": \"{}\"", nb.stdout_contains)));
    }
  }
  std::vector<std::string> backends = p["backend_in"];
  if (!backends.empty() && f.failed.empty()) {
    const json* b = AnswerPath(a.extra, "backend");
    if ((!b || !b->is_string()) && kernel_seen) {
      // The kernel evidence above judged it; the target's word would only have made it stricter.
      f.held.push_back("(the target does not say which backend ran it: judged by the evidence)");
    } else if (!b || !b->is_string()) {
      v.evidence["held"] = f.held;
      return {Outcome::kSkip,
              fmt::format("{}; but the target does not report which backend ran the command (the "
                          "exec answer has no 'backend'), so the choice cannot be judged",
                          Join(f.held, "; ")),
              v.evidence};
    } else if (std::string got = *b;
               std::find(backends.begin(), backends.end(), got) == backends.end()) {
      f.failed.push_back(
          fmt::format("it ran on backend '{}' (expected {})", got, Join(backends, " or ")));
    } else {
      f.held.push_back(fmt::format("it ran on backend '{}'", got));
    }
  }
  v.evidence["held"] = f.held;
  v.evidence["failed"] = f.failed;
  if (!f.failed.empty()) return {Outcome::kFail, Join(f.failed, "; "), v.evidence};
  if (!cannot_judge.empty()) {
    v.evidence["held"] = f.held;
    return {Outcome::kSkip, "cannot judge: " + cannot_judge, v.evidence};
  }
  return {Outcome::kPass, Join(f.held, "; "), v.evidence};
}

}  // namespace sandcheck::eval
