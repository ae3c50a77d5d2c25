#include "run/live_log.h"

#include <fmt/format.h>

namespace sandcheck {
namespace {

using nlohmann::json;

std::string Quote(const std::string& s, size_t max) {
  std::string t = s.size() > max ? "..." + s.substr(s.size() - max) : s;
  return json(t).dump(-1, ' ', false, json::error_handler_t::replace);
}

// Tabs and newlines would break the columns; the JSON quoting already escapes them.
std::string Clean(std::string s) {
  for (auto& c : s) {
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

}  // namespace

LiveLog::LiveLog(std::FILE* out, std::FILE* err, bool progress)
    : out_(out), err_(err), progress_(progress) {}

void LiveLog::Header() {
  std::fputs("label\tphase\tstate\thttp\tseconds\tresult\n", out_);
  std::fflush(out_);
}

std::string LiveLog::ResultColumn(const Step& s) {
  if (s.phase == "skip") return Clean(s.error);
  if (!s.error.empty()) return "error: " + Clean(s.error);
  if (!s.refused.empty()) return "refused: " + Clean(s.refused);
  if (s.is_exec) {
    const ExecAnswer& a = s.answer;
    std::string r = "{";
    if (a.status != "ok") r += fmt::format("\"status\": {}, ", Quote(a.status, 40));
    r += fmt::format("\"exit\": {}, \"stdout\": {}, \"stderr\": {}, \"seconds\": ", a.exit_code,
                     Quote(a.stdout_text, 300), Quote(a.stderr_text, 300));
    r += a.seconds >= 0 ? fmt::format("{:.2f}", a.seconds) : "null";
    return r + "}";
  }
  if (s.phase == "create") return "-";
  return s.op.seconds >= 0 ? fmt::format("{{\"seconds\": {:.4f}}}", s.op.seconds) : "-";
}

void LiveLog::StepLine(const std::string& label, const Step& s) {
  ClearProgress();
  std::string state = "-";
  int http = s.is_exec ? s.answer.http_status : s.op.http_status;
  if (s.is_exec && s.error.empty()) state = s.answer.state;
  std::fputs(fmt::format("{}\t{}\t{}\t{}\t{:.3f}\t{}\n", Clean(label), s.phase, state,
                         http ? std::to_string(http) : "-", s.wall_seconds, ResultColumn(s))
                 .c_str(),
             out_);
  std::fflush(out_);
}

void LiveLog::Progress(const std::string& text) {
  if (!progress_) return;
  std::string t = text.size() > 100 ? text.substr(0, 100) : text;
  std::fputs(fmt::format("\r\033[K{}", t).c_str(), err_);
  std::fflush(err_);
  progress_shown_ = true;
}

void LiveLog::ClearProgress() {
  if (!progress_shown_) return;
  std::fputs("\r\033[K", err_);
  std::fflush(err_);
  progress_shown_ = false;
}

}  // namespace sandcheck
