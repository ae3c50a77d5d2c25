// `sandcheck reproduce throttle|revert|suspend`: the demo's measurements (MEAS-1..MEAS-3,
// seeds/004), re-done through the driver against any target and backend, as the demo's tables
// (Markdown on stdout and in a file), JSON with every raw value, and SVG charts.
//
//   throttle  fixed CPU work (sbx-cpu) at 1000, 500 and 250 millicores, 1 and 4 threads, 3 runs
//             each, one fresh sandbox per run: wall time on the harness's clock, host cores used
//             (the cgroup's CPU seconds the target reports ÷ wall), and the CPU time the program
//             reads INSIDE the sandbox (MEAS-1, RES-1, SCN-5)
//   revert    six tasks in one sandbox, each followed by a revert and the first request after it
//             (MEAS-2, SNAP-4)
//   suspend   suspend and resume of a sandbox holding 64 MiB .. 1 GiB (MEAS-3, SNAP-3)
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>

#include "commands/cli.h"
#include "commands/reproduce.h"
#include "commands/run_common.h"
#include "common/json_strict.h"
#include "common/stats.h"
#include "common/subprocess.h"
#include "drivers/target.h"
#include "host/host_facts.h"
#include "report/chart.h"
#include "report/render.h"
#include "report/report.h"
#include "run/mirror_fixture.h"

namespace sandcheck {
namespace {

using nlohmann::json;
using namespace repro;

constexpr const char* kHelp = R"(usage: sandcheck reproduce throttle|revert|suspend [OPTIONS]

The demo's measurements (seeds/004), through the driver, per backend:
  throttle   fixed CPU work at 1000, 500 and 250 millicores, 1 and 4 threads, 3 runs each:
             wall time (harness clock), host cores used (cgroup CPU seconds ÷ wall, from the
             target's usage report) and the CPU time read inside the sandbox; table + SVG
  revert     six tasks, each followed by a revert and the first request after it; table + SVG
  suspend    suspend and resume of a sandbox holding 64 MiB .. 1 GiB; table + SVG

common options:
  --target T        reference (default), adapter:PATH, http://HOST:PORT, unix:PATH
  --backend B       only this backend (default: every backend the target offers)
  --out DIR         default reports/runs/<run-id>-<what>
  --token T, --adapter-timeout S   as for sandcheck run
throttle:  --work N (millions of iterations of sbx-cpu in all, split over the threads;
           default 900, about 1.5 s of one core here) --millicores 1000,500,250
           --threads 1,4 --runs 3
revert:    --rounds 6
suspend:   --sizes 64,128,256,512,1024 (MiB) --runs 3
Exit codes: 0 done, 2 bad usage, 3 the target failed.
)";

// ------------------------------------------------------------------------------------------
// throttle (MEAS-1)

struct ThrottleOptions {
  int64_t work = 900;
  std::vector<int64_t> millicores = {1000, 500, 250}, threads = {1, 4};
  int64_t runs = 3;
};

sbx::StatusOr<json> Throttle(Session& s, const std::string& backend, const ThrottleOptions& o,
                             std::string* md,
                             std::vector<std::pair<std::string, std::string>>* svgs) {
  static const std::regex kOut(R"(wall_seconds ([0-9.]+) cpu_seconds ([0-9.]+) threads ([0-9]+))");
  json rows = json::array();
  std::string table = "| millicores | threads | wall time (harness) | wall ÷ wall at " +
                      std::to_string(o.millicores.front()) +
                      "m | host cores used | CPU time read inside | inside ÷ host "
                      "|\n|---|---|---|---|---|---|---|\n";
  std::map<int64_t, double> base_wall;  // per thread count: mean wall at the first millicores
  int total = static_cast<int>(o.millicores.size() * o.threads.size() * o.runs), done = 0;
  for (int64_t mc : o.millicores) {
    for (int64_t th : o.threads) {
      std::vector<double> wall, cores, inside, host_cpu, ratio;
      json runs = json::array();
      int64_t ran_threads = th;  // what the tool says it ran (a WASI module runs one)
      for (int64_t r = 0; r < o.runs && !Interrupted() && ran_threads == th; ++r) {
        Progress("\r[%d/%d] %s: %lld millicores, %lld thread(s), run %lld   ", ++done, total,
                 Label(backend).c_str(), static_cast<long long>(mc), static_cast<long long>(th),
                 static_cast<long long>(r + 1));
        ASSIGN_OR_RETURN(std::string id, s.t_.Create(s.Request(backend, {{"cpu_millicores", mc}})));
        std::string cmd = fmt::format("sbx-cpu -n {} -t {}", std::max<int64_t>(1, o.work / th), th);
        auto t = s.Exec(id, cmd, 600);
        auto d = s.t_.Destroy(id);
        (void)s.t_.Settle();
        if (!t.ok()) return t.status();
        if (!d.ok()) return d.status();
        std::smatch m;
        if (t->a.status != "ok" || t->a.exit_code != 0 ||
            !std::regex_search(t->a.stdout_text, m, kOut)) {
          return sbx::Internal(
              fmt::format("'{}' did not run: status {}, exit {}, stdout '{}', "
                          "stderr '{}'",
                          cmd, t->a.status, t->a.exit_code, t->a.stdout_text.substr(0, 200),
                          t->a.stderr_text.substr(0, 200)));
        }
        ran_threads = std::stoll(m[3]);
        if (ran_threads != th) break;  // the row would not measure what it says
        double in_cpu = std::stod(m[2]);
        double host = UsageCpu(t->a);
        wall.push_back(t->wall);
        inside.push_back(in_cpu);
        if (host > 0) {
          host_cpu.push_back(host);
          cores.push_back(host / t->wall);
          ratio.push_back(in_cpu / host);
        }
        runs.push_back({{"wall_s", t->wall},
                        {"wall_inside_s", std::stod(m[1])},
                        {"cpu_inside_s", in_cpu},
                        {"cpu_host_s", host > 0 ? json(host) : json(nullptr)},
                        {"reported_seconds", t->a.seconds},
                        {"command", cmd}});
      }
      if (ran_threads != th) {
        const std::string why = fmt::format(
            "skipped: the target's sbx-cpu ran {} thread(s), not {}{}", ran_threads, th,
            backend == "wasm" ? " (a WASI module has no threads)" : "");
        table += fmt::format("| {} | {} | {} | | | | |\n", mc, th, why);
        rows.push_back({{"millicores", mc}, {"threads", th}, {"skip", why}});
        done += static_cast<int>(o.runs) - 1;
        continue;
      }
      if (mc == o.millicores.front()) base_wall[th] = Mean(wall);
      double rel = base_wall[th] > 0 ? Mean(wall) / base_wall[th] : 0;
      table += fmt::format(
          "| {} | {} | {} | {} | {} | {} | {} |\n", mc, th, RangeS(wall),
          rel > 0 ? fmt::format("{:.2f}× (cap alone: {:.2f}×)", rel,
                                static_cast<double>(o.millicores.front()) / static_cast<double>(mc))
                  : "-",
          cores.empty() ? "- (not reported)" : Range(cores, [](double x) { return S(x); }),
          RangeS(inside), ratio.empty() ? "-" : Range(ratio, [](double x) { return S(x) + "×"; }));
      rows.push_back({{"millicores", mc},
                      {"threads", th},
                      {"wall_s", wall},
                      {"host_cores", cores},
                      {"cpu_inside_s", inside},
                      {"cpu_host_s", host_cpu},
                      {"runs", runs}});
    }
  }
  Progress("\r%80s\r", "");
  *md += table;
  // Charts: wall time per millicores (bars per thread count), and CPU seconds host vs inside.
  std::vector<std::string> groups;
  for (int64_t mc : o.millicores) groups.push_back(std::to_string(mc) + "m");
  std::vector<BarSeries> walls, cpu;
  for (int64_t th : o.threads) {
    BarSeries w{fmt::format("{} thread{}: wall s", th, th == 1 ? "" : "s"), {}, {}, {}};
    BarSeries host{fmt::format("{}T host CPU s (cgroup)", th), {}, {}, {}};
    BarSeries in{fmt::format("{}T CPU s read inside", th), {}, {}, {}};
    bool measured = false;
    for (const auto& r : rows) {
      if (r["threads"] != th) continue;
      const bool skip = r.contains("skip");  // an empty bar
      measured = measured || !skip;
      auto v = skip ? std::vector<double>{} : r["wall_s"].get<std::vector<double>>();
      auto h = skip ? std::vector<double>{} : r["cpu_host_s"].get<std::vector<double>>();
      auto i = skip ? std::vector<double>{} : r["cpu_inside_s"].get<std::vector<double>>();
      auto add = [](BarSeries& b, const std::vector<double>& x) {
        b.value.push_back(Mean(x));
        b.lo.push_back(x.empty() ? 0 : *std::min_element(x.begin(), x.end()));
        b.hi.push_back(x.empty() ? 0 : *std::max_element(x.begin(), x.end()));
      };
      add(w, v);
      add(host, h);
      add(in, i);
    }
    if (!measured) continue;  // not a series at all (every row skipped)
    walls.push_back(w);
    cpu.push_back(host);
    cpu.push_back(in);
  }
  svgs->push_back({"throttle-wall",
                   RenderBarChartSvg(fmt::format("Fixed CPU work under a CPU cap — wall time ({})",
                                                 Label(backend)),
                                     "seconds (mean, whisker min–max)", groups, walls)});
  svgs->push_back({"throttle-cpu",
                   RenderBarChartSvg(
                       fmt::format("CPU seconds: the cgroup's vs read inside ({})", Label(backend)),
                       "CPU seconds (mean, whisker min–max)", groups, cpu)});
  return json{{"backend", Label(backend)}, {"rows", rows}};
}

// ------------------------------------------------------------------------------------------
// revert (MEAS-2)

sbx::StatusOr<json> Revert(Session& s, const std::string& backend, int64_t rounds, std::string* md,
                           std::vector<std::pair<std::string, std::string>>* svgs) {
  if (!s.info_.Has("revert")) {
    *md += "skipped: the target does not offer revert\n";
    return json{{"backend", Label(backend)}, {"skip", "the target does not offer revert"}};
  }
  // The demo's template: 500 millicores, 256 MiB.
  ASSIGN_OR_RETURN(std::string id,
                   s.t_.Create(s.Request(
                       backend, {{"cpu_millicores", 500}, {"memory_bytes", int64_t{256} << 20}})));
  json rows = json::array();
  std::vector<double> rv, rv_t, first, total;
  std::string table =
      "| # | task | revert (harness) | revert (target) | first request after | revert + first "
      "request | files in /work after |\n|---|---|---|---|---|---|---|\n";
  sbx::Status failure;
  for (int64_t i = 0; i < rounds && !Interrupted(); ++i) {
    Progress("\r[%lld/%lld] %s: task, revert, first request   ", static_cast<long long>(i + 1),
             static_cast<long long>(rounds), Label(backend).c_str());
    // A wasm sandbox runs a module's command, not a shell: the same task with the fixture
    // module's tools (docs/wasm.md): a hidden file and a directory with a file left in /work.
    std::string task =
        backend == "wasm"
            ? fmt::format("sbx-canary plant round{0}", i + 1)
            : fmt::format(
                  "mkdir -p /work/d{0} && echo task {0} > /work/d{0}/out && echo x > /work/f{0} "
                  "&& ls /work | wc -l",
                  i + 1);
    auto t = s.Exec(id, task, 30);
    if (!t.ok()) {
      failure = t.status();
      break;
    }
    auto r0 = Clock::now();
    auto r = s.t_.Revert(id);
    double rw = SecondsSince(r0);
    if (!r.ok()) {
      failure = r.status();
      break;
    }
    auto f = s.Exec(id, backend == "wasm" ? "count /work" : "find /work -mindepth 1 | wc -l", 30);
    if (!f.ok()) {
      failure = f.status();
      break;
    }
    std::string files = f->a.stdout_text;
    while (!files.empty() && (files.back() == '\n' || files.back() == ' ')) files.pop_back();
    rv.push_back(rw);
    if (r->seconds >= 0) rv_t.push_back(r->seconds);
    first.push_back(f->wall);
    total.push_back(rw + f->wall);
    table += fmt::format("| {} | exit {}, {} s | {} | {} | {} | {} | {} |\n", i + 1, t->a.exit_code,
                         S(t->wall), Ms(rw), r->seconds >= 0 ? Ms(r->seconds) : "-", Ms(f->wall),
                         Ms(rw + f->wall), files);
    rows.push_back({{"task_exit", t->a.exit_code},
                    {"task_s", t->wall},
                    {"revert_s", rw},
                    {"revert_reported_s", r->seconds >= 0 ? json(r->seconds) : json(nullptr)},
                    {"first_request_s", f->wall},
                    {"files_after", files}});
  }
  Progress("\r%80s\r", "");
  (void)s.t_.Destroy(id);
  (void)s.t_.Settle();
  if (!failure.ok()) return failure;
  table += fmt::format(
      "\nRevert {} on the harness clock ({} as the target reports it); first request after it "
      "{}; a clean sandbox for the next task costs {} in all. The demo (gVisor, CLI): revert "
      "0.43–0.51 s, first request 0.44–0.46 s, about one second in all.\n",
      RangeMs(rv), RangeMs(rv_t), RangeMs(first), RangeMs(total));
  *md += table;
  std::vector<std::string> groups;
  BarSeries a{"revert (harness)", {}, {}, {}}, b{"first request after", {}, {}, {}};
  for (size_t i = 0; i < rv.size(); ++i) {
    groups.push_back("#" + std::to_string(i + 1));
    a.value.push_back(rv[i] * 1e3);
    b.value.push_back(first[i] * 1e3);
  }
  svgs->push_back({"revert", RenderBarChartSvg(fmt::format("Revert and the first request after "
                                                           "it ({})",
                                                           Label(backend)),
                                               "milliseconds", groups, {a, b})});
  return json{{"backend", Label(backend)}, {"rows", rows}};
}

}  // namespace

int CmdReproduce(const std::vector<std::string>& args) {
  auto parsed = ParseArgs(args, {{"target"},
                                 {"backend"},
                                 {"out"},
                                 {"token"},
                                 {"adapter-timeout"},
                                 {"work"},
                                 {"millicores"},
                                 {"threads"},
                                 {"runs"},
                                 {"rounds"},
                                 {"sizes"}});
  if (!parsed.ok()) return UsageError("reproduce", parsed.status().message());
  const ParsedArgs& a = *parsed;
  if (a.help) {
    std::fputs(kHelp, stdout);
    return kExitPass;
  }
  if (a.positional.size() != 1)
    return UsageError("reproduce", "say what to reproduce: throttle, revert or suspend");
  std::string what = a.positional[0];
  if (what != "throttle" && what != "revert" && what != "suspend")
    return UsageError("reproduce", "'" + what + "': throttle, revert or suspend");
  auto allowed = [&](std::initializer_list<const char*> keys) -> std::string {
    for (const char* k : {"work", "millicores", "threads", "runs", "rounds", "sizes"}) {
      bool ok = false;
      for (const char* a2 : keys) ok = ok || std::string(a2) == k;
      if (!ok && a.Has(k)) return fmt::format("--{} does not apply to {}", k, what);
    }
    return "";
  };
  std::string bad = what == "throttle" ? allowed({"work", "millicores", "threads", "runs"})
                    : what == "revert" ? allowed({"rounds"})
                                       : allowed({"sizes", "runs"});
  if (!bad.empty()) return UsageError("reproduce", bad);
  ThrottleOptions to;
  int64_t rounds = 6, runs = 3;
  std::vector<int64_t> sizes = {64, 128, 256, 512, 1024};
  if (a.Has("work")) {
    auto v = ParseList(a.Get("work"), 1, 1000000, "work");
    if (!v.ok() || v->size() != 1) return UsageError("reproduce", "--work: one integer 1..1000000");
    to.work = (*v)[0];
  }
  if (a.Has("millicores")) {
    auto v = ParseList(a.Get("millicores"), 10, 1024000, "millicores");
    if (!v.ok()) return UsageError("reproduce", v.status().message());
    to.millicores = *v;
  }
  if (a.Has("threads")) {
    auto v = ParseList(a.Get("threads"), 1, 64, "threads");
    if (!v.ok()) return UsageError("reproduce", v.status().message());
    to.threads = *v;
  }
  if (a.Has("runs")) {
    auto v = ParseList(a.Get("runs"), 1, 100, "runs");
    if (!v.ok() || v->size() != 1) return UsageError("reproduce", "--runs: one integer 1..100");
    to.runs = runs = (*v)[0];
  }
  if (a.Has("rounds")) {
    auto v = ParseList(a.Get("rounds"), 1, 1000, "rounds");
    if (!v.ok() || v->size() != 1) return UsageError("reproduce", "--rounds: one integer 1..1000");
    rounds = (*v)[0];
  }
  if (a.Has("sizes")) {
    auto v = ParseList(a.Get("sizes"), 1, 1 << 20, "sizes");
    if (!v.ok()) return UsageError("reproduce", v.status().message());
    sizes = *v;
  }
  auto parsed_topts = TargetOptionsFromArgs(a);
  if (!parsed_topts.ok()) return UsageError("reproduce", parsed_topts.status().message());
  TargetOptions topts = *parsed_topts;
  auto target = MakeTarget(topts);
  if (!target.ok()) {
    return UsageError(
        "reproduce", target.status().message(),
        target.status().code() == sbx::Code::kInvalidArgument ? kExitUsage : kExitTarget);
  }
  auto info = (*target)->Info();
  if (!info.ok()) return UsageError("reproduce", info.status().ToString(), kExitTarget);
  std::string err;
  std::vector<std::string> backends = Backends(*info, a.Get("backend"), &err);
  if (!err.empty()) return UsageError("reproduce", err);
  std::string run_id = NewRunId();
  std::string out_dir = a.Get("out", "reports/runs/" + run_id + "-" + what);
  if (sbx::Status st = MakeDirs(out_dir); !st.ok())
    return UsageError("reproduce", st.message(), kExitTarget);
  InterruptOnSignals();

  Session session(**target, *info);
  json host = HostFacts();
  std::string md = fmt::format(
      "# sandcheck reproduce {}: {} {}\n\nHost: {} · {} · kernel {} · {} CPUs · cgroup {}\n", what,
      info->name, info->version, host.value("hostname", ""), host.value("os", ""),
      host.value("kernel", ""), host.value("cpus", 0), host.value("cgroup", ""));
  if (what == "throttle") {
    md += fmt::format(
        "\nFixed work: `sbx-cpu` {} million iterations in all (split over the threads), {} runs "
        "per row, one fresh sandbox per run. Wall time is the harness's clock around the exec; "
        "host cores used = the cgroup's CPU seconds (the target's usage report) ÷ wall; the CPU "
        "time read inside is what the program measured itself (never trust it for a verdict).\n",
        to.work, to.runs);
  }
  json out = {{"what", what},
              {"run_id", run_id},
              {"target", {{"spec", topts.spec}, {"name", info->name}, {"version", info->version}}},
              {"host", host},
              {"backends", json::array()}};
  std::vector<std::pair<std::string, std::string>> svgs;
  int rc = kExitPass;
  for (const std::string& b : backends) {
    if (Interrupted()) break;
    md += fmt::format("\n## {} backend\n\n", Label(b));
    std::vector<std::pair<std::string, std::string>> these;
    sbx::StatusOr<json> r = what == "throttle" ? Throttle(session, b, to, &md, &these)
                            : what == "revert" ? Revert(session, b, rounds, &md, &these)
                                               : Suspend(session, b, sizes, runs, &md, &these);
    if (!r.ok()) {
      md += "failed: " + r.status().ToString() + "\n";
      out["backends"].push_back({{"backend", Label(b)}, {"error", r.status().ToString()}});
      rc = kExitTarget;
      continue;
    }
    out["backends"].push_back(*r);
    for (auto& [name, svg] : these) {
      std::string file = fmt::format("{}-{}.svg", name, Label(b));
      md += fmt::format("\n![{}]({})\n", name, file);
      svgs.push_back({file, svg});
    }
  }
  std::fputs(md.c_str(), stdout);
  for (const auto& [file, content] : svgs) {
    if (sbx::Status st = WriteFile(out_dir + "/" + file, content); !st.ok())
      return UsageError("reproduce", st.message(), kExitTarget);
  }
  if (sbx::Status st = WriteFile(out_dir + "/" + what + ".md", md); !st.ok())
    return UsageError("reproduce", st.message(), kExitTarget);
  if (sbx::Status st = WriteFile(out_dir + "/" + what + ".json", DumpJson(out)); !st.ok())
    return UsageError("reproduce", st.message(), kExitTarget);
  std::printf("\nwritten: %s/%s.md, %s.json", out_dir.c_str(), what.c_str(), what.c_str());
  for (const auto& [file, content] : svgs) std::printf(", %s", file.c_str());
  std::printf("\n");
  return rc;
}

}  // namespace sandcheck
