#include "run/load_runner.h"

#include <dirent.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "common/clock.h"
#include "common/stats.h"
#include "common/subprocess.h"
#include "host/orphan_census.h"
#include "report/render.h"
#include "run/nfr_runner.h"

namespace sandcheck {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

int CountDirsBelow(const std::string& dir, int depth) {
  if (depth > 32) return 0;
  int n = 0;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
    ++n;
    n += CountDirsBelow(dir + "/" + e->d_name, depth + 1);
  }
  ::closedir(d);
  return n;
}

// Distinct namespaces of a kind over every process of the host (plus /run/netns bind mounts).
int CountNamespaces(const char* kind) {
  std::set<std::string> seen;
  DIR* d = ::opendir("/proc");
  if (!d) return 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char buf[64];
    std::string link = fmt::format("/proc/{}/ns/{}", e->d_name, kind);
    ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
    if (n > 0) seen.insert(std::string(buf, static_cast<size_t>(n)));
  }
  ::closedir(d);
  if (std::string(kind) == "net") {
    for (const auto& name : ListDir("/run/netns")) seen.insert("bind:" + name);
  }
  return static_cast<int>(seen.size());
}

// Interfaces of this (the root) network namespace: a veth left attached here shows.
int CountInterfaces() { return static_cast<int>(ListDir("/sys/class/net").size()); }

// Processes of this host whose command line contains `needle` (the run's token prefix).
json ProcessesHolding(const std::string& needle) {
  json found = json::array();
  DIR* d = ::opendir("/proc");
  if (!d) return {{"needle", needle}, {"found", found}};
  pid_t self = ::getpid();
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    if (std::atoi(e->d_name) == self) continue;
    FILE* f = std::fopen(fmt::format("/proc/{}/cmdline", e->d_name).c_str(), "r");
    if (!f) continue;
    std::string cmd;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && cmd.size() < 65536) cmd.append(buf, n);
    std::fclose(f);
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(needle) != std::string::npos)
      found.push_back({{"pid", std::atoi(e->d_name)}, {"cmdline", cmd.substr(0, 200)}});
  }
  ::closedir(d);
  return {{"needle", needle}, {"found", found}};
}

struct Tally {
  std::mutex mu;
  std::vector<double> latencies;  // ok runs, harness clock, first attempt to answer
  int ok = 0, wrong = 0, lost = 0, refusals = 0, refused_runs = 0;
  std::vector<std::string> wrong_examples, lost_examples;
  void Example(std::vector<std::string>& v, std::string s) {
    if (v.size() < 5) v.push_back(std::move(s));
  }
};

std::string Cut(std::string s, size_t n) {
  if (s.size() > n) s = s.substr(0, n) + "...";
  for (char& c : s) {
    if (c == '\n' || c == '\t') c = ' ';
  }
  return s;
}

json CheckJson(const std::string& id, const std::string& title, std::vector<std::string> reqs,
               const std::string& outcome, const std::string& reason, const json& evidence,
               Profile profile) {
  bool blocking = outcome == "fail" || outcome == "error" ||
                  (outcome == "skip" && profile == Profile::kCertify);
  std::string final_outcome = outcome == "skip" && profile == Profile::kCertify ? "fail" : outcome;
  return {{"id", id},
          {"scenario", "load"},
          {"task", nullptr},
          {"title", title},
          {"requirements", reqs},
          {"level", "MUST"},
          {"kind", "load"},
          {"outcome", final_outcome},
          {"raw_outcome", outcome},
          {"reason", final_outcome != outcome ? "certify: a skip is a failure: " + reason : reason},
          {"expected", nullptr},
          {"blocking", blocking},
          {"seconds", 0.0},
          {"evidence", evidence}};
}

}  // namespace

json HostObjectCensus() {
  int cgroups = 0;
  for (const auto& m : CgroupMounts()) cgroups += CountDirsBelow(m.path, 0);
  return {{"cgroup_dirs", cgroups},
          {"net_namespaces", CountNamespaces("net")},
          {"mount_namespaces", CountNamespaces("mnt")},
          {"interfaces", CountInterfaces()}};
}

json TargetResources(const TargetInfo& info) {
  const json& raw = info.raw;
  if (!raw.is_object() || !raw.contains("capacity") || !raw["capacity"].is_object()) return nullptr;
  const json& c = raw["capacity"];
  json out = json::object();
  for (const char* k : {"open_fds", "rss_bytes"}) {
    if (c.contains(k) && c[k].is_number()) out[k] = c[k];
  }
  return out.empty() ? json(nullptr) : out;
}

LoadResult RunLoad(Target& target, const TargetInfo& info, const LoadOptions& o,
                   const std::string& run_id, LiveLog& log) {
  LoadResult out;
  json request = {{"template", "sandbox"}};
  if (!o.backend.empty()) request["backend"] = o.backend;
  if (!o.trust.empty()) request["trust"] = o.trust;
  if (!o.backend.empty() &&
      std::find(info.backends.begin(), info.backends.end(), o.backend) == info.backends.end()) {
    out.checks.push_back(CheckJson("load/no-lost", "no run lost under load", {"LC-9", "FAIL-1"},
                                   "skip",
                                   fmt::format("the target does not offer backend '{}'", o.backend),
                                   json::object(), o.profile));
    return out;
  }

  // One handle per client thread.
  std::vector<std::unique_ptr<Target>> clients;
  for (int i = 0; i < o.concurrency; ++i) {
    auto t = target.ForThread();
    if (!t.ok()) {
      out.errors.push_back("load: " + t.status().message());
      return out;
    }
    clients.push_back(std::move(*t));
  }
  // How a client runs one command: the target's one-shot, else create + exec + destroy.
  std::atomic<bool> one_shot{true};
  {
    auto probe = target.RunPooled(request, "true", o.timeout_s);
    if (!probe.ok() && probe.status().code() == sbx::Code::kUnsupported) one_shot = false;
  }
  const std::string prefix = fmt::format("sc-load-{}", run_id);
  Tally tally;
  std::atomic<int> next{0};
  auto phase = [&](int first, int count, bool counted) {
    next = first;
    std::atomic<int> done{0};
    auto client = [&](Target& t) {
      for (;;) {
        if (Interrupted()) return;
        int k = next++;
        if (k >= first + count) return;
        std::string token = fmt::format("{}-{}", prefix, k);
        std::string cmd = "echo " + token;
        auto t0 = Clock::now();
        std::string verdict, detail;
        int refusals = 0;
        for (;;) {
          sbx::StatusOr<ExecAnswer> a = sbx::Internal("not run");
          if (one_shot) {
            a = t.RunPooled(request, cmd, o.timeout_s);
          } else {
            auto id = t.Create(request);
            if (!id.ok()) {
              a = id.status();
            } else {
              a = t.Exec(*id, cmd, o.timeout_s);
              auto d = t.Destroy(*id);
              if (a.ok() && !d.ok()) a = d.status();
            }
          }
          if (!a.ok()) {
            verdict = "lost";
            detail = a.status().ToString();
            break;
          }
          if (a->status == "sandbox_unavailable" &&
              (a->http_status == 429 || a->http_status == 503) && refusals < o.max_retries) {
            ++refusals;
            double wait = a->extra.value("retry_after_s", 0.05);
            if (wait < 0) wait = 0.05;
            std::this_thread::sleep_for(std::chrono::duration<double>(std::min(wait, 1.0)));
            continue;
          }
          if (a->status == "ok" && a->exit_code == 0 && a->stdout_text == token + "\n") {
            verdict = "ok";
          } else if (a->status == "ok" && a->exit_code == 0) {
            verdict = "wrong";
            detail = fmt::format("{} answered stdout '{}'", token, Cut(a->stdout_text, 80));
          } else {
            verdict = "lost";
            detail = fmt::format(
                "{}: status {} exit {} http {} {}", token, a->status, a->exit_code, a->http_status,
                Cut(a->extra.contains("error") ? a->extra["error"].dump() : a->stderr_text, 160));
          }
          break;
        }
        double s = SecondsSince(t0);
        ++done;
        if (!counted) continue;
        std::lock_guard lock(tally.mu);
        tally.refusals += refusals;
        if (refusals > 0) ++tally.refused_runs;
        if (verdict == "ok") {
          ++tally.ok;
          tally.latencies.push_back(s);
        } else if (verdict == "wrong") {
          ++tally.wrong;
          tally.Example(tally.wrong_examples, detail);
        } else {
          ++tally.lost;
          tally.Example(tally.lost_examples, detail);
        }
      }
    };
    std::vector<std::thread> threads;
    for (auto& c : clients) threads.emplace_back([&client, &c] { client(*c); });
    // Progress while the clients run (they end on their own; this only reports).
    while (done.load() < count && !Interrupted()) {
      log.Progress(
          fmt::format("load{}: {}/{} runs", counted ? "" : " warm-up", done.load(), count));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    for (auto& th : threads) th.join();
  };

  // Warm-up at the same concurrency: the pools fill to what this load asks of them, so the
  // "before" figures below are taken in the state the "after" ones will be.
  int warmup = std::max(2 * o.concurrency, 16);
  phase(0, warmup, false);
  (void)target.Settle();
  auto settled_info = [&]() -> TargetInfo {
    auto i = target.Info();
    return i.ok() ? *i : TargetInfo{};
  };
  json res_before = TargetResources(settled_info());
  json host_before = o.target_local ? HostObjectCensus() : json(nullptr);

  auto t0 = Clock::now();
  phase(warmup, o.runs, true);
  double wall = SecondsSince(t0);
  int answered = tally.ok + tally.wrong + tally.lost;
  double throughput = wall > 0 ? tally.ok / wall : 0;

  // After: back to where it was (an event: the counts equal the baseline; settle_s bounds the
  // wait only so that a leak ends the run).
  (void)target.Settle();
  json res_after, host_after;
  auto deadline = Clock::now() + std::chrono::duration<double>(o.settle_s);
  auto fds_ok = [&](const json& before, const json& after) {
    if (before.is_null() || after.is_null() || !before.contains("open_fds") ||
        !after.contains("open_fds"))
      return true;
    // A few descriptors of slack: connections of the clients themselves close asynchronously.
    return after["open_fds"].get<int>() <= before["open_fds"].get<int>() + 4;
  };
  auto host_ok = [&](const json& before, const json& after) {
    if (before.is_null()) return true;
    for (auto it = before.begin(); it != before.end(); ++it) {
      if (after[it.key()].get<int>() > it.value().get<int>()) return false;
    }
    return true;
  };
  for (;;) {
    res_after = TargetResources(settled_info());
    host_after = o.target_local ? HostObjectCensus() : json(nullptr);
    if ((fds_ok(res_before, res_after) && host_ok(host_before, host_after)) ||
        Clock::now() > deadline)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  json token_procs = o.target_local ? ProcessesHolding(prefix + "-") : json(nullptr);

  std::vector<double> lat = tally.latencies;
  json st = StatsJson(lat);
  st.erase("samples");  // they are in the measurement "load/run"
  out.load = {{"runs", o.runs},
              {"trust", o.trust.empty() ? json(nullptr) : json(o.trust)},
              {"concurrency", o.concurrency},
              {"warmup_runs", warmup},
              {"method", one_shot ? "run_pooled" : "create_exec_destroy"},
              {"answered", answered},
              {"ok", tally.ok},
              {"wrong", tally.wrong},
              {"lost", tally.lost},
              {"refusals", tally.refusals},
              {"refused_runs", tally.refused_runs},
              {"wall_seconds", wall},
              {"runs_per_second", throughput},
              {"latency", st},
              {"target_before", res_before},
              {"target_after", res_after},
              {"host_before", host_before},
              {"host_after", host_after},
              {"token_processes", token_procs}};
  out.measurements.push_back(MeasurementJson("load/run", "load", info.name,
                                             o.backend.empty() ? "" : o.backend, "harness", lat));

  std::string figures = fmt::format(
      "{} runs at concurrency {}: {} ok, {:.0f} runs/s, p50 {} p95 {}", o.runs, o.concurrency,
      tally.ok, throughput, lat.empty() ? "-" : FormatSeconds(Percentile(lat, 50)),
      lat.empty() ? "-" : FormatSeconds(Percentile(lat, 95)));
  bool interrupted = answered < o.runs;
  if (interrupted)
    out.errors.push_back(fmt::format("load: interrupted after {} of {} runs", answered, o.runs));
  out.checks.push_back(CheckJson(
      "load/no-lost", "no run lost under load (every run answered with its own result)",
      {"LC-9", "FAIL-1"}, tally.lost == 0 && !interrupted ? "pass" : "fail",
      tally.lost == 0 ? figures
                      : fmt::format("{} of {} runs lost ({}), e.g. {}", tally.lost, o.runs, figures,
                                    tally.lost_examples.empty() ? "" : tally.lost_examples[0]),
      {{"lost", tally.lost}, {"examples", tally.lost_examples}, {"refusals", tally.refusals}},
      o.profile));
  out.checks.push_back(CheckJson(
      "load/no-wrong", "no result reaches another caller under load", {"POOL-4", "LC-9"},
      tally.wrong == 0 ? "pass" : "fail",
      tally.wrong == 0 ? fmt::format("every answered run carried its own token ({} runs)", answered)
                       : fmt::format("{} runs answered with another output, e.g. {}", tally.wrong,
                                     tally.wrong_examples.empty() ? "" : tally.wrong_examples[0]),
      {{"wrong", tally.wrong}, {"examples", tally.wrong_examples}}, o.profile));

  // Leaks: the host's kernel objects and the target's descriptors.
  if (!o.target_local) {
    out.checks.push_back(CheckJson(
        "load/no-leak", "nothing left on the host after the load", {"LC-8", "FAIL-6"}, "skip",
        "the target's sandboxes do not run on this host", json::object(), o.profile));
  } else {
    std::vector<std::string> grew;
    for (auto it = host_before.begin(); it != host_before.end(); ++it) {
      int b = it.value().get<int>(), a = host_after[it.key()].get<int>();
      if (a > b) grew.push_back(fmt::format("{} {} -> {}", it.key(), b, a));
    }
    int procs = token_procs.is_object() ? static_cast<int>(token_procs["found"].size()) : 0;
    if (procs > 0) grew.push_back(fmt::format("{} processes still hold the run's tokens", procs));
    out.checks.push_back(CheckJson(
        "load/no-leak", "nothing left on the host after the load", {"LC-8", "FAIL-6"},
        grew.empty() ? "pass" : "fail",
        grew.empty()
            ? fmt::format("cgroup dirs, network and mount namespaces and interfaces back to "
                          "their count before the load ({})",
                          host_after.dump())
            : fmt::format("still there {} s after the load: {}", o.settle_s, fmt::join(grew, "; ")),
        {{"before", host_before}, {"after", host_after}, {"token_processes", token_procs}},
        o.profile));
  }
  if (res_before.is_null() || !res_before.contains("open_fds")) {
    out.checks.push_back(CheckJson("load/descriptors-flat",
                                   "the target's descriptors are flat after the load", {"LC-8"},
                                   "skip", "the target reports no open_fds in its info (capacity)",
                                   json::object(), o.profile));
  } else {
    bool flat = fds_ok(res_before, res_after);
    out.checks.push_back(CheckJson(
        "load/descriptors-flat", "the target's descriptors are flat after the load", {"LC-8"},
        flat ? "pass" : "fail",
        fmt::format("open descriptors {} before, {} after{}", res_before["open_fds"].get<int>(),
                    res_after.is_object() && res_after.contains("open_fds")
                        ? res_after["open_fds"].get<int>()
                        : -1,
                    flat ? "" : " (more than 4 above)"),
        {{"before", res_before}, {"after", res_after}}, o.profile));
  }
  for (auto& c : out.checks) c["seconds"] = wall;
  std::printf(
      "load\t%s\t%d runs\tconcurrency %d\t%d ok\t%d wrong\t%d lost\t%d refusals\t%.1f runs/s\tp50 "
      "%s\tp95 %s\n",
      one_shot ? "run_pooled" : "create_exec_destroy", o.runs, o.concurrency, tally.ok, tally.wrong,
      tally.lost, tally.refusals, throughput,
      lat.empty() ? "-" : FormatSeconds(Percentile(lat, 50)).c_str(),
      lat.empty() ? "-" : FormatSeconds(Percentile(lat, 95)).c_str());
  std::fflush(stdout);
  return out;
}

}  // namespace sandcheck
