#include "run/command_lines.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "common/process.h"
#include "common/stats.h"
#include "common/subprocess.h"
#include "drivers/local_sandboxd.h"
#include "run/floor_containers.h"

namespace sandcheck {
namespace {

using nlohmann::json;

constexpr double kCallTimeoutS = 60;  // one timed command (runsc do is ≈ 0.25 s here)
constexpr double kReapTimeoutS = 10;  // what is left naming the scratch directory going away

double TimeRow(const CommandLineSpec& c, bool hide_unified, std::string* why) {
  return TimedRun(ProcessSpec{c.argv, c.private_cgroup_view}, hide_unified, why, kCallTimeoutS);
}

}  // namespace

std::vector<CommandLineRow> MeasureCommandLines(const CommandLineOptions& o) {
  auto progress = [&](const std::string& s) {
    if (o.progress) o.progress(s);
  };
  std::vector<CommandLineRow> rows;
  auto add = [&](CommandLineSpec spec, std::string skip = "") {
    rows.push_back({std::move(spec), {}, std::move(skip)});
  };
  bool hide_unified = HybridUnified();
  // State roots and the bundle in one scratch directory with a short path: runsc's sockets live below its --root, and a unix
  // socket's path has 108 bytes at most (a pytest TMPDIR made runsc fail to start).
  std::string work;
  for (std::string base : {"/var/tmp/sandcheck-cli-XXXXXX", "/tmp/sandcheck-cli-XXXXXX"}) {
    if (::mkdtemp(base.data())) {
      work = base;
      break;
    }
  }
  std::string tmp_dir = "/tmp";  // runsc's (Spawn gives it no TMPDIR)
  std::set<std::string> tmp_before;
  {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(tmp_dir, ec))
      tmp_before.insert(e.path().filename());
  }

  add({"fork-exec", "fork+exec /bin/true", "floor", "", {"/bin/true"}});
  if (std::string bwrap = FindOnPath("bwrap"); !bwrap.empty()) {
    add({"bwrap", "bwrap --unshare-all /bin/true", "oneshot", "",
         {bwrap, "--unshare-all", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
          "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc",
          "--dev", "/dev", "/bin/true"}});
  } else {
    add({"bwrap", "bwrap --unshare-all /bin/true", "oneshot", "", {}}, "no bwrap on PATH");
  }
  std::string runsc = FindOnPath("runsc"), runsc_platform, runsc_why;
  if (runsc.empty()) runsc_why = "no runsc on PATH";
  if (!runsc.empty() && !work.empty()) {
    runsc_platform = RunscPlatform(runsc, work, &runsc_why);
    runsc_why = runsc_platform.empty() ? "runsc do fails on every platform: " + runsc_why : "";
  }
  std::vector<std::string> runsc_base = {runsc, "--root", work + "/runsc",
                                         "--platform=" + runsc_platform, "--network=none",
                                         "--ignore-cgroups"};
  add({"runsc-do", fmt::format("runsc do /bin/true ({})", runsc_platform.empty() ? "-" : runsc_platform),
       "oneshot", "gvisor",
       {runsc, "--root", work + "/runsc-do", "--platform=" + runsc_platform, "--network=none", "do",
        "/bin/true"}},
      runsc_why);
  if (!o.sandboxctl.empty()) {
    add({"sandboxctl-info", "sandboxctl info", "oneshot", "", {o.sandboxctl, "info"}});
    add({"sandboxctl-run", "sandboxctl run -- true", "oneshot", "default",
         {o.sandboxctl, "run", "--", "true"}});
    for (const std::string& b : o.backends) {
      add({"sandboxctl-run-" + b, fmt::format("sandboxctl run --backend {} -- true", b), "oneshot",
           b, {o.sandboxctl, "run", "--backend", b, "--", "true"}});
    }
  }
  // The same commands through a local sandboxd's warm pool (sandboxctl --server).
  LocalSandboxd daemon;
  if (!o.sandboxctl.empty() && !o.sandboxd.empty()) {
    if (work.empty()) {
      daemon.set_error("no scratch directory");
    } else {
      progress("starting a local sandboxd for the sandboxctl --server rows");
      daemon.Start(o.sandboxd, work + "/sandboxd");
    }
    std::vector<std::string> base = {o.sandboxctl, "--server",     "unix:" + daemon.socket(),
                                     "--token",    daemon.token(), "run"};
    auto server_row = [&](const std::string& id, const std::string& b) {
      CommandLineSpec spec{id,
                           b.empty() ? "sandboxctl --server (local sandboxd) run -- true"
                                     : fmt::format("sandboxctl --server (local sandboxd) run "
                                                   "--backend {} -- true", b),
                           "oneshot", b.empty() ? "default" : b, base};
      if (!b.empty()) {
        spec.argv.push_back("--backend");
        spec.argv.push_back(b);
      }
      spec.argv.push_back("--");
      spec.argv.push_back("true");
      add(spec, daemon.error());
    };
    server_row("sandboxctl-server-run", "");
    for (const std::string& b : o.backends) server_row("sandboxctl-server-run-" + b, b);
  }

  // The runtime-exec floors: a container of each runtime, started by the harness.
  std::string bundle_error = work.empty() ? "no scratch directory: " + std::string(std::strerror(errno))
                                          : MakeBundle(work + "/bundle");
  std::vector<FloorContainer> containers;
  std::string crun = FindOnPath("crun");
  {
    FloorContainer fc{"sandcheck-floor-crun", {crun, "--root", work + "/crun", "--cgroup-manager=disabled"},
                      true};
    CommandLineSpec spec{"crun-exec", "crun exec ID /bin/true", "runtime-exec", "oci", fc.runtime, true};
    std::string skip = crun.empty() ? "no crun on PATH" : bundle_error;
    if (skip.empty()) {
      progress("starting a crun container for the crun exec floor");
      StartContainer(fc, work + "/bundle", hide_unified);
      skip = fc.error;
    }
    for (const char* a : {"exec", "sandcheck-floor-crun", "/bin/true"}) spec.argv.push_back(a);
    add(spec, skip);
    containers.push_back(std::move(fc));
  }
  {
    FloorContainer fc{"sandcheck-floor-runsc", runsc_base, false};
    CommandLineSpec spec{"runsc-exec",
                         fmt::format("runsc exec ID /bin/true ({})", runsc_platform.empty() ? "-" : runsc_platform),
                         "runtime-exec", "gvisor", runsc_base, false};
    std::string skip = !runsc_why.empty() ? runsc_why : bundle_error;
    if (skip.empty()) {
      progress("starting a runsc container for the runsc exec floor");
      StartContainer(fc, work + "/bundle", hide_unified);
      skip = fc.error;
    }
    for (const char* a : {"exec", "sandcheck-floor-runsc", "/bin/true"}) spec.argv.push_back(a);
    add(spec, skip);
    containers.push_back(std::move(fc));
  }

  // Warm-up (caches, probe answers): a row whose warm-up fails is reported, not measured.
  auto through_daemon = [](const CommandLineRow& r) {
    return r.spec.id.rfind("sandboxctl-server-", 0) == 0;
  };
  auto settle = [&](CommandLineRow& r) {
    if (through_daemon(r) && !daemon.WaitIdle() && r.skip.empty())
      r.skip = "the local sandboxd did not finish its background work (reclaim, pool refill) "
               "within its bound";
  };
  for (auto& r : rows) {
    if (!r.skip.empty()) continue;
    std::string why;
    if (TimeRow(r.spec, hide_unified, &why) < 0) r.skip = "its warm-up run failed: " + why;
    settle(r);
  }
  std::vector<size_t> live;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].skip.empty()) live.push_back(i);
  for (int round = 0; round < o.rounds && !live.empty() && !Interrupted(); ++round) {
    size_t k = static_cast<size_t>(round) % live.size();
    for (size_t j = 0; j < live.size(); ++j) {
      CommandLineRow& r = rows[live[(k + j) % live.size()]];
      if (!r.skip.empty()) continue;
      std::string why;
      double s = TimeRow(r.spec, hide_unified, &why);
      if (s < 0) {
        r.skip = fmt::format("failed in round {}: {}", round + 1, why);
        r.samples.clear();
      } else {
        r.samples.push_back(s);
        settle(r);
      }
    }
    progress(fmt::format("command lines: round {}/{}", round + 1, o.rounds));
  }
  for (auto& fc : containers) StopContainer(fc, hide_unified);
  daemon.Stop();
  if (!work.empty()) {
    KillProcessesNaming(work, kReapTimeoutS);
    std::error_code ec;
    std::filesystem::remove_all(work, ec);
  }
  // runsc do leaves an empty runsc-do<N> directory in /tmp: ours to remove.
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(tmp_dir, ec)) {
    std::string n = e.path().filename();
    if (n.rfind("runsc-do", 0) == 0 && !tmp_before.count(n)) std::filesystem::remove_all(e.path(), ec);
  }
  return rows;
}

json CommandLinesJson(const std::vector<CommandLineRow>& rows, int rounds, const json& comparison,
                      const std::string& ours_target) {
  std::map<std::string, const CommandLineRow*> by_id;
  for (const auto& r : rows)
    if (r.skip.empty() && !r.samples.empty()) by_id[r.spec.id] = &r;
  auto p = [&](const std::string& id, double q) {
    auto it = by_id.find(id);
    return it == by_id.end() ? 0.0 : Percentile(it->second->samples, q);
  };
  auto ratio = [](double a, double b) { return a > 0 && b > 0 ? json(a / b) : json(nullptr); };
  json out = {{"rounds", rounds}, {"rows", json::array()}, {"warm_vs_runtime_cli", json::array()},
              {"goals", json::array()}};
  double bwrap = p("bwrap", 50), runsc_do = p("runsc-do", 50);
  double floor50 = p("fork-exec", 50), floor95 = p("fork-exec", 95);
  for (const auto& r : rows) {
    json row = {{"id", r.spec.id}, {"label", r.spec.label}, {"role", r.spec.role},
                {"backend", r.spec.backend}};
    if (!r.skip.empty() || r.samples.empty()) {
      row["skip"] = r.skip.empty() ? "no samples (interrupted)" : r.skip;
      out["rows"].push_back(row);
      continue;
    }
    double p50 = Percentile(r.samples, 50), p95 = Percentile(r.samples, 95);
    row["count"] = r.samples.size();
    row["p50"] = p50;
    row["p95"] = p95;
    row["samples"] = r.samples;
    row["p50_over_bwrap"] = ratio(p50, bwrap);
    bool gvisor_like = r.spec.backend == "gvisor";
    row["p50_over_runsc_do"] = gvisor_like ? ratio(p50, runsc_do) : json(nullptr);
    row["p50_over_floor"] = ratio(p50, floor50);
    row["p95_over_floor"] = ratio(p95, floor95);
    out["rows"].push_back(row);
  }
  // Each container backend's warm exec against the bare runtime CLI it would otherwise run.
  for (const auto& r : rows) {
    if (r.spec.role != "runtime-exec" || !by_id.count(r.spec.id)) continue;
    for (const auto& tg : comparison.value("targets", json::array())) {
      if (tg.value("id", "") != "warm-start") continue;
      for (const auto& row : tg["rows"]) {
        if (row.value("target", "") != ours_target || row.value("backend", "") != r.spec.backend ||
            !row["p50"].is_number())
          continue;
        double w50 = row["p50"], w95 = row["p95"];
        double c50 = p(r.spec.id, 50), c95 = p(r.spec.id, 95);
        out["warm_vs_runtime_cli"].push_back({{"backend", r.spec.backend},
                                              {"warm_p50", w50},
                                              {"warm_p95", w95},
                                              {"cli", r.spec.label},
                                              {"cli_p50", c50},
                                              {"cli_p95", c95},
                                              {"p50_ratio", ratio(w50, c50)},
                                              {"p95_ratio", ratio(w95, c95)}});
      }
    }
  }
  // Issue 16's goals for the one-shot CLI (p50 ÷ p50, same run): no slower than the tool a user
  // would otherwise type.
  auto goal = [&](const std::string& text, const std::string& ours, const std::string& theirs) {
    if (!by_id.count(ours) || !by_id.count(theirs)) return;
    double r = p(ours, 50) / p(theirs, 50);
    out["goals"].push_back({{"goal", text}, {"ratio", r}, {"met", r <= 1.0}});
  };
  goal("`sandboxctl run -- true` no slower than `bwrap --unshare-all` (p50)", "sandboxctl-run",
       "bwrap");
  goal("`sandboxctl run --backend gvisor -- true` no slower than `runsc do` (p50)",
       "sandboxctl-run-gvisor", "runsc-do");
  goal("`sandboxctl --server` (a local sandboxd's warm pool) `run -- true` no slower than "
       "`bwrap --unshare-all` (p50)",
       "sandboxctl-server-run", "bwrap");
  goal("`sandboxctl --server` (a local sandboxd's warm pool) `run --backend gvisor -- true` no "
       "slower than `runsc do` (p50)",
       "sandboxctl-server-run-gvisor", "runsc-do");
  return out;
}

}  // namespace sandcheck
