#include <fmt/format.h>

#include <filesystem>

#include "common/json_strict.h"
#include "report/render.h"
#include "report/report.h"

namespace sandcheck {

using nlohmann::json;

std::string SanitizeUtf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c >= 0x20 || c == '\t' || c == '\n' || c == '\r') out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    int len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && len == 2 && c < 0xC2) ok = false;  // overlong
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string XmlEscape(const std::string& s) {
  std::string out;
  for (char c : SanitizeUtf8(s)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string FormatSeconds(const json& v) {
  if (!v.is_number()) return "-";
  double s = v.get<double>();
  if (s < 0) return "-";
  if (s < 0.1) return fmt::format("{:.1f} ms", s * 1000);
  return fmt::format("{:.2f} s", s);
}

const json* CheckForTask(const json& report, const std::string& scenario,
                         const std::string& task_id) {
  for (const auto& c : report["checks"]) {
    if (c.value("scenario", "") == scenario && c["task"].is_string() &&
        c["task"].get<std::string>() == task_id) {
      return &c;
    }
  }
  return nullptr;
}

sbx::Status CheckReportShape(const json& r) {
  auto need = [&](const json& obj, const char* key, json::value_t type,
                  const std::string& where) -> sbx::Status {
    if (!obj.is_object() || !obj.contains(key))
      return sbx::InvalidArgument(fmt::format("{}: '{}' missing", where, key));
    const json& v = obj[key];
    bool ok = type == json::value_t::number_float     ? v.is_number()
              : type == json::value_t::number_integer ? v.is_number_integer()
                                                      : v.type() == type;
    if (!ok)
      return sbx::InvalidArgument(fmt::format("{}.{}: wrong type ({})", where, key, v.type_name()));
    return sbx::Status::Ok();
  };
  using VT = json::value_t;
  if (!r.is_object()) return sbx::InvalidArgument("a report is a JSON object");
  RETURN_IF_ERROR(need(r, "schema", VT::string, "report"));
  if (r["schema"] != std::string(kReportSchema)) {
    return sbx::InvalidArgument(fmt::format("report.schema: '{}' is not {}",
                                            r["schema"].get<std::string>(),
                                            std::string(kReportSchema)));
  }
  for (const char* k : {"run_id", "profile"}) RETURN_IF_ERROR(need(r, k, VT::string, "report"));
  for (const char* k : {"target", "host", "summary"})
    RETURN_IF_ERROR(need(r, k, VT::object, "report"));
  for (const char* k : {"scenarios", "checks", "measurements", "errors"})
    RETURN_IF_ERROR(need(r, k, VT::array, "report"));
  RETURN_IF_ERROR(need(r["target"], "name", VT::string, "target"));
  RETURN_IF_ERROR(need(r["summary"], "exit_code", VT::number_integer, "summary"));
  for (size_t i = 0; i < r["checks"].size(); ++i) {
    const json& c = r["checks"][i];
    std::string w = fmt::format("checks[{}]", i);
    for (const char* k : {"id", "scenario", "level", "outcome", "reason"})
      RETURN_IF_ERROR(need(c, k, VT::string, w));
    RETURN_IF_ERROR(need(c, "requirements", VT::array, w));
    RETURN_IF_ERROR(need(c, "blocking", VT::boolean, w));
    if (c.contains("evidence") && !c["evidence"].is_object())
      return sbx::InvalidArgument(fmt::format("{}.evidence: wrong type (an object is needed)", w));
  }
  for (size_t i = 0; i < r["scenarios"].size(); ++i) {
    const json& s = r["scenarios"][i];
    std::string w = fmt::format("scenarios[{}]", i);
    RETURN_IF_ERROR(need(s, "name", VT::string, w));
    RETURN_IF_ERROR(need(s, "tasks", VT::array, w));
    for (size_t k = 0; k < s["tasks"].size(); ++k) {
      const json& t = s["tasks"][k];
      std::string tw = fmt::format("{}.tasks[{}]", w, k);
      for (const char* key : {"id", "label", "tries", "got"})
        RETURN_IF_ERROR(need(t, key, VT::string, tw));
      RETURN_IF_ERROR(need(t, "timings", VT::object, tw));
      RETURN_IF_ERROR(need(t, "refused", VT::boolean, tw));
    }
  }
  return sbx::Status::Ok();
}

const json& EvidenceOf(const json& check) {
  static const json kNone = json::object();
  auto it = check.find("evidence");
  return it != check.end() && it->is_object() ? *it : kNone;
}

sbx::Status WriteRenderedReports(const json& report, const std::string& dir, bool tap) {
  RETURN_IF_ERROR(CheckReportShape(report));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);  // `render --out DIR` with a new DIR
  if (ec)
    return sbx::Status(sbx::Code::kInternal, fmt::format("creating {}: {}", dir, ec.message()));
  try {
    RETURN_IF_ERROR(WriteFile(dir + "/junit.xml", RenderJunit(report)));
    RETURN_IF_ERROR(WriteFile(dir + "/report.md", RenderMarkdown(report)));
    RETURN_IF_ERROR(WriteFile(dir + "/report.html", RenderHtml(report)));
    if (tap) RETURN_IF_ERROR(WriteFile(dir + "/report.tap", RenderTap(report)));
  } catch (const json::exception& e) {
    return sbx::InvalidArgument(
        fmt::format("report does not follow docs/report.schema.json: {}", e.what()));
  }
  return sbx::Status::Ok();
}

std::string RepeatSummary(const nlohmann::json& report) {
  int runs = report.value("repeat", 1);
  if (runs <= 1) return "";
  const nlohmann::json& sum = report["summary"];
  return fmt::format(" · every scenario run {} times: {} flaky", runs, sum.value("flaky", 0));
}

std::string RepeatTally(const nlohmann::json& check) {
  if (!check.contains("repeat") || !check["repeat"].is_object()) return "";
  const nlohmann::json& r = check["repeat"];
  std::string out;
  for (const char* o : {"pass", "fail", "skip", "error", "xfail", "xpass", "flaky"}) {
    const nlohmann::json& counts = r.value("counts", nlohmann::json::object());
    if (!counts.contains(o) || !counts[o].is_number_integer()) continue;
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", counts[o].get<int>(), o);
  }
  return fmt::format(" ({} over {} runs)", out, r.value("runs", 0));
}

}  // namespace sandcheck
