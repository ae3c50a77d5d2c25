#include "host/host_facts.h"

#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace sandcheck {
namespace {

bool Exists(const char* p) {
  struct stat st;
  return ::stat(p, &st) == 0;
}

std::string OsName() {
  std::ifstream in("/etc/os-release");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("PRETTY_NAME=", 0) == 0) {
      std::string v = line.substr(12);
      if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
      return v;
    }
  }
  return "unknown";
}

long long MemTotalBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  long long kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemTotal:") return kb * 1024;
  }
  return 0;
}

std::string CgroupLayout() {
  if (Exists("/sys/fs/cgroup/cgroup.controllers")) return "v2";
  if (Exists("/sys/fs/cgroup/unified")) return "hybrid";
  if (Exists("/sys/fs/cgroup/memory")) return "v1";
  return "none";
}

}  // namespace

nlohmann::json HostFacts() {
  utsname u{};
  ::uname(&u);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return {{"hostname", host},
          {"os", OsName()},
          {"kernel", u.release},
          {"machine", u.machine},
          {"cpus", ::sysconf(_SC_NPROCESSORS_ONLN)},
          {"memory_bytes", MemTotalBytes()},
          {"cgroup", CgroupLayout()}};
}

}  // namespace sandcheck
