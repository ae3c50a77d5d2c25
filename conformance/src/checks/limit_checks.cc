// The limit checks: CPU throttled at the requested quota, a memory breach at the requested
// limit, a plain exit 0 (SCN-5, SCN-6, RES-*).
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

// The median wall time of the steps that ran cleanly (nullopt: none did).
std::optional<double> MedianOkWall(const std::vector<Step>& steps) {
  std::vector<double> walls;
  for (const Step& s : steps) {
    if (RanCleanly(s)) walls.push_back(s.wall_seconds);
  }
  if (walls.empty()) return std::nullopt;
  return Percentile(walls, 50);
}

// What the CPU tool printed inside the sandbox: recorded to show what the sandbox believes, never
// used for the verdict (SCN-5).
json InsideEvidence(const CpuToolOutput& inside) {
  return {{"wall_seconds", inside.wall_seconds},
          {"cpu_seconds", inside.cpu_seconds},
          {"threads", inside.threads},
          {"note", "reported inside; not used for the verdict"}};
}

}  // namespace

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
  if (inside) v.evidence["inside_sandbox"] = InsideEvidence(*inside);
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
  const double wall_raw = t.task->wall_seconds;
  double wall = wall_raw;
  // The command's own time (issue 32): the per-exec overhead, a no-op command's median wall
  // time by the harness's clock, comes off both walls, so that a runtime spending 0.7 s on every
  // exec is not judged a weaker cap. One figure for both, the smaller of the two sandboxes': an
  // overhead inflated in one sandbox only cannot lift the ratio, and taking the same amount off
  // both only stretches a slowdown that is there (with no cap, wall = base and the ratio stays 1).
  const std::optional<double> over_calib = MedianOkWall(t.overhead_calibration);
  const std::optional<double> over_task = MedianOkWall(t.overhead_task);
  double overhead = 0;
  if (over_calib && over_task) overhead = std::max(0.0, std::min(*over_calib, *over_task));
  if (!t.overhead_calibration.empty() || !t.overhead_task.empty()) {
    json o = {{"command", p["overhead_command"]},
              {"calibration_sandbox", json::array()},
              {"capped_sandbox", json::array()},
              {"subtracted_seconds", overhead}};
    for (const Step& s : t.overhead_calibration) o["calibration_sandbox"].push_back(s.wall_seconds);
    for (const Step& s : t.overhead_task) o["capped_sandbox"].push_back(s.wall_seconds);
    if (!over_calib || !over_task)
      o["note"] = "the no-op command did not run cleanly in both sandboxes: nothing subtracted";
    v.evidence["exec_overhead"] = o;
  }
  if (overhead > 0.75 * base) {
    t.got = fmt::format("{:.2f} s of wall time", wall_raw);
    return {Outcome::kError,
            fmt::format("a no-op exec takes {:.3f} s, most of the {:.3f} s the unthrottled run "
                        "took: too little of the wall time is the command's own to judge the cap "
                        "(give the work more: the scenario's cpu_work)",
                        overhead, base),
            v.evidence};
  }
  base -= overhead;
  best -= overhead;
  wall -= overhead;
  double ratio = base > 0 ? wall / base : 0;
  // With the target's usage report the throttled wall time is also set against the CPU time
  // the work needed unthrottled (host cgroup accounting, never the in-sandbox reading): a busy
  // neighbour slows the unthrottled run's wall clock, not its CPU seconds.
  std::optional<double> vs_cpu;
  if (calib_cpu && *calib_cpu > 0) vs_cpu = wall / *calib_cpu;
  std::optional<double> share, throttled_cpu = UsageOf(a, "cpu_seconds");
  if (throttled_cpu && wall > 0) share = *throttled_cpu / wall;
  v.evidence["throttled_wall_seconds"] = wall_raw;
  v.evidence["unthrottled_wall_seconds"] = base + overhead;
  if (overhead > 0) {
    v.evidence["throttled_own_seconds"] = wall;
    v.evidence["unthrottled_own_seconds"] = base;
  }
  v.evidence["ratio"] = ratio;
  v.evidence["min_ratio"] = min_ratio;
  v.evidence["max_ratio"] = max_ratio;
  if (vs_cpu) {
    v.evidence["unthrottled_cpu_seconds"] = *calib_cpu;
    v.evidence["ratio_vs_cpu"] = *vs_cpu;
  }
  if (share) v.evidence["throttled_host_share"] = *share;
  t.got = fmt::format("{:.2f} s of wall time ({:.1f}x unthrottled)", wall_raw, ratio);
  std::string story = fmt::format(
      "fixed work took {:.3f} s under the limit and {:.3f} s without it: {:.2f}x (harness wall "
      "clock{}){}",
      wall, base, ratio,
      overhead > 0 ? fmt::format(", less the {:.3f} s a no-op exec takes", overhead) : "",
      vs_cpu ? fmt::format(", {:.2f}x the {:.3f} CPU seconds it needed unthrottled (the "
                           "target's usage report)",
                           *vs_cpu, *calib_cpu)
             : "");
  std::vector<std::string> bad;
  // Where the target reports the cgroup's throttled time (T) with its CPU time (C), the kernel's
  // own evidence decides, and a busy machine cannot change the verdict either way (wall clocks
  // can: a neighbour slows a run with no cap at all to "capped", and a capped run to "capped
  // below the request"). A CFS quota q throttles a period only after the cgroup used q of it,
  // for at most the rest of the period, so C >= T * q / (1 - q) whatever else runs: C / (C + T)
  // is at least the quota applied. One thread only (T adds up over CPUs).
  // Plain values, not std::optional: GCC 12's -Wmaybe-uninitialized misreads the optionals here.
  const std::optional<double> throttled_opt = UsageOf(a, "throttled_seconds");
  const bool throttled = throttled_opt && *throttled_opt >= 0;  // -1: not measured
  const double thr = throttled ? *throttled_opt : 0;
  // One timeline: running plus throttled fits in the wall time. Where they do not (gVisor's
  // Sentry runs many host threads, whose throttled time adds up over CPUs), the bound does not
  // hold and the wall-clock bands judge instead.
  bool one_timeline = (!inside || inside->threads == 1) && throttled && throttled_cpu &&
                      thr + *throttled_cpu <= wall_raw * 1.05;
  // A quota bites only once the work used it up within a period: where neighbours held the work
  // below the cap the whole time, "throttled 0 s" is what a faithful cap shows too. The same
  // run's unthrottled calibration says whether the machine could give more than the cap at all;
  // where it could not, neither the kernel's evidence nor the wall clocks can tell a cap from
  // none (both runs get what the machine gives), and the check says so: error, not a verdict
  // (a jailed soak with a CPU hog gave each test run 0.4 of a CPU).
  std::optional<double> calib_share;
  if (calib_cpu && best > 0) calib_share = *calib_cpu / best;
  const double cap_cpus = static_cast<double>(millicores) / 1000.0;
  if (calib_share) v.evidence["unthrottled_host_share"] = *calib_share;
  // Without the kernel's throttled time the same holds: where the unthrottled run got no more
  // than the cap, only the target's CPU seconds could tell a cap from none, and those may only
  // make a verdict stricter (issue 32): error, not a pass.
  const bool starved = millicores > 0 && (!throttled || thr <= 0) && calib_share &&
                       *calib_share < cap_cpus * 1.1;
  const bool kernel_judges =
      throttled && throttled_cpu && millicores > 0 && one_timeline && !starved;
  if (starved) {
    story += fmt::format(
        "; {}, and the machine gave even the unthrottled run only {:.2f} of a CPU "
        "(the cap: {:.2f}): too busy to tell a cap from none",
        throttled ? "throttled 0 s" : "no throttled time reported", *calib_share, cap_cpus);
  } else if (kernel_judges) {
    double bound =
        *throttled_cpu + thr > 0 ? *throttled_cpu / (*throttled_cpu + thr) : 0;
    v.evidence["throttled_seconds"] = thr;
    v.evidence["quota_lower_bound"] = bound;
    story += fmt::format(
        "; the target's cgroup: {:.3f} CPU s, throttled {:.3f} s, so the quota applied is at "
        "least {:.2f} of a CPU",
        *throttled_cpu, thr, bound);
    if (thr <= 0) {
      bad.push_back(
          "the quota never throttled the work (throttled 0 s in the target's usage "
          "report): no cap bit");
    } else if (bound < cap_cpus * 0.8) {
      bad.push_back(fmt::format(
          "a quota of at most {:.2f} of a CPU held the work, less than the {} millicores asked "
          "for (a cap below the requested one)",
          bound, millicores));
    }
  } else if (!starved) {
    // The cap bites: either measure shows the slowdown (the CPU-time one survives a busy host).
    double low = vs_cpu ? std::max(ratio, *vs_cpu) : ratio;
    if (low < min_ratio) bad.push_back(fmt::format("a hard cap needs >= {:.2f}x", min_ratio));
  }
  // The target's figures may only make the verdict stricter, never pass what the harness's own
  // clock fails (SCN-5: measured by wall clock, issue 32): whatever the usage report says (the
  // kernel's throttled time above, or CPU seconds that make the calibration look cheap), the
  // harness's wall-clock ratio keeps a floor halfway between no cap at all (1x) and the band's
  // lower end. A runtime reporting the figures of a cap it did not apply ran at about 1x. The
  // floor is below the band so that a busy host (both runs slowed) does not fail a faithful cap
  // the kernel's figures prove; a host too busy for that is "starved" above, not judged.
  const double wall_floor = 1.0 + (min_ratio - 1.0) / 2.0;
  v.evidence["wall_floor_ratio"] = wall_floor;
  bool too_busy = false;
  if (!starved && millicores > 0 && ratio < wall_floor) {
    // A faithful cap runs the work at no more than the cap, so its ratio is at least the
    // unthrottled run's CPU share / the cap. Where the machine gave the unthrottled run too
    // little for that to reach the floor (a neighbour's build), the wall clock cannot judge:
    // error with the reason, never a pass (the share is the target's figure, so it may excuse
    // a verdict into "cannot judge", not into a pass).
    if (calib_share && *calib_share < cap_cpus * wall_floor * 1.05) {
      too_busy = true;
      story += fmt::format(
          "; by the harness's wall clock {:.2f}x, under the {:.2f}x floor, but the unthrottled "
          "run got only {:.2f} of a CPU, so a faithful {:.2f} CPU cap shows only about {:.2f}x: "
          "too busy to hold the wall-clock floor",
          ratio, wall_floor, *calib_share, cap_cpus, *calib_share / cap_cpus);
    } else {
      bad.push_back(fmt::format(
          "by the harness's wall clock the work ran at {:.2f}x the unthrottled time, under the "
          "{:.2f}x floor that holds whatever the target reports (no cap bit the work)",
          ratio, wall_floor));
    }
  }
  // ... at the requested quota, not a lower one: the exact measure where there is one (the
  // throttled-time bound above replaces it where the target reports one).
  double high = vs_cpu ? *vs_cpu : ratio;
  if (!kernel_judges && !starved && max_ratio > 0 && high > max_ratio) {
    bad.push_back(fmt::format(
        "{:.2f}x is more than {:.2f}x: the work was held to less CPU than the {} millicores asked "
        "for (a cap below the requested one)",
        high, max_ratio, millicores));
  }
  // ... and never above it: the capped run's host CPU share (cgroup CPU seconds / wall).
  if (share && millicores > 0) {
    if (*share > cap_cpus * 1.15 + 0.02) {
      bad.push_back(
          fmt::format("it got {:.2f} of a CPU (the target's usage report) under a {:.2f} CPU cap",
                      *share, cap_cpus));
    }
  }
  if (!bad.empty()) {
    return {Outcome::kFail, fmt::format("{}; {}", story, Join(bad, "; ")), v.evidence};
  }
  if (starved || too_busy) return {Outcome::kError, story, v.evidence};
  return {Outcome::kPass, story, v.evidence};
}

Verdict CpuSharedByThreads(TaskRecord& t, const json& p, int64_t millicores) {
  const ExecAnswer& a = t.task->answer;
  const double min_ratio = p["min_ratio"];
  Verdict v;
  v.evidence["requested_millicores"] = millicores;
  v.evidence["min_ratio"] = min_ratio;
  json runs = json::array();
  const Step* fastest = nullptr;
  for (const Step& s : t.calibration) {
    runs.push_back(ExecEvidence(s));
    if (!RanCleanly(s)) continue;
    if (!fastest || s.wall_seconds < fastest->wall_seconds) fastest = &s;
  }
  v.evidence["reference"] = runs;
  v.evidence["reference_command"] = p["reference_command"];
  t.refused = false;
  if (a.status != "ok" || a.exit_code != 0) {
    t.got = Told(a);
    t.refused = true;
    return {Outcome::kFail,
            fmt::format("the threads' fixed work did not complete under the limit: {}", Told(a)),
            v.evidence};
  }
  if (!fastest) {
    t.got = fmt::format("{:.2f} s of wall time", t.task->wall_seconds);
    return {Outcome::kFail, "the one-thread reference run did not complete under the limit",
            v.evidence};
  }
  const std::optional<double> over = MedianOkWall(t.overhead_task);
  const double overhead = over ? std::max(0.0, *over) : 0.0;
  const double base_raw = fastest->wall_seconds, wall_raw = t.task->wall_seconds;
  v.evidence["exec_overhead"] = {{"command", p["overhead_command"]},
                                 {"subtracted_seconds", overhead}};
  v.evidence["threads_wall_seconds"] = wall_raw;
  v.evidence["reference_wall_seconds"] = base_raw;
  if (overhead > 0.75 * base_raw) {
    t.got = fmt::format("{:.2f} s of wall time", wall_raw);
    return {Outcome::kError,
            fmt::format("a no-op exec takes {:.3f} s, most of the {:.3f} s the one-thread run "
                        "took: too little of the wall time is the command's own to judge",
                        overhead, base_raw),
            v.evidence};
  }
  const double base = base_raw - overhead, wall = wall_raw - overhead;
  const double ratio = base > 0 ? wall / base : 0;
  v.evidence["ratio"] = ratio;
  auto inside = ParseCpuTool(a.stdout_text);
  const int threads = inside && inside->threads > 0 ? inside->threads : 0;
  if (inside) v.evidence["inside_sandbox"] = InsideEvidence(*inside);
  t.got = fmt::format("{:.2f} s of wall time ({:.1f}x one thread)", wall_raw, ratio);
  const double cap_cpus = static_cast<double>(millicores) / 1000.0;
  std::string story = fmt::format(
      "{} threads of the same fixed work each took {:.3f} s under the {} millicores, one thread "
      "{:.3f} s in the same sandbox: {:.2f}x (harness wall clock{})",
      threads > 0 ? std::to_string(threads) : "several", wall, millicores, base, ratio,
      overhead > 0 ? fmt::format(", less the {:.3f} s a no-op exec takes", overhead) : "");
  // The target's cgroup figure may only make the verdict stricter: the threads together never
  // get more than the cap. (A machine too busy to give them more than about the cap hides a cap
  // per thread from the wall clock: CFS gives a whole cgroup subtree one share beside a hog.)
  if (auto cpu = UsageOf(a, "cpu_seconds"); cpu && wall > 0 && millicores > 0) {
    const double share = *cpu / wall;
    v.evidence["threads_host_share"] = share;
    if (share > cap_cpus * 1.15 + 0.02) {
      return {Outcome::kFail,
              fmt::format("{}; but the threads got {:.2f} of a CPU together (the target's usage "
                          "report) under a {:.2f} CPU cap: the cap held each thread, not the "
                          "sandbox",
                          story, share, cap_cpus),
              v.evidence};
    }
  }
  if (ratio >= min_ratio) return {Outcome::kPass, story, v.evidence};
  // Under the cap the one thread must have had the whole quota for the comparison to hold: a
  // machine that gave it less (a busy host) gives the threads together more than it, whatever
  // the cap. Its share, by the target's cgroup figure or else the tool's own (either may excuse
  // a failure into "cannot judge", never into a pass).
  std::optional<double> ref_cpu = UsageOf(fastest->answer, "cpu_seconds");
  const char* whose = "the target's usage report";
  if (!ref_cpu) {
    if (auto in = ParseCpuTool(fastest->answer.stdout_text); in && in->cpu_seconds > 0) {
      ref_cpu = in->cpu_seconds;
      whose = "the tool's own reading";
    }
  }
  if (ref_cpu && base > 0) {
    const double ref_share = *ref_cpu / base;
    v.evidence["reference_cpu_share"] = ref_share;
    if (ref_share < cap_cpus * 0.9) {
      return {Outcome::kError,
              fmt::format("{}; but the one-thread run got only {:.2f} of a CPU ({}) under a "
                          "{:.2f} CPU cap: too busy a machine to tell a cap on the sandbox from "
                          "one per thread",
                          story, ref_share, whose, cap_cpus),
              v.evidence};
    }
  }
  return {Outcome::kFail,
          fmt::format("{}: under a cap on the sandbox the threads share {:.2f} of a CPU and take "
                      "about {}x as long; {:.2f}x is under {:.2f}x, so the cap held each thread "
                      "(or vCPU), not the sandbox",
                      story, cap_cpus, threads > 0 ? threads : 2, ratio, min_ratio),
          v.evidence};
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
    std::string why = hog.done
                          ? "the allocation completed (no memory limit?)"
                          : fmt::format(
                                "the breach was not reported (status must be resource_exceeded or "
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
      // A VM-class target may report its VMM's resident memory (usage.memory_peak_scope
      // "vmm"): that holds the guest's kernel and the VMM itself, so a figure above the limit
      // says nothing of the guest's limit; below it, it still fails (the kill came early).
      const bool vmm = a.extra["usage"].value("memory_peak_scope", "") == "vmm";
      if (vmm && *peak > lim * (1 + slack)) {
        v.evidence["reported_peak_scope"] = "vmm";
        held.push_back(fmt::format(
            "the reported peak {} is the VMM's resident memory (guest kernel and VMM included): "
            "not judged above the limit",
            Mib(*peak)));
      } else if (*peak > lim * (1 + slack) || *peak < lim * (1 - 2 * slack)) {
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
    bracket.push_back(
        s.is_exec ? ExecEvidence(s)
                  : json{{"phase", s.phase}, {"wall_seconds", s.wall_seconds}, {"error", s.error}});
    if (!s.is_exec) continue;
    const ExecAnswer& r = s.answer;
    if (s.phase == "bracket-under") {
      std::string done = p["under_stdout"];
      if (r.status != "ok" || r.exit_code != 0 ||
          (!done.empty() && r.stdout_text.find(done) == std::string::npos)) {
        bad.push_back(
            fmt::format("'{}', below the limit, did not complete ({}): the limit applied "
                        "is lower than the one asked for",
                        s.command, Told(r)));
      } else {
        held.push_back(fmt::format("'{}' (below the limit) completed", s.command));
      }
    } else if (s.phase == "bracket-over") {
      if (r.status == "resource_exceeded" || r.state == "CRASHED") {
        held.push_back(fmt::format("'{}' (just above the limit) was ended too", s.command));
      } else {
        bad.push_back(
            fmt::format("'{}', just above the limit, was not ended ({}): the limit "
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

}  // namespace sandcheck::eval
