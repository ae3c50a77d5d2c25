#include "common/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sandcheck {

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double pos = (q / 100.0) * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, v.size() - 1);
  double frac = pos - static_cast<double>(lo);
  return v[lo] + (v[hi] - v[lo]) * frac;
}

Stats ComputeStats(const std::vector<double>& samples) {
  Stats s;
  s.count = samples.size();
  if (samples.empty()) return s;
  s.min = *std::min_element(samples.begin(), samples.end());
  s.max = *std::max_element(samples.begin(), samples.end());
  s.mean =
      std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size());
  s.p50 = Percentile(samples, 50);
  s.p95 = Percentile(samples, 95);
  s.p99 = Percentile(samples, 99);
  return s;
}

nlohmann::json StatsJson(const std::vector<double>& samples) {
  nlohmann::json j = {{"samples", samples}, {"count", samples.size()}};
  if (samples.empty()) {
    for (const char* k : {"min", "max", "mean", "p50", "p95", "p99"}) j[k] = nullptr;
    return j;
  }
  Stats s = ComputeStats(samples);
  j["min"] = s.min;
  j["max"] = s.max;
  j["mean"] = s.mean;
  j["p50"] = s.p50;
  j["p95"] = s.p95;
  j["p99"] = s.p99;
  return j;
}

}  // namespace sandcheck
