// kind pool_grows (POOL-6, at the end of this file): bursts of pooled runs, each sandbox's PID 1
// age against the harness's call.
// kind pool_walk (POOL-1..5, POOL-7, LC-2, LC-9, LC-10): the pool scenario's walk of sandboxes
// (run/pool_walk.h), judged by what each step's probe saw inside its own sandbox — canaries of
// earlier steps, their environment, and the instance it ran in — never by what the target says
// about its pools. A runtime without pools passes (every sandbox new); one that hands a sandbox
// on does so only as the requirements allow, and only clean.
//
// The probe prints, per step: sbx-probe --instance's {"instance":{boot_id, mnt, pid, net,
// init_start, booted_unix}} (a new sandbox has new namespaces and a new PID 1; a guest or a
// gVisor sandbox a kernel booted for it), "env STEP SECRET" (its
// own injected context), "seen NAME=VALUE" for every SBX_POOL_* value any process of the sandbox
// holds, and one `sbx-canary check` line per earlier token it was given.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "checks/verdict.h"
#include "common/json_strict.h"

namespace sandcheck::eval {
namespace {

using nlohmann::json;

struct Probe {
  bool ran = false;  // the step's sandbox was made and its probe answered
  json identity;     // the "instance" object; null = none shown
  std::string env;   // the "env" line's value
  std::vector<std::string> seen;
  std::vector<json> canary_checks;   // one per earlier token, in the order given
  std::vector<std::string> earlier;  // those tokens
};

Probe Read(const WalkStep& s) {
  Probe p;
  if (!s.exec || !s.exec->error.empty() || !Ran(s.exec->answer)) return p;
  std::istringstream in(s.exec->answer.stdout_text);
  std::string line;
  bool env_seen = false;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] == '{') {
      // sbx-probe --instance's line, or one sbx-canary check's.
      json j = json::parse(line, nullptr, false);
      if (!j.is_object()) continue;
      if (j.contains("instance") && j["instance"].is_object()) p.identity = j["instance"];
      if (j.contains("survivors")) p.canary_checks.push_back(j);
    } else if (line.rfind("env ", 0) == 0 || line == "env") {
      p.env = Trimmed(line.size() > 4 ? line.substr(4) : "");
      env_seen = true;
    } else if (line.rfind("seen ", 0) == 0) {
      p.seen.push_back(line.substr(5));
    }
  }
  const std::string& cmd = s.exec->command;
  // The earlier tokens are the words after "for t in" up to "; do" (the runner put them there).
  if (size_t at = cmd.find("for t in "); at != std::string::npos) {
    size_t end = cmd.find(';', at);
    std::istringstream words(cmd.substr(at + 9, end == std::string::npos ? end : end - at - 9));
    for (std::string w; words >> w;) p.earlier.push_back(w);
  }
  p.ran = env_seen;
  return p;
}

std::string Who(const WalkStep& s, size_t i) {
  return fmt::format("step {} ({} {} {})", i + 1, s.tenant, s.tool, s.trust);
}

// Whether two instance objects show one sandbox: the facts below the same, and their
// kernels booted within kSameBoot of each other by the wall clock (the two clocks it is read
// from drift apart by at most a few ms over a walk). A fact neither shows does not count.
constexpr double kSameBoot = 0.03;
bool SameInstance(const json& a, const json& b) {
  // Not the PID and network namespaces' inodes: gVisor numbers them per process (they change
  // between two commands of one sandbox); a real kernel's mount namespace and PID 1 suffice.
  for (const char* k : {"boot_id", "mnt", "init_start"}) {
    if (a.value(k, json()) != b.value(k, json())) return false;
  }
  const json ba = a.value("booted_unix", json());
  const json bb = b.value("booted_unix", json());
  if (ba.is_number() != bb.is_number()) return false;
  return !ba.is_number() || std::abs(ba.get<double>() - bb.get<double>()) <= kSameBoot;
}
// Whether an instance object holds a fact a new sandbox always changes: a boot_id (a guest) or a
// mount namespace (a container). gVisor shows neither, and its sandboxes restored from one
// checkpoint (the reference's pooled ones) share every fact a command can read, the kernel's
// boot time included: there, two steps are one instance only if the target also named one
// sandbox for both (its word may only make the verdict stricter).
bool Strong(const json& id) {
  return !id.value("boot_id", json()).is_null() || !id.value("mnt", json()).is_null();
}
bool ShowsNothing(const json& id) {
  if (!id.is_object()) return true;
  for (const auto& [k, v] : id.items()) {
    if (!v.is_null()) return false;
  }
  return true;
}

// The walk task of the scenario (the one with a walk), if it ran.
const TaskRecord* WalkTask(const ScenarioRun& run) {
  for (const auto& t : run.tasks) {
    if (t.spec->walk) return &t;
  }
  return nullptr;
}

}  // namespace

Verdict PoolWalk(const ScenarioRun& run, const json& p) {
  const TaskRecord* t = WalkTask(run);
  if (!t) return {Outcome::kError, "the scenario has no walk task", json::object()};
  if (!t->ran) {
    return {run.abort_error.empty() ? Outcome::kSkip : Outcome::kError,
            run.abort_error.empty() ? t->skip_reason : "not judged: " + run.abort_error,
            json::object()};
  }
  const std::string rule = p.value("rule", "");
  const std::string trusted = t->spec->walk->trust[0];
  std::vector<Probe> probes;
  size_t made = 0, untrusted_made = 0, refused = 0;
  for (const auto& s : t->walk) {
    probes.push_back(Read(s));
    if (!s.refused.empty()) ++refused;
    if (!s.sandbox.empty()) {
      ++made;
      if (s.trust != trusted) ++untrusted_made;
    }
  }
  json ev = {
      {"steps", t->walk.size()}, {"made", made}, {"refused", refused}, {"seed", t->walk_seed}};
  std::vector<std::string> bad;  // the first few findings
  auto add = [&](std::string why) {
    if (bad.size() < 4) bad.push_back(std::move(why));
  };
  size_t unjudged = 0;
  for (size_t i = 0; i < t->walk.size(); ++i) {
    if (!t->walk[i].sandbox.empty() && !probes[i].ran) {
      ++unjudged;
      add(fmt::format("{}: its probe did not answer ({}), so it cannot be judged",
                      Who(t->walk[i], i),
                      t->walk[i].exec ? Told(t->walk[i].exec->answer) : "not run"));
    }
  }
  // Instances: equal identities are one sandbox serving twice. Shown only when the identity is
  // the sandbox's own (not empty, not exactly the harness's host).
  std::string no_identity;
  const json host =
      t->walk_host_identity.empty() ? json() : json::parse(t->walk_host_identity, nullptr, false);
  std::vector<std::pair<json, size_t>> instances;  // each instance seen, and its latest step
  std::vector<std::pair<size_t, size_t>> reused;   // (earlier step, later step)
  for (size_t i = 0; i < t->walk.size(); ++i) {
    const Probe& pr = probes[i];
    if (!pr.ran) continue;
    if (ShowsNothing(pr.identity)) {
      no_identity = fmt::format(
          "{} shows no instance evidence (sbx-probe --instance: no boot_id, namespaces, PID 1 "
          "or boot time)",
          Who(t->walk[i], i));
      continue;
    }
    if (host.is_object() && SameInstance(pr.identity, host)) {
      no_identity = fmt::format(
          "{} shows exactly the harness's host (its boot, namespaces and PID 1): one sandbox "
          "cannot be told from another",
          Who(t->walk[i], i));
      continue;
    }
    const std::string& id = t->walk[i].sandbox;
    auto it = std::find_if(instances.begin(), instances.end(), [&](const auto& in) {
      if (!SameInstance(in.first, pr.identity)) return false;
      const std::string& other = t->walk[in.second].sandbox;
      return Strong(pr.identity) || (id == other && id.find('(') == std::string::npos);
    });
    if (it == instances.end()) {
      instances.emplace_back(pr.identity, i);
    } else {
      reused.emplace_back(it->second, i);
      it->second = i;
    }
  }
  ev["reused"] = reused.size();
  if (rule == "reset") {
    // POOL-7, LC-9: nothing of an earlier step — its canaries, its environment — in a later one.
    size_t checks = 0;
    for (size_t j = 0; j < t->walk.size(); ++j) {
      const Probe& pr = probes[j];
      if (!pr.ran) continue;
      for (size_t k = 0; k < pr.canary_checks.size(); ++k) {
        ++checks;
        const json& c = pr.canary_checks[k];
        json surv = c.value("survivors", json::array());
        if (surv.is_array() && !surv.empty()) {
          add(fmt::format("{} found canaries of token {} ({}), planted by an earlier step",
                          Who(t->walk[j], j), k < pr.earlier.size() ? pr.earlier[k] : "?",
                          surv.dump()));
        }
      }
      if (pr.canary_checks.size() < pr.earlier.size()) {
        add(fmt::format("{} answered {} of its {} canary checks", Who(t->walk[j], j),
                        pr.canary_checks.size(), pr.earlier.size()));
      }
      for (const auto& s : pr.seen) {
        std::string own = s.rfind("SBX_POOL_SECRET=", 0) == 0
                              ? "SBX_POOL_SECRET=s" + t->walk[j].token
                              : "SBX_POOL_STEP=" + t->walk[j].token;
        if (s != own) {
          add(fmt::format("{}: a process of its sandbox holds {} from an earlier step",
                          Who(t->walk[j], j), Quoted(s)));
        }
      }
    }
    ev["canary_checks"] = checks;
    if (!bad.empty()) return {Outcome::kFail, Join(bad, "; "), ev};
    return {Outcome::kPass,
            fmt::format("{} sandboxes one after the other ({} of them an instance served again, "
                        "by its kernel evidence): none showed a canary ({} checks) or an "
                        "environment value of an earlier one",
                        made, reused.size(), checks),
            ev};
  }
  if (rule == "context") {
    // POOL-2, LC-2: each allocation, warm or new, runs the command with its own context.
    for (size_t j = 0; j < t->walk.size(); ++j) {
      const Probe& pr = probes[j];
      if (!pr.ran) continue;
      std::string want = t->walk[j].token + " s" + t->walk[j].token;
      if (pr.env != want) {
        add(
            fmt::format("{}: its command saw SBX_POOL_STEP and SBX_POOL_SECRET as {}, where the "
                        "create gave {}",
                        Who(t->walk[j], j), Quoted(pr.env), Quoted(want)));
      }
    }
    if (!bad.empty()) return {Outcome::kFail, Join(bad, "; "), ev};
    return {Outcome::kPass,
            fmt::format("all {} sandboxes made ran their command with the environment and secret "
                        "of their own create ({} refused as untrusted)",
                        made, refused),
            ev};
  }
  if (rule == "tenants" || rule == "untrusted") {
    if (!bad.empty() && unjudged > 0) return {Outcome::kFail, Join(bad, "; "), ev};
    if (!no_identity.empty())
      return {Outcome::kSkip, "cannot tell sandboxes apart: " + no_identity, ev};
    if (rule == "untrusted" && untrusted_made == 0) {
      std::string why = "the walk drew no untrusted sandbox";
      for (const auto& s : t->walk) {
        if (!s.refused.empty()) why = "every untrusted create was refused: " + s.refused;
      }
      return {Outcome::kSkip, why + "; no untrusted sandbox to follow", ev};
    }
    for (const auto& [i, j] : reused) {
      const WalkStep& a = t->walk[i];
      const WalkStep& b = t->walk[j];
      std::string same = fmt::format("{} and {} ran in one instance ({})", Who(a, i), Who(b, j),
                                     probes[j].identity.dump());
      if (rule == "untrusted" && a.trust != trusted) {
        add(same + ": an untrusted sandbox served again (POOL-5)");
      } else if (rule == "tenants" && a.trust == trusted) {
        if (a.tenant != b.tenant)
          add(same + ": handed to another tenant (POOL-4)");
        else if (a.tool != b.tool)
          add(same + ": handed to another tool (LC-10)");
        else if (b.trust != trusted)
          add(same + ": handed across trust classes (POOL-1)");
      }
    }
    if (!bad.empty()) return {Outcome::kFail, Join(bad, "; "), ev};
    if (rule == "untrusted") {
      return {Outcome::kPass,
              fmt::format("{} untrusted sandboxes made, each a new instance by its kernel "
                          "evidence (boot, mount namespace, PID 1, boot time); {} reuses of "
                          "trusted ones",
                          untrusted_made, reused.size()),
              ev};
    }
    return {Outcome::kPass,
            fmt::format("{} sandboxes made; {} served again, each only to the same tenant, tool "
                        "and trust class",
                        made, reused.size()),
            ev};
  }
  return {Outcome::kError, "pool_walk: unknown rule " + Quoted(rule), ev};
}

}  // namespace sandcheck::eval

namespace sandcheck::eval {

// kind pool_grows (POOL-6): bursts of `size` pooled runs, the target settled and the bursts'
// pause_s passed before each. A run's sandbox was warm when its PID 1 had been running longer
// than the whole call took by the harness's clock (sbx-probe --instance's init_age_s, a duration
// by the sandbox's own kernel clock: no two machines' clocks are compared), less margin_s for
// the clock tick PID 1's start is counted in: a sandbox made for the call has a PID 1 younger
// than the call. A pool that follows demand serves more of a burst warm as the bursts go on (or
// all of one); a pool of a fixed size serves the same number every time. Judged from the second
// burst on: the first finds the pool as the runs before left it. A runtime that shows no warm
// run at all is not judged (no pool, or a PID 1 per command: nothing to tell by).
Verdict PoolGrows(TaskRecord& t, const nlohmann::json& p) {
  const double margin = p["margin_s"];
  json ev = {{"margin_s", margin}, {"bursts", json::array()}};
  if (!t.bursts_note.empty()) return {Outcome::kSkip, t.bursts_note, ev};
  if (t.bursts.size() < 3) {
    return {Outcome::kError,
            fmt::format("{} bursts ran, 3 are needed to see a pool follow demand", t.bursts.size()),
            ev};
  }
  std::vector<int> warm, judged;
  size_t unjudged = 0, total = 0, weak_runs = 0;
  std::string first_unjudged;
  for (size_t k = 0; k < t.bursts.size(); ++k) {
    int w = 0, j = 0;
    json runs = json::array();
    for (const Step& s : t.bursts[k]) {
      ++total;
      std::optional<json> line =
          RanCleanly(s) ? FirstJsonLine(s.answer.stdout_text) : std::nullopt;
      json id = line && line->contains("instance") ? (*line)["instance"] : json();
      const json age = id.is_object() ? id.value("init_age_s", json()) : json();
      // Only a kernel of its own (boot_id) or a mount namespace of its own says that PID 1 is
      // this sandbox's: gVisor restored from a checkpoint shows its PID 1 from before it.
      const bool weak = id.is_object() && !Strong(id);
      if (weak) ++weak_runs;
      if (!age.is_number() || weak) {
        ++unjudged;
        if (first_unjudged.empty()) {
          first_unjudged =
              fmt::format("burst {}: {}", k + 1,
                          !s.error.empty()                                     ? s.error
                          : !RanCleanly(s) ? Told(s.answer)
                          : weak ? "neither a boot_id nor a mount namespace of its own"
                                 : "no PID 1 age in " + Quoted(s.answer.stdout_text));
        }
        runs.push_back({{"wall_seconds", s.wall_seconds}, {"init_age_s", nullptr}});
        continue;
      }
      const bool was_warm = age.get<double>() - margin > s.wall_seconds;
      ++j;
      if (was_warm) ++w;
      runs.push_back({{"wall_seconds", s.wall_seconds}, {"init_age_s", age}, {"warm", was_warm}});
    }
    warm.push_back(w);
    judged.push_back(j);
    ev["bursts"].push_back({{"warm", w}, {"judged", j}, {"runs", runs}});
  }
  std::string counts;
  for (size_t k = 0; k < warm.size(); ++k)
    counts += fmt::format("{}{}/{}", k ? ", " : "", warm[k], judged[k]);
  if (weak_runs == total) {
    return {Outcome::kSkip,
            "cannot tell a warm sandbox from a new one: no run showed a kernel (boot_id) or a "
            "mount namespace of its own, only a boot time (gVisor's; sandboxes restored from one "
            "checkpoint all show the checkpoint's)",
            ev};
  }
  if (unjudged * 4 > total) {
    return {
        Outcome::kError,
        fmt::format("{} of {} pooled runs showed no PID 1 age of their sandbox, too few to judge "
                    "(first: {})",
                    unjudged, total, first_unjudged),
        ev};
  }
  if (std::all_of(warm.begin(), warm.end(), [](int w) { return w == 0; })) {
    return {Outcome::kSkip,
            fmt::format("no pooled run was served warm (warm/judged per burst: {}): the target "
                        "shows no pool whose size could follow demand (or runs every command "
                        "under a PID 1 of its own, which tells nothing of the sandbox's age)",
                        counts),
            ev};
  }
  const size_t asked = t.bursts[0].size();
  for (size_t k = 1; k < warm.size(); ++k) {
    if (static_cast<size_t>(warm[k]) == asked) {
      return {Outcome::kPass,
              fmt::format("bursts of {} pooled runs at once; burst {} found all {} warm "
                          "(warm/judged per burst: {}): the pool held what demand asked",
                          asked, k + 1, asked, counts),
              ev};
    }
  }
  const int second = warm[1];
  const int later = *std::max_element(warm.begin() + 2, warm.end());
  if (later > second) {
    return {Outcome::kPass,
            fmt::format("bursts of {} pooled runs at once, the target settled before each: {} of "
                        "the second burst warm, up to {} of a later one (warm/judged per burst: "
                        "{}): the pool grew with demand",
                        asked, second, later, counts),
            ev};
  }
  return {Outcome::kFail,
          fmt::format("bursts of {} pooled runs at once, the target settled before each: {} of the "
                      "second burst warm and never more in the {} after it (warm/judged per "
                      "burst: {}): the pool did not grow with demand",
                      asked, second, warm.size() - 2, counts),
          ev};
}

}  // namespace sandcheck::eval
