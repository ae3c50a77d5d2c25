#include "backend/common/probe_cache.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

namespace sbx::backend {

std::string ProbeKey(const std::string& binary, const std::string& extra) {
  struct stat st {};
  stat(binary.c_str(), &st);
  struct utsname u {};
  uname(&u);
  std::ifstream b("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(b, boot);
  return fmt::format("{} {} {} {} {} {} {}", binary, st.st_size, st.st_mtim.tv_sec, st.st_ino,
                     u.release, boot, extra);
}

std::optional<nlohmann::json> ReadProbeCache(const std::string& file, const std::string& key) {
  std::ifstream f(file);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("key") || j["key"] != key || !j.contains("answer") ||
      !j["answer"].is_object()) {
    return std::nullopt;
  }
  const nlohmann::json& a = j["answer"];
  // A damaged or foreign file is no answer (probe again), never an exception: every field the
  // backends read must have its type.
  if (!a.contains("ok") || !a["ok"].is_boolean()) return std::nullopt;
  if (a.contains("unix_time") && !a["unix_time"].is_number()) return std::nullopt;
  for (const char* k : {"version", "reason", "platform", "findings", "platforms"}) {
    if (a.contains(k) && !a[k].is_string()) return std::nullopt;
  }
  if (!a["ok"].get<bool>() &&
      static_cast<double>(time(nullptr)) - a.value("unix_time", 0.0) > 600) {
    return std::nullopt;
  }
  return a;
}

void WriteProbeCache(const std::string& file, const std::string& key,
                     const nlohmann::json& answer) {
  std::string tmp = fmt::format("{}.{}.tmp", file, getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    nlohmann::json a = answer;
    a["unix_time"] = static_cast<double>(time(nullptr));
    f << nlohmann::json{{"key", key}, {"answer", a}}.dump() << "\n";
    if (!f) return;
  }
  if (std::rename(tmp.c_str(), file.c_str()) != 0) unlink(tmp.c_str());
}

}  // namespace sbx::backend
