#include "run/nfr_runner.h"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "common/clock.h"
#include "common/json_strict.h"
#include "common/stats.h"
#include "common/subprocess.h"
#include "report/render.h"

extern char** environ;

namespace sandcheck {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kStages[] = {"allocate", "initialize", "inject_context", "execute",
                                   "collect"};

// What one method produced for one (target, backend).
struct Samples {
  std::vector<double> harness, target;
  std::map<std::string, std::vector<double>> stages;  // target-reported, per LC-1 stage
  json evidence = json::object();
  std::string skip, fail, error;  // at most one is set
  std::string target_clock_name = "target";
};

std::string Cut(const std::string& s, size_t n = 300) {
  return s.size() > n ? s.substr(0, n) + "..." : s;
}

bool AnswerOk(const ExecAnswer& a) { return a.status == "ok" && a.exit_code == 0; }

std::string AnswerText(const ExecAnswer& a) {
  return fmt::format("status {}, state {}, exit {}, stderr \"{}\"", a.status, a.state, a.exit_code,
                     Cut(a.stderr_text, 200));
}

void AddTargetFigures(const ExecAnswer& a, Samples& s) {
  double t = TargetFigure(a);
  if (t >= 0) s.target.push_back(t);
  if (a.extra.contains("stages") && a.extra["stages"].is_object()) {
    for (const char* k : kStages) {
      const json& v = a.extra["stages"].value(k, json());
      if (v.is_number() && v.get<double>() >= 0) s.stages[k].push_back(v.get<double>());
    }
  }
}

class Measurer {
 public:
  Measurer(Target& target, const NfrRunOptions& o, LiveLog& log, std::string label)
      : t_(target), o_(o), log_(log), label_(std::move(label)) {}

  json CreateRequest(const std::string& backend) const {
    json r = {{"template", "sandbox"},
              {"limits", json::object()},
              {"egress", {{"rules", json::array()}}}};
    if (!backend.empty()) r["backend"] = backend;
    return r;
  }

  void Progress(int i, int n) {
    if (i % 10 == 0 || i + 1 == n) log_.Progress(fmt::format("{}: sample {}/{}", label_, i + 1, n));
  }

  // Infrastructure failure of a driver call: the (target, backend) is `error`.
  bool Check(const sbx::Status& st, const std::string& what, Samples& s) {
    if (st.ok()) return true;
    s.error = fmt::format("{} failed: {}", what, st.ToString());
    return false;
  }

  Samples WarmExec(const std::string& backend, const std::string& cmd, int n) {
    Samples s;
    auto id = t_.Create(CreateRequest(backend));
    if (!Check(id.status(), "create", s)) return s;
    auto warm = t_.Exec(*id, cmd, o_.call_timeout_s);
    if (Check(warm.status(), "warm-up exec", s)) {
      if (!AnswerOk(*warm)) {
        s.fail =
            fmt::format("the warm-up exec of '{}' did not succeed: {}", cmd, AnswerText(*warm));
      } else {
        (void)t_.Settle();
        for (int i = 0; i < n && !Interrupted(); ++i) {
          Progress(i, n);
          auto t0 = Clock::now();
          auto a = t_.Exec(*id, cmd, o_.call_timeout_s);
          double wall = SecondsSince(t0);
          if (!Check(a.status(), "exec", s)) break;
          if (!AnswerOk(*a)) {
            s.fail = fmt::format("exec {} of '{}' did not succeed: {}", i + 1, cmd, AnswerText(*a));
            break;
          }
          s.harness.push_back(wall);
          AddTargetFigures(*a, s);
          (void)t_.Settle();
        }
      }
    }
    auto d = t_.Destroy(*id);
    if (s.error.empty()) Check(d.status(), "destroy", s);
    (void)t_.Settle();
    return s;
  }

  Samples PooledRun(const std::string& backend, const std::string& cmd, int n) {
    Samples s;
    json req = CreateRequest(backend);
    // One untimed run fills the pool for this (backend, image, tenant) key.
    auto first = t_.RunPooled(req, cmd, o_.call_timeout_s);
    if (!first.ok() && first.status().code() == sbx::Code::kUnsupported) {
      s.skip = first.status().message();
      return s;
    }
    if (!Check(first.status(), "one-shot run", s)) return s;
    if (!AnswerOk(*first)) {
      s.fail = fmt::format("the first one-shot run of '{}' did not succeed: {}", cmd,
                           AnswerText(*first));
      return s;
    }
    for (int i = 0; i < n && !Interrupted(); ++i) {
      Progress(i, n);
      (void)t_.Settle();  // the previous sample's return and refill, off the clock
      auto t0 = Clock::now();
      auto a = t_.RunPooled(req, cmd, o_.call_timeout_s);
      double wall = SecondsSince(t0);
      if (!Check(a.status(), "one-shot run", s)) break;
      if (!AnswerOk(*a)) {
        s.fail =
            fmt::format("one-shot run {} of '{}' did not succeed: {}", i + 1, cmd, AnswerText(*a));
        break;
      }
      s.harness.push_back(wall);
      AddTargetFigures(*a, s);
    }
    (void)t_.Settle();
    return s;
  }

  Samples CreateExec(const std::string& backend, const std::string& cmd, int n) {
    Samples s;
    json req = CreateRequest(backend);
    // i == -1: an untimed warm-up (image cache, first-use costs of the backend).
    for (int i = -1; i < n && !Interrupted(); ++i) {
      if (i >= 0) Progress(i, n);
      (void)t_.Settle();
      auto t0 = Clock::now();
      auto id = t_.Create(req);
      if (!Check(id.status(), "create", s)) break;
      auto a = t_.Exec(*id, cmd, o_.call_timeout_s);
      double wall = SecondsSince(t0);
      auto d = t_.Destroy(*id);
      if (!Check(a.status(), "first exec", s) || !Check(d.status(), "destroy", s)) break;
      if (!AnswerOk(*a)) {
        s.fail = fmt::format("the first exec of '{}' in a new sandbox did not succeed: {}", cmd,
                             AnswerText(*a));
        break;
      }
      if (i < 0) continue;
      s.harness.push_back(wall);
      AddTargetFigures(*a, s);
    }
    (void)t_.Settle();
    return s;
  }

  // NFR-4. reclaim false: the clock stops at destroy's answer (the caller's path: nothing of
  // the sandbox can run any more) and the reclaim is waited for off the clock; true: the clock
  // also covers the target's reclaim (Settle()).
  Samples DestroyReclaim(const std::string& backend, const std::string& setup, int n,
                         bool reclaim) {
    Samples s;
    json req = CreateRequest(backend);
    int setup_failed = 0;
    for (int i = 0; i < n && !Interrupted(); ++i) {
      Progress(i, n);
      auto id = t_.Create(req);
      if (!Check(id.status(), "create", s)) break;
      auto a = t_.Exec(*id, setup, o_.call_timeout_s);
      if (!Check(a.status(), "setup exec", s)) {
        (void)t_.Destroy(*id);
        break;
      }
      if (a->status != "ok" || a->exit_code != 0) {
        // NFR-4 times the reclaim of a sandbox that holds a file and a live process; without
        // them the sample would time the teardown of an empty sandbox.
        ++setup_failed;
        s.fail = fmt::format("the setup command `{}` did not run: status {}, exit {}: {}", setup,
                             a->status, a->exit_code, a->stderr_text);
        (void)t_.Destroy(*id);
        break;
      }
      (void)t_.Settle();
      auto t0 = Clock::now();
      auto d = t_.Destroy(*id);
      double answered = SecondsSince(t0);
      sbx::Status settled = t_.Settle();
      double wall = reclaim ? SecondsSince(t0) : answered;
      if (!Check(d.status(), "destroy", s) || !Check(settled, "settle", s)) break;
      s.harness.push_back(wall);
      if (d->seconds >= 0) s.target.push_back(d->seconds);
    }
    s.evidence["setup_not_ok"] = setup_failed;
    return s;
  }

  Samples OrphanSweep(int n, int sandboxes, const std::string& backend) {
    Samples s;
    log_.Progress(fmt::format("{}: {} samples (kill -9 of a runtime holding {} sandboxes)", label_,
                              n, sandboxes));
    auto r = t_.MeasureOrphanSweep(n, sandboxes, backend);
    if (!r.ok() && r.status().code() == sbx::Code::kUnsupported) {
      s.skip = r.status().message();
      return s;
    }
    if (!Check(r.status(), "orphan sweep", s)) return s;
    (r->clock == "target" ? s.target : s.harness) = r->seconds;
    s.evidence["orphan_sweep"] = r->evidence;
    return s;
  }

 private:
  Target& t_;
  const NfrRunOptions& o_;
  LiveLog& log_;
  std::string label_;
};

std::string Ms(double s) { return FormatSeconds(json(s)); }

std::string ReclaimNote(const Target& t) {
  if (t.Kind() == "reference")
    return "in process: destroy, then Runtime::Drain() (the background reclaim) on the clock";
  if (t.Kind() == "adapter") return "adapter protocol v1: destroy answers after the reclaim";
  return "over HTTP: destroy's answer, then the target's background reclaim on the clock where "
         "the endpoint reports it (" + t.SettleNote() + ")";
}

// Backends to measure a target on: (backend asked, label in the report, skip reason if any).
struct Job {
  std::string backend, label, skip;
};

std::vector<Job> JobsFor(const NfrTarget& t, const TargetInfo& info, const std::string& asked) {
  std::vector<Job> jobs;
  if (t.RuntimeWide()) return {{"", "runtime", ""}};
  auto offered = [&](const std::string& b) {
    return std::find(info.backends.begin(), info.backends.end(), b) != info.backends.end();
  };
  std::string offers = info.backends.empty() ? "none listed" : Join(info.backends, ", ");
  if (t.backends.size() == 1 && t.backends[0] == "*") {
    if (!asked.empty()) {
      if (info.backends.empty() || offered(asked)) {
        jobs.push_back({asked, asked, ""});
      } else {
        jobs.push_back(
            {asked, asked,
             fmt::format("the target does not offer backend '{}' (it offers: {})", asked, offers)});
      }
    } else if (info.backends.empty()) {
      jobs.push_back({"", "default", ""});
    } else {
      for (const auto& b : info.backends) jobs.push_back({b, b, ""});
    }
    return jobs;
  }
  for (const auto& b : t.backends) {
    if (!offered(b)) {
      jobs.push_back(
          {b, b,
           fmt::format("the target does not offer the {} backend (it offers: {})", b, offers)});
    } else if (!asked.empty() && asked != b) {
      jobs.push_back({b, b,
                      fmt::format("this target is measured on the {} backend; --backend {} "
                                  "was asked",
                                  b, asked)});
    } else {
      jobs.push_back({b, b, ""});
    }
  }
  return jobs;
}

}  // namespace

double TargetFigure(const ExecAnswer& a) {
  if (a.extra.contains("stages") && a.extra["stages"].is_object()) {
    double sum = 0;
    bool any = false;
    for (const char* k : kStages) {
      const json& v = a.extra["stages"].value(k, json());
      if (v.is_number() && v.get<double>() >= 0) {
        sum += v.get<double>();
        any = true;
      }
    }
    if (any) return sum;
  }
  return a.seconds >= 0 ? a.seconds : -1;
}

json MeasurementJson(const std::string& name, const std::string& scenario,
                     const std::string& target, const std::string& backend,
                     const std::string& clock, const std::vector<double>& samples) {
  json m = {{"name", name},       {"scenario", scenario}, {"target", target},
            {"backend", backend}, {"unit", "s"},          {"clock", clock}};
  m.update(StatsJson(samples));
  return m;
}

sbx::StatusOr<std::vector<double>> MeasureSpawnFloor(const std::vector<std::string>& argv,
                                                     int samples, FloorKind kind) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<double> out;
  for (int i = 0; i < samples && !Interrupted(); ++i) {
    auto t0 = Clock::now();
    pid_t pid;
    if (kind == FloorKind::kForkExec) {
      pid = ::fork();
      if (pid < 0) return sbx::ErrnoStatus("fork");
      if (pid == 0) {
        ::execv(args[0], args.data());
        ::_exit(127);
      }
    } else {
      int rc = ::posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ);
      if (rc != 0) return sbx::ErrnoStatus(fmt::format("posix_spawn {}", argv[0]), rc);
    }
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    double s = SecondsSince(t0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      return sbx::Internal(fmt::format("{} did not exit 0 (wait status {})", argv[0], st));
    out.push_back(s);
  }
  return out;
}

NfrRunResult RunNfr(Target& target, const TargetInfo& info, const NfrSpec& spec,
                    const NfrRunOptions& o, const std::string& target_name, LiveLog& log) {
  NfrRunResult out;
  std::printf("nfr\tbackend\tclock\tn\tp50\tp95\tlimit\toutcome\n");
  std::fflush(stdout);
  std::vector<double> floor;
  if (spec.floor_samples > 0) {
    // "floor": fork()+exec, the definition; "floor-spawn": posix_spawn (vfork+exec), which does
    // not copy the harness's page tables — the cheapest way this machine starts a process.
    for (auto [name, kind] : {std::pair{"floor", FloorKind::kForkExec},
                              std::pair{"floor-spawn", FloorKind::kPosixSpawn}}) {
      log.Progress(fmt::format("{}: {} x {} of {}", name, spec.floor_samples,
                               kind == FloorKind::kForkExec ? "fork+exec" : "posix_spawn",
                               spec.floor_argv[0]));
      auto f = MeasureSpawnFloor(spec.floor_argv, spec.floor_samples, kind);
      if (!f.ok()) {
        out.errors.push_back(std::string(name) + ": " + f.status().ToString());
        continue;
      }
      if (kind == FloorKind::kForkExec) floor = *f;
      out.measurements.push_back(
          MeasurementJson(name, spec.name, target_name, "host", "harness", *f));
      Stats fs = ComputeStats(*f);
      log.ClearProgress();
      std::printf("%s\thost\tharness\t%zu\t%s\t%s\t-\t-\n", name, fs.count, Ms(fs.p50).c_str(),
                  Ms(fs.p95).c_str());
      std::fflush(stdout);
    }
  }
  double floor_p50 = floor.empty() ? 0 : Percentile(floor, 50);
  for (const NfrTarget& t : spec.targets) {
    if (!o.only.empty() && !o.only.count(t.id)) continue;
    for (const Job& job : JobsFor(t, info, o.backend)) {
      if (Interrupted()) break;
      std::string label = fmt::format("{} [{}]", t.id, job.label);
      int n = t.SamplesFor(o.samples);
      auto t0 = Clock::now();
      Samples s;
      Measurer m(target, o, log, label);
      if (!job.skip.empty()) {
        s.skip = job.skip;
      } else {
        switch (t.method) {
          case NfrMethod::kWarmExec:
            s = m.WarmExec(job.backend, t.CommandFor(job.backend), n);
            break;
          case NfrMethod::kPooledRun:
            s = m.PooledRun(job.backend, t.CommandFor(job.backend), n);
            break;
          case NfrMethod::kCreateExec:
            s = m.CreateExec(job.backend, t.CommandFor(job.backend), n);
            break;
          case NfrMethod::kDestroy:
            s = m.DestroyReclaim(job.backend, t.SetupFor(job.backend), n, false);
            break;
          case NfrMethod::kDestroyReclaim:
            s = m.DestroyReclaim(job.backend, t.SetupFor(job.backend), n, true);
            break;
          case NfrMethod::kOrphanSweep:
            // Runtime-wide; its sandboxes live on the --backend asked for, if any.
            s = m.OrphanSweep(n, t.sandboxes, o.backend);
            break;
        }
      }
      if (Interrupted() && s.error.empty()) s.error = "interrupted";
      log.ClearProgress();
      double seconds = SecondsSince(t0);
      // Measurements: the harness clock, the target's own figure, its stages.
      if (!s.harness.empty())
        out.measurements.push_back(
            MeasurementJson(t.id, spec.name, target_name, job.label, "harness", s.harness));
      if (!s.target.empty())
        out.measurements.push_back(
            MeasurementJson(t.id, spec.name, target_name, job.label, "target", s.target));
      for (const auto& [stage, v] : s.stages) {
        out.measurements.push_back(MeasurementJson(t.id + ".stage." + stage, spec.name, target_name,
                                                   job.label, "target", v));
      }
      const std::vector<double>& gated = t.clock == "target" ? s.target : s.harness;
      std::string outcome, reason;
      json ev = s.evidence;
      ev["target"] = t.id;
      ev["method"] = NfrMethodName(t.method);
      ev["backend"] = job.label;
      ev["boundary"] = t.boundary;
      ev["clock"] = t.clock;
      ev["samples_asked"] = n;
      ev["count"] = gated.size();
      if (t.method == NfrMethod::kDestroyReclaim) ev["reclaim"] = ReclaimNote(target);
      if (std::string settle = target.SettleNote(); !settle.empty()) ev["settle"] = settle;
      if (t.method == NfrMethod::kDestroy) {
        ev["reclaim"] = "off the clock: waited for after destroy answered (teardown-reclaim "
                        "times it)";
        if (!s.harness.empty() && !s.target.empty()) {
          // Both clocks time the same span here: they must agree within 1 ms + 20 % (p50s).
          double h = Percentile(s.harness, 50), g = Percentile(s.target, 50);
          double margin = 0.001 + 0.2 * std::max(h, g);
          ev["clocks"] = {{"harness_p50_s", h},
                          {"target_p50_s", g},
                          {"margin_s", margin},
                          {"agree", std::abs(h - g) <= margin}};
        }
      }
      if (t.limited) {
        ev["requirement"] = t.requirement;
        ev["limit_s"] = t.limit_s;
        ev["percentile"] = t.percentile;
      }
      Stats gs = ComputeStats(gated);
      if (!s.error.empty()) {
        outcome = "error";
        reason = s.error;
      } else if (!s.skip.empty()) {
        outcome = "skip";
        reason = s.skip;
      } else if (!s.fail.empty()) {
        outcome = "fail";
        reason = s.fail;
      } else if (gated.empty() && !(t.clock == "target" ? s.harness : s.target).empty()) {
        // E.g. an adapter's own orphan-sweep figures: recorded, but not on the gated clock.
        outcome = "skip";
        reason = fmt::format(
            "no samples on the gated {} clock (the other clock's figures are "
            "recorded, not gated)",
            t.clock);
      } else if (gated.empty()) {
        outcome = "fail";
        reason = "no samples: nothing shows the target is met";
      } else {
        double value = Percentile(gated, t.percentile);
        ev["value_s"] = value;
        ev["p50_s"] = gs.p50;
        ev["p95_s"] = gs.p95;
        ev["p99_s"] = gs.p99;
        ev["max_s"] = gs.max;
        std::string other;
        const std::vector<double>& other_clock = t.clock == "target" ? s.harness : s.target;
        if (!other_clock.empty()) {
          double ov = Percentile(other_clock, t.percentile);
          ev["other_clock"] = {{"clock", t.clock == "target" ? "harness" : "target"},
                               {"count", other_clock.size()},
                               {"value_s", ov}};
          other = fmt::format("; {} clock p{:g} {}", t.clock == "target" ? "harness" : "target",
                              t.percentile, Ms(ov));
        }
        if (floor_p50 > 0) ev["p50_over_floor_p50"] = gs.p50 / floor_p50;
        if (!t.limited) {
          outcome = "pass";
        } else if (value < t.limit_s) {
          outcome = "pass";
          reason = fmt::format("p{:g} {} < {} ({} clock, n={}{})", t.percentile, Ms(value),
                               Ms(t.limit_s), t.clock, gated.size(), other);
        } else {
          outcome = "fail";
          reason =
              fmt::format("p{:g} {} is not below the limit {} ({} clock, n={}{})", t.percentile,
                          Ms(value), Ms(t.limit_s), t.clock, gated.size(), other);
        }
      }
      std::printf("%s\t%s\t%s\t%zu\t%s\t%s\t%s\t%s%s%s\n", t.id.c_str(), job.label.c_str(),
                  t.clock.c_str(), gated.size(), gated.empty() ? "-" : Ms(gs.p50).c_str(),
                  gated.empty() ? "-" : Ms(gs.p95).c_str(), t.limited ? Ms(t.limit_s).c_str() : "-",
                  outcome.c_str(), reason.empty() || outcome == "pass" ? "" : ": ",
                  outcome == "pass" ? "" : SanitizeUtf8(Cut(reason, 200)).c_str());
      std::fflush(stdout);
      if (!s.error.empty()) out.errors.push_back(fmt::format("{}: {}", label, s.error));
      if (!t.limited) continue;  // a measurement only: no verdict of its own
      bool blocking =
          outcome == "error" ||
          (outcome == "fail" && (t.level == "MUST" || o.profile != Profile::kDefault)) ||
          (outcome == "skip" && o.profile == Profile::kCertify);
      std::string final_outcome =
          outcome == "skip" && o.profile == Profile::kCertify ? "fail" : outcome;
      if (final_outcome != outcome) reason = "certify: a skip is a failure: " + reason;
      out.checks.push_back({{"id", NfrCheckId(spec, t, t.RuntimeWide() ? "" : job.label)},
                            {"scenario", spec.name},
                            {"task", nullptr},
                            {"title", t.title},
                            {"requirements", {t.requirement}},
                            {"level", t.level},
                            {"kind", "nfr_latency"},
                            {"outcome", final_outcome},
                            {"raw_outcome", outcome},
                            {"reason", reason},
                            {"expected", nullptr},
                            {"blocking", blocking},
                            {"seconds", seconds},
                            {"evidence", ev}});
    }
  }
  return out;
}

}  // namespace sandcheck
