#include "host/machine_load.h"

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace sandcheck {
namespace {

std::string Slurp(const char* path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double MonotonicNow() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// "63 %" from 0.63; "-" for null.
std::string Pct(const nlohmann::json& v) {
  if (!v.is_number()) return "-";
  return fmt::format("{:.0f} %", v.get<double>() * 100);
}

}  // namespace

bool ParseProcStat(const std::string& text, MachineLoadSample* s) {
  // "cpu  user nice system idle iowait irq softirq steal guest guest_nice" (guest time is
  // already counted in user and nice, so it is not added again).
  std::istringstream in(text);
  std::string label;
  if (!(in >> label) || label != "cpu") return false;
  unsigned long long f[8] = {};
  int n = 0;
  while (n < 8 && (in >> f[n])) ++n;
  if (n < 4) return false;  // user nice system idle at least (every kernel since 2.6 has 8)
  unsigned long long total = 0;
  for (int i = 0; i < n; ++i) total += f[i];
  s->total = total;
  s->idle = f[3];
  s->iowait = n > 4 ? f[4] : 0;
  s->steal = n > 7 ? f[7] : 0;
  return true;
}

bool ParseCpuPressure(const std::string& text, MachineLoadSample* s) {
  // "some avg10=0.00 avg60=0.00 avg300=0.00 total=123456"
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("some ", 0) != 0) continue;
    auto at = line.find(" total=");
    if (at == std::string::npos) return false;
    const char* p = line.c_str() + at + 7;
    char* end = nullptr;
    unsigned long long v = std::strtoull(p, &end, 10);
    if (end == p) return false;
    s->cpu_some_us = v;
    return true;
  }
  return false;
}

bool ParseLoadavg(const std::string& text, MachineLoadSample* s) {
  // "0.44 1.02 1.17 2/93 12345"
  const char* p = text.c_str();
  char* end = nullptr;
  double v = std::strtod(p, &end);
  if (end == p || v < 0) return false;
  s->loadavg1 = v;
  return true;
}

MachineLoadSample ReadMachineLoad() {
  MachineLoadSample s;
  s.monotonic_s = MonotonicNow();
  ParseProcStat(Slurp("/proc/stat"), &s);
  ParseCpuPressure(Slurp("/proc/pressure/cpu"), &s);
  ParseLoadavg(Slurp("/proc/loadavg"), &s);
  return s;
}

nlohmann::json DescribeMachineLoad(const MachineLoadSample& a, const MachineLoadSample& b) {
  using nlohmann::json;
  double seconds = b.monotonic_s - a.monotonic_s;
  json out = {{"seconds", seconds > 0 ? json(seconds) : json(nullptr)},
              {"cpu_busy", nullptr},
              {"iowait", nullptr},
              {"steal", nullptr},
              {"cpu_pressure", nullptr},
              {"loadavg_start", a.loadavg1 ? json(*a.loadavg1) : json(nullptr)},
              {"loadavg_end", b.loadavg1 ? json(*b.loadavg1) : json(nullptr)}};
  if (a.total > 0 && b.total > a.total && b.idle >= a.idle && b.iowait >= a.iowait &&
      b.steal >= a.steal) {
    double total = static_cast<double>(b.total - a.total);
    double idle = static_cast<double>(b.idle - a.idle),
           iowait = static_cast<double>(b.iowait - a.iowait);
    out["cpu_busy"] = std::max(0.0, (total - idle - iowait) / total);
    out["iowait"] = iowait / total;
    out["steal"] = static_cast<double>(b.steal - a.steal) / total;
  }
  if (a.cpu_some_us && b.cpu_some_us && *b.cpu_some_us >= *a.cpu_some_us && seconds > 0) {
    out["cpu_pressure"] =
        std::min(1.0, static_cast<double>(*b.cpu_some_us - *a.cpu_some_us) / 1e6 / seconds);
  }
  return out;
}

std::string MachineLoadLine(const nlohmann::json& load) {
  if (!load.is_object()) return "";
  auto num = [&](const char* k) { return load.contains(k) && load[k].is_number(); };
  if (!num("cpu_busy") && !num("cpu_pressure") && !num("loadavg_end")) return "";
  std::string line = fmt::format("CPUs {} busy (steal {}, iowait {}), CPU pressure {}",
                                 Pct(load.value("cpu_busy", nlohmann::json())),
                                 Pct(load.value("steal", nlohmann::json())),
                                 Pct(load.value("iowait", nlohmann::json())),
                                 Pct(load.value("cpu_pressure", nlohmann::json())));
  if (num("loadavg_start") && num("loadavg_end"))
    line += fmt::format(", load {:.2f} → {:.2f}", load["loadavg_start"].get<double>(),
                        load["loadavg_end"].get<double>());
  if (num("seconds")) line += fmt::format(" over {:.1f} s", load["seconds"].get<double>());
  return line;
}

}  // namespace sandcheck
