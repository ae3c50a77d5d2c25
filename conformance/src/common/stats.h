// Sample statistics for latency measurements: p50/p95/p99 by linear interpolation between
// closest ranks (the definition numpy.percentile uses by default), so reports and gates agree.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

namespace sandcheck {

struct Stats {
  size_t count = 0;
  double min = 0, max = 0, mean = 0, p50 = 0, p95 = 0, p99 = 0;
};

// q in [0, 100]. Empty input → 0.
double Percentile(std::vector<double> samples, double q);
Stats ComputeStats(const std::vector<double>& samples);
// {"samples":[...], "count", "min", "max", "mean", "p50", "p95", "p99"} (stats null when empty).
nlohmann::json StatsJson(const std::vector<double>& samples);

}  // namespace sandcheck
