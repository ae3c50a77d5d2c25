#include "host/kernel_identity.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace sandcheck {
namespace {

using nlohmann::json;

json FirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line) || line.empty()) return nullptr;
  return line;
}

}  // namespace

json HostKernelIdentity() {
  json btime = nullptr;
  std::ifstream stat("/proc/stat");
  for (std::string line; std::getline(stat, line);) {
    if (line.rfind("btime ", 0) == 0) {
      btime = std::strtoll(line.c_str() + 6, nullptr, 10);
      break;
    }
  }
  return {{"boot_id", FirstLine("/proc/sys/kernel/random/boot_id")},
          {"btime", btime},
          {"version", FirstLine("/proc/version")}};
}

json HarnessNamespaces() {
  json out = json::object();
  for (const char* ns : {"pid", "mnt", "net", "ipc", "uts", "user", "cgroup"}) {
    struct stat st {};
    std::string path = std::string("/proc/self/ns/") + ns;
    out[ns] = ::stat(path.c_str(), &st) == 0 ? json(static_cast<uint64_t>(st.st_ino)) : json();
  }
  return out;
}

}  // namespace sandcheck
