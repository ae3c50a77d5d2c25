// Helpers the check evaluators share (checks/verdict.h).
#include "checks/verdict.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <regex>

#include "checks/evidence.h"
#include "common/json_strict.h"
#include "common/stats.h"

namespace sandcheck::eval {

using nlohmann::json;

Verdict Pass(std::string reason) { return {Outcome::kPass, std::move(reason), json::object()}; }
Verdict Fail(std::string reason) { return {Outcome::kFail, std::move(reason), json::object()}; }

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// "exit 1: wget: bad address 'x'" — the short story of a failed command.
std::string Told(const ExecAnswer& a) {
  std::string last;
  for (const std::string* s : {&a.stderr_text, &a.stdout_text}) {
    std::string t = Trimmed(*s);
    if (t.empty()) continue;
    last = t.substr(t.rfind('\n') == std::string::npos ? 0 : t.rfind('\n') + 1);
    break;
  }
  std::string head = a.status == "ok" ? fmt::format("exit {}", a.exit_code)
                                      : fmt::format("status {}, state {}, exit {}", a.status,
                                                    a.state, a.exit_code);
  return last.empty() ? head : fmt::format("{}: {}", head, last.substr(0, 200));
}

bool Ran(const ExecAnswer& a) { return a.status == "ok" || a.status == "timeout"; }

bool RanCleanly(const Step& s) {
  return s.error.empty() && s.answer.status == "ok" && s.answer.exit_code == 0;
}

json DecisionsFor(const json& log, const std::string& needle) {
  json out = json::array();
  if (!log.is_array()) return out;
  for (const auto& d : log) {
    if (d.is_object() && d.value("destination", std::string()).find(needle) != std::string::npos)
      out.push_back(d);
  }
  return out;
}

// A number the target reported in the exec answer's usage object (its cgroup's figures), if any.
std::optional<double> UsageOf(const ExecAnswer& a, const char* key) {
  if (!a.extra.contains("usage") || !a.extra["usage"].is_object()) return std::nullopt;
  const json& u = a.extra["usage"];
  if (!u.contains(key) || !u[key].is_number()) return std::nullopt;
  double v = u[key].get<double>();
  if (v < 0) return std::nullopt;
  return v;
}

// "256 MiB" / "1.5 GiB".
std::string Mib(double bytes) {
  double mib = bytes / (1024.0 * 1024.0);
  return mib >= 1024 ? fmt::format("{:.3g} GiB", mib / 1024) : fmt::format("{:.4g} MiB", mib);
}

std::string Quoted(const std::string& s) {
  std::string t = s.size() > 60 ? s.substr(0, 57) + "..." : s;
  return "\"" + t + "\"";
}

// The first line of stdout that parses as a JSON object (sbx-probe and friends print one).
std::optional<json> FirstJsonLine(const std::string& out) {
  size_t pos = 0;
  while (pos < out.size()) {
    size_t nl = out.find('\n', pos);
    std::string line = out.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? out.size() : nl + 1;
    size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] != '{') continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) return j;
  }
  return std::nullopt;
}

bool SameValue(const json& got, const json& want) {
  if (got.is_number() && want.is_number()) return got.get<double>() == want.get<double>();
  return got == want;
}

}  // namespace sandcheck::eval
