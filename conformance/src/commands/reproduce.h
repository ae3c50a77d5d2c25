// commands/ (internal): what `sandcheck reproduce` shares between its measurements
// (cmd_reproduce.cc: throttle and revert; reproduce_suspend.cc: suspend).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "drivers/target.h"
#include "sbx/status.h"

namespace sandcheck::repro {

using Clock = std::chrono::steady_clock;

std::string S(double v);   // "1.23"
std::string Ms(double v);  // seconds as FormatSeconds writes them
std::string Range(const std::vector<double>& v, const std::function<std::string(double)>& f);
std::string RangeS(const std::vector<double>& v);
std::string RangeMs(const std::vector<double>& v);
double Mean(const std::vector<double>& v);
// "64,128" → {64, 128}, each in lo..hi; the error names --what.
sbx::StatusOr<std::vector<int64_t>> ParseList(const std::string& text, int64_t lo, int64_t hi,
                                              const std::string& what);

// One exec, timed on the harness clock.
struct Timed {
  ExecAnswer a;
  double wall = 0;
};

// The target and what it offers, for one reproduction.
class Session {
 public:
  Session(Target& t, const TargetInfo& info) : t_(t), info_(info) {}
  nlohmann::json Request(const std::string& backend, const nlohmann::json& limits) const;
  sbx::StatusOr<Timed> Exec(const std::string& id, const std::string& cmd, double timeout_s);

  Target& t_;
  const TargetInfo& info_;
};

// The cgroup figures the target reported (-1 if it reports none).
double UsageCpu(const ExecAnswer& a);
int64_t UsageMemory(const ExecAnswer& a);
// The backends to measure: the one asked for, or every backend the target offers.
std::vector<std::string> Backends(const TargetInfo& info, const std::string& asked,
                                  std::string* error);
std::string Label(const std::string& b);

// A progress line on stderr, redrawn in place, only when stderr is a terminal.
template <typename... Args>
void Progress(const char* format, Args... args) {
  static const bool tty = ::isatty(2) == 1;
  if (!tty) return;
  std::fprintf(stderr, format, args...);
}

using Svgs = std::vector<std::pair<std::string, std::string>>;
// suspend (MEAS-3): suspend and resume of a sandbox holding each of `sizes` MiB.
sbx::StatusOr<nlohmann::json> Suspend(Session& s, const std::string& backend,
                                      const std::vector<int64_t>& sizes, int64_t runs,
                                      std::string* md, Svgs* svgs);

}  // namespace sandcheck::repro
