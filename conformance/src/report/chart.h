// Small self-contained SVG charts for reports (no script, no external resource): latency CDFs
// (report.html, comparison.html), grouped bars with min–max whiskers (the throttle chart) and
// lines against a size axis (the suspend chart). Values are in the unit the caller says; the
// CDF takes seconds and draws milliseconds.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

namespace sandcheck {

struct CdfSeries {
  std::string label;
  std::vector<double> samples;  // seconds
  bool reference = false;       // drawn grey and dashed (the machine's floor)
};

// Empirical CDF of each series (fraction of samples ≤ x) against latency in ms; a logarithmic x
// axis when the values span more than 20×. `limit_s` > 0 draws the limit as a dashed line.
std::string RenderCdfSvg(const std::string& title, const std::vector<CdfSeries>& series,
                         double limit_s = 0);

struct BarSeries {
  std::string label;
  std::vector<double> value, lo, hi;  // one per group; lo/hi are the whisker (may be empty)
};

// Grouped bars: one group per `groups` entry, one bar per series in each group.
std::string RenderBarChartSvg(const std::string& title, const std::string& y_label,
                              const std::vector<std::string>& groups,
                              const std::vector<BarSeries>& series);

struct LineSeries {
  std::string label;
  std::vector<double> y, lo, hi;  // one per x; lo/hi optional
};

// Lines over x values (e.g. MiB), log2 x axis when `log_x`.
std::string RenderLineChartSvg(const std::string& title, const std::string& x_label,
                               const std::string& y_label, const std::vector<double>& x,
                               const std::vector<LineSeries>& series, bool log_x);

}  // namespace sandcheck
