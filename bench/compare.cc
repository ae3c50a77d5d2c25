// sbx-bench-compare (run as bench/compare): A/B comparison of two Google Benchmark JSON outputs
// (--benchmark_out=FILE --benchmark_out_format=json), e.g. main (A) against a change (B), made
// on the same machine.
//
//   sbx-bench-compare A.json B.json [--threshold 5%] [--metric real_time|cpu_time]
//                     [--fail-on-regression]
//
// Per benchmark: the median of its runs on each side (all repetitions; or the "median"
// aggregate when only aggregates were written), B ÷ A, and a verdict:
//   slower / faster  — |B ÷ A − 1| is beyond the threshold AND, when both sides have at least 3
//                      repetitions, their [min, max] ranges do not overlap (so one noisy run
//                      does not make a verdict);
//   same             — within the noise;
//   only in A / B    — renamed, added or removed.
// Exit codes: 0 done (1 with --fail-on-regression when something is slower), 2 bad input.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

using nlohmann::json;

struct Series {
  std::vector<double> runs;  // seconds
  double median_aggregate = -1;
  double Median() const {
    if (runs.empty()) return median_aggregate;
    std::vector<double> v = runs;
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  }
};

double ToSeconds(double v, const std::string& unit) {
  if (unit == "ns") return v * 1e-9;
  if (unit == "us") return v * 1e-6;
  if (unit == "ms") return v * 1e-3;
  return v;  // "s"
}

std::string Human(double s) {
  if (s < 0) return "-";
  if (s < 1e-6) return fmt::format("{:.1f} ns", s * 1e9);
  if (s < 1e-3) return fmt::format("{:.2f} µs", s * 1e6);
  if (s < 1) return fmt::format("{:.3f} ms", s * 1e3);
  return fmt::format("{:.3f} s", s);
}

// name → series. Errors (bad file, not benchmark JSON) are returned as text.
std::string Load(const std::string& path, const std::string& metric,
                 std::map<std::string, Series>* out, std::vector<std::string>* order) {
  std::ifstream in(path);
  if (!in) return fmt::format("{}: cannot read", path);
  std::stringstream ss;
  ss << in.rdbuf();
  // Google Benchmark writes NaN / inf for undefined aggregates (the cv of a zero counter),
  // which is not JSON: read them as null.
  static const std::regex kNonFinite(R"((:\s*)-?(NaN|nan|Infinity|inf)\b)");
  json j = json::parse(std::regex_replace(ss.str(), kNonFinite, "$1null"), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("benchmarks") ||
      !j["benchmarks"].is_array()) {
    return fmt::format("{}: not Google Benchmark JSON (no \"benchmarks\" array)", path);
  }
  for (const auto& b : j["benchmarks"]) {
    if (!b.is_object() || !b.contains("name") || !b[metric].is_number()) {
      return fmt::format("{}: a benchmark entry without name or {}", path, metric);
    }
    if (b.contains("error_occurred") && b["error_occurred"].is_boolean() &&
        b["error_occurred"].get<bool>()) {
      continue;  // skipped with an error (e.g. not root): nothing to compare
    }
    std::string name = b.value("run_name", b["name"].get<std::string>());
    double v = ToSeconds(b[metric].get<double>(), b.value("time_unit", "ns"));
    std::string type = b.value("run_type", "iteration");
    if (!out->count(name)) order->push_back(name);
    Series& s = (*out)[name];
    if (type == "aggregate") {
      if (b.value("aggregate_name", "") == "median") s.median_aggregate = v;
    } else {
      s.runs.push_back(v);
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> files;
  double threshold = 0.05;
  std::string metric = "real_time";
  bool fail_on_regression = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threshold" && i + 1 < argc) {
      std::string t = argv[++i];
      bool pct = !t.empty() && t.back() == '%';
      if (pct) t.pop_back();
      char* end = nullptr;
      double v = std::strtod(t.c_str(), &end);
      if (t.empty() || *end != '\0' || v < 0 || (!pct && v >= 1)) {
        std::fprintf(stderr, "sbx-bench-compare: --threshold '%s': 5%% or 0.05\n", argv[i]);
        return 2;
      }
      threshold = pct ? v / 100 : v;
    } else if (a == "--metric" && i + 1 < argc) {
      metric = argv[++i];
      if (metric != "real_time" && metric != "cpu_time") {
        std::fprintf(stderr, "sbx-bench-compare: --metric real_time or cpu_time\n");
        return 2;
      }
    } else if (a == "--fail-on-regression") {
      fail_on_regression = true;
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: sbx-bench-compare A.json B.json [--threshold 5%%] [--metric real_time|cpu_time]"
          " [--fail-on-regression]\n");
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "sbx-bench-compare: unknown option %s\n", a.c_str());
      return 2;
    } else {
      files.push_back(a);
    }
  }
  if (files.size() != 2) {
    std::fprintf(stderr,
                 "usage: sbx-bench-compare A.json B.json [--threshold 5%%] "
                 "[--metric real_time|cpu_time] [--fail-on-regression]\n");
    return 2;
  }
  std::map<std::string, Series> a, b;
  std::vector<std::string> order_a, order_b;
  for (auto [path, m, o] :
       {std::tuple{files[0], &a, &order_a}, std::tuple{files[1], &b, &order_b}}) {
    std::string err = Load(path, metric, m, o);
    if (!err.empty()) {
      std::fprintf(stderr, "sbx-bench-compare: %s\n", err.c_str());
      return 2;
    }
  }
  std::vector<std::string> order = order_a;
  for (const auto& n : order_b) {
    if (!a.count(n)) order.push_back(n);
  }
  int slower = 0, faster = 0, same = 0;
  std::printf(
      "| benchmark | A (%s) | B | B ÷ A | runs A/B | verdict |\n|---|---|---|---|---|---|\n",
      metric.c_str());
  for (const auto& n : order) {
    auto ia = a.find(n), ib = b.find(n);
    if (ia == a.end() || ib == b.end()) {
      const Series& s = ia == a.end() ? ib->second : ia->second;
      std::printf("| %s | %s | %s | - | - | only in %s |\n", n.c_str(),
                  ia == a.end() ? "-" : Human(s.Median()).c_str(),
                  ib == b.end() ? "-" : Human(s.Median()).c_str(), ia == a.end() ? "B" : "A");
      continue;
    }
    double ma = ia->second.Median(), mb = ib->second.Median();
    if (ma <= 0 || mb <= 0) continue;
    double ratio = mb / ma;
    const auto& ra = ia->second.runs;
    const auto& rb = ib->second.runs;
    bool overlap = false;
    if (ra.size() >= 3 && rb.size() >= 3) {
      auto [alo, ahi] = std::minmax_element(ra.begin(), ra.end());
      auto [blo, bhi] = std::minmax_element(rb.begin(), rb.end());
      overlap = !(*bhi < *alo || *blo > *ahi);
    }
    std::string verdict;
    if (std::fabs(ratio - 1) <= threshold || overlap) {
      verdict = overlap && std::fabs(ratio - 1) > threshold ? "same (ranges overlap)" : "same";
      ++same;
    } else if (ratio > 1) {
      verdict = "**slower**";
      ++slower;
    } else {
      verdict = "faster";
      ++faster;
    }
    std::printf("| %s | %s | %s | %.3f | %zu/%zu | %s |\n", n.c_str(), Human(ma).c_str(),
                Human(mb).c_str(), ratio, ra.size(), rb.size(), verdict.c_str());
  }
  std::printf("\n%d slower, %d faster, %d within the noise threshold of %.0f %%\n", slower, faster,
              same, threshold * 100);
  return fail_on_regression && slower > 0 ? 1 : 0;
}
