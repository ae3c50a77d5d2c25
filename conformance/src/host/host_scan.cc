#include "host/host_scan.h"

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace sandcheck {
namespace {

using nlohmann::json;

json FindNow(const std::string& needle) {
  json found = json::array();
  DIR* d = ::opendir("/proc");
  if (!d) return found;
  const pid_t self = ::getpid();
  for (dirent* e; (e = ::readdir(d)) != nullptr;) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*e->d_name == '\0' || *end != '\0' || pid <= 0 || pid == self) continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/cmdline", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string cmd = ss.str();
    while (!cmd.empty() && cmd.back() == '\0') cmd.pop_back();
    for (char& c : cmd) {
      if (c == '\0') c = ' ';
    }
    if (CmdlineHolds(cmd, needle)) found.push_back({{"pid", pid}, {"cmdline", cmd}});
  }
  ::closedir(d);
  return found;
}

}  // namespace

bool CmdlineHolds(const std::string& cmdline, const std::string& needle) {
  if (needle.empty()) return false;
  for (size_t at = cmdline.find(needle); at != std::string::npos;
       at = cmdline.find(needle, at + 1)) {
    bool start_ok = at == 0 || cmdline[at - 1] == ' ' || cmdline[at - 1] == '/';
    size_t after = at + needle.size();
    bool end_ok = after == cmdline.size() || cmdline[after] == ' ';
    if (start_ok && end_ok) return true;
  }
  return false;
}

namespace {

// Polls FindNow(needle) until it finds something (`until_present`) or nothing, or `wait_s`
// has passed.
json PollHostProcesses(const std::string& needle, double wait_s, bool until_present,
                       std::chrono::milliseconds every) {
  auto t0 = std::chrono::steady_clock::now();
  auto deadline = t0 + std::chrono::duration<double>(wait_s);
  json found = FindNow(needle);
  while (found.empty() == until_present && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(every);
    found = FindNow(needle);
  }
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {{"process", needle}, {"found", found}, {"waited_seconds", waited}};
}

}  // namespace

json ScanHostProcesses(const std::string& needle, double wait_s) {
  return PollHostProcesses(needle, wait_s, /*until_present=*/false, std::chrono::milliseconds(50));
}

json AwaitHostProcess(const std::string& needle, double wait_s) {
  return PollHostProcesses(needle, wait_s, /*until_present=*/true, std::chrono::milliseconds(20));
}

}  // namespace sandcheck
