#include "host/process_stamp.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace sbx::host {
namespace {

// Field 22 of /proc/PID/stat: start time in clock ticks since boot. A zombie (field 3 'Z') is
// dead for our purposes: it runs nothing and holds nothing but its pid.
std::string StartTime(pid_t pid) {
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  std::getline(f, stat);
  size_t rp = stat.rfind(')');
  if (rp == std::string::npos) return "";
  std::istringstream is(stat.substr(rp + 2));
  std::string field;
  for (int i = 3; i <= 22 && is >> field; ++i) {
    if (i == 3 && (field == "Z" || field == "X")) return "";
  }
  return field;
}

}  // namespace

std::string ProcessStamp(pid_t pid) {
  std::string start = StartTime(pid);
  return start.empty() ? "" : fmt::format("{} {}", pid, start);
}

bool ParseStamp(const std::string& stamp, pid_t* pid, std::string* start_time) {
  std::istringstream is(stamp);
  return static_cast<bool>(is >> *pid >> *start_time) && *pid > 0;
}

bool StampAlive(const std::string& stamp) {
  pid_t pid;
  std::string start;
  if (!ParseStamp(stamp, &pid, &start)) return false;
  return StartTime(pid) == start;
}

}  // namespace sbx::host
