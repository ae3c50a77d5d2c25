// `sandcheck reproduce suspend` (MEAS-3, SNAP-3): suspend and resume of a sandbox holding
// 64 MiB .. 1 GiB, on the harness clock and the target's.
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
#include "common/json_strict.h"
#include "common/stats.h"
#include "common/subprocess.h"
#include "drivers/target.h"
#include "host/host_facts.h"
#include "report/chart.h"
#include "report/render.h"
#include "report/report.h"
#include "run/mirror_fixture.h"

namespace sandcheck::repro {
namespace {

using nlohmann::json;

int64_t MemAvailableBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

}  // namespace

sbx::StatusOr<json> Suspend(Session& s, const std::string& backend,
                            const std::vector<int64_t>& sizes, int64_t runs, std::string* md,
                            std::vector<std::pair<std::string, std::string>>* svgs) {
  if (!s.info_.Has("suspend")) {
    *md += "skipped: the target does not offer suspend\n";
    return json{{"backend", Label(backend)}, {"skip", "the target does not offer suspend"}};
  }
  static const std::regex kHolding(R"(holding ([0-9]+) MiB pid ([0-9]+))");
  json rows = json::array();
  std::string table =
      "| memory held | suspend (harness) | suspend (target) | resume (harness) | resume (target) "
      "| first request after resume | memory peak (cgroup) | holder alive after |\n"
      "|---|---|---|---|---|---|---|---|\n";
  std::vector<double> xs;
  LineSeries ls{"suspend", {}, {}, {}}, lr{"resume", {}, {}, {}}, lf{"first request", {}, {}, {}};
  int64_t avail = MemAvailableBytes();
  for (int64_t mib : sizes) {
    if (Interrupted()) break;
    int64_t limit = (mib + 256) << 20;
    if (avail > 0 && limit > avail / 2) {
      table += fmt::format("| {} MiB | skipped: needs {} MiB, the host has {} MiB available |\n",
                           mib, limit >> 20, avail >> 20);
      rows.push_back({{"mib", mib}, {"skip", "not enough memory on the host"}});
      continue;
    }
    Progress("\r%s: %lld MiB   ", Label(backend).c_str(), static_cast<long long>(mib));
    ASSIGN_OR_RETURN(std::string id, s.t_.Create(s.Request(backend, {{"memory_bytes", limit}})));
    auto h = s.Exec(id, fmt::format("sbx-memhog --hold {}", mib), 300);
    std::smatch m;
    if (!h.ok() || h->a.status != "ok" || h->a.exit_code != 0 ||
        !std::regex_search(h->a.stdout_text, m, kHolding)) {
      (void)s.t_.Destroy(id);
      if (!h.ok()) return h.status();
      return sbx::Internal(
          fmt::format("sbx-memhog --hold {} did not hold: status {}, exit {}, "
                      "stdout '{}', stderr '{}' (a tools image without "
                      "--hold?)",
                      mib, h->a.status, h->a.exit_code, h->a.stdout_text.substr(0, 200),
                      h->a.stderr_text.substr(0, 200)));
    }
    std::string pid = m[2];
    std::vector<double> su, su_t, re, re_t, fr;
    sbx::Status failure;
    for (int64_t r = 0; r < runs && !Interrupted(); ++r) {
      auto t0 = Clock::now();
      auto a = s.t_.Suspend(id);
      double sw = SecondsSince(t0);
      if (!a.ok()) {
        failure = a.status();
        break;
      }
      auto t1 = Clock::now();
      auto b = s.t_.Resume(id);
      double rw = SecondsSince(t1);
      if (!b.ok()) {
        failure = b.status();
        break;
      }
      auto f = s.Exec(id, "echo ok", 30);
      if (!f.ok()) {
        failure = f.status();
        break;
      }
      su.push_back(sw);
      re.push_back(rw);
      fr.push_back(f->wall);
      if (a->seconds >= 0) su_t.push_back(a->seconds);
      if (b->seconds >= 0) re_t.push_back(b->seconds);
    }
    auto alive = s.Exec(id, fmt::format("kill -0 {} && echo alive", pid), 30);
    (void)s.t_.Destroy(id);
    (void)s.t_.Settle();
    if (!failure.ok()) {
      if (failure.code() == sbx::Code::kUnsupported) {
        *md += "skipped: " + failure.message() + "\n";
        return json{{"backend", Label(backend)}, {"skip", failure.message()}};
      }
      return failure;
    }
    bool is_alive = alive.ok() && alive->a.stdout_text.find("alive") != std::string::npos;
    int64_t peak = UsageMemory(h->a);
    table +=
        fmt::format("| {} MiB | {} | {} | {} | {} | {} | {} | {} |\n", mib, RangeMs(su),
                    RangeMs(su_t), RangeMs(re), RangeMs(re_t), RangeMs(fr),
                    peak > 0 ? fmt::format("{} MiB", peak >> 20) : "-", is_alive ? "yes" : "NO");
    rows.push_back({{"mib", mib},
                    {"suspend_s", su},
                    {"suspend_reported_s", su_t},
                    {"resume_s", re},
                    {"resume_reported_s", re_t},
                    {"first_request_s", fr},
                    {"memory_peak_bytes", peak},
                    {"holder_alive", is_alive}});
    xs.push_back(static_cast<double>(mib));
    for (auto [series, v] : {std::pair{&ls, &su}, std::pair{&lr, &re}, std::pair{&lf, &fr}}) {
      series->y.push_back(Mean(*v) * 1e3);
      series->lo.push_back(v->empty() ? 0 : *std::min_element(v->begin(), v->end()) * 1e3);
      series->hi.push_back(v->empty() ? 0 : *std::max_element(v->begin(), v->end()) * 1e3);
    }
  }
  Progress("\r%80s\r", "");
  *md += table;
  svgs->push_back({"suspend", RenderLineChartSvg(fmt::format("Suspend and resume against memory "
                                                             "held ({})",
                                                             Label(backend)),
                                                 "MiB held (log scale)",
                                                 "milliseconds (mean, "
                                                 "whisker min–max)",
                                                 xs, {ls, lr, lf}, true)});
  return json{{"backend", Label(backend)}, {"rows", rows}};
}

}  // namespace sandcheck::repro
