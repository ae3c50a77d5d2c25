// Helpers of `sandcheck reproduce` (commands/reproduce.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "commands/reproduce.h"
#include "common/clock.h"
#include "common/json_strict.h"
#include "common/stats.h"
#include "report/render.h"

namespace sandcheck::repro {

using nlohmann::json;

std::string S(double v) { return fmt::format("{:.2f}", v); }
std::string Ms(double v) { return FormatSeconds(json(v)); }

std::string Range(const std::vector<double>& v, const std::function<std::string(double)>& f) {
  if (v.empty()) return "-";
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return *lo == *hi ? f(*lo) : f(*lo) + "–" + f(*hi);
}
std::string RangeS(const std::vector<double>& v) {
  return Range(v, [](double x) { return S(x) + " s"; });
}
std::string RangeMs(const std::vector<double>& v) {
  return Range(v, [](double x) { return FormatSeconds(json(x)); });
}

double Mean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

sbx::StatusOr<std::vector<int64_t>> ParseList(const std::string& text, int64_t lo, int64_t hi,
                                              const std::string& what) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < lo || v > hi)
      return sbx::InvalidArgument(
          fmt::format("--{} '{}': integers {}..{}, comma-separated", what, text, lo, hi));
    out.push_back(v);
  }
  if (out.empty()) return sbx::InvalidArgument("--" + what + ": at least one value");
  return out;
}

json Session::Request(const std::string& backend, const json& limits) const {
  json r = {{"template", "sandbox"}, {"limits", limits}, {"egress", {{"rules", json::array()}}}};
  if (!backend.empty()) r["backend"] = backend;
  return r;
}

sbx::StatusOr<Timed> Session::Exec(const std::string& id, const std::string& cmd,
                                   double timeout_s) {
  auto t0 = Clock::now();
  ASSIGN_OR_RETURN(ExecAnswer a, t_.Exec(id, cmd, timeout_s));
  return Timed{std::move(a), SecondsSince(t0)};
}

double UsageCpu(const ExecAnswer& a) {
  if (a.extra.contains("usage") && a.extra["usage"].is_object()) {
    const json& v = a.extra["usage"].value("cpu_seconds", json());
    if (v.is_number() && v.get<double>() > 0) return v.get<double>();
  }
  return -1;
}

int64_t UsageMemory(const ExecAnswer& a) {
  if (a.extra.contains("usage") && a.extra["usage"].is_object()) {
    const json& v = a.extra["usage"].value("memory_peak_bytes", json());
    if (v.is_number_integer()) return v.get<int64_t>();
  }
  return -1;
}

std::vector<std::string> Backends(const TargetInfo& info, const std::string& asked,
                                  std::string* error) {
  if (!asked.empty()) {
    if (!info.backends.empty() &&
        std::find(info.backends.begin(), info.backends.end(), asked) == info.backends.end()) {
      *error = fmt::format("the target does not offer backend '{}' (it offers: {})", asked,
                           Join(info.backends, ", "));
      return {};
    }
    return {asked};
  }
  if (info.backends.empty()) return {""};
  return info.backends;
}

std::string Label(const std::string& b) { return b.empty() ? "default" : b; }

}  // namespace sandcheck::repro
