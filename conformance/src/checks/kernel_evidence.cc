#include "checks/kernel_evidence.h"

#include <fmt/format.h>

#include <cmath>

namespace sandcheck {
namespace {

using nlohmann::json;

const json* Str(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return nullptr;
  return &j[key];
}

const json* Num(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return nullptr;
  return &j[key];
}

std::string Short(const std::string& s) { return s.size() > 60 ? s.substr(0, 57) + "..." : s; }

}  // namespace

KernelFinding JudgeKernel(const json& sandbox, const json& host) {
  const json *sb = Str(sandbox, "boot_id"), *hb = Str(host, "boot_id");
  const json *sv = Str(sandbox, "version"), *hv = Str(host, "version");
  const json *st = Num(sandbox, "btime"), *ht = Num(host, "btime");
  if (sb && hb && *sb == *hb) {
    return {KernelSeen::kHost,
            fmt::format("its boot_id {} is the host's", sb->get<std::string>())};
  }
  const bool same_version = sv && hv && *sv == *hv;
  const bool same_btime =
      st && ht && std::fabs(st->get<double>() - ht->get<double>()) <= 2.0;
  if (same_version && same_btime) {
    return {KernelSeen::kHost,
            fmt::format("its /proc/version and boot time (btime {}) are the host's{}",
                        st->get<int64_t>(),
                        sb ? " (its boot_id differs: one mounted over the host's)"
                           : " (it shows no boot_id)")};
  }
  if (!sb && !sv && !st) {
    return {KernelSeen::kUnknown,
            "the sandbox shows no boot_id, /proc/version or btime to tell its kernel by"};
  }
  std::vector<std::string> why;
  if (sb && hb) why.push_back(fmt::format("boot_id {} (the host's: {})", sb->get<std::string>(),
                                          hb->get<std::string>()));
  if (sv && !same_version) why.push_back(fmt::format("/proc/version '{}'", Short(*sv)));
  if (st && !same_btime) why.push_back(fmt::format("btime {}", st->get<int64_t>()));
  if (why.empty()) why.push_back("facts that are not the host's");
  std::string joined;
  for (size_t i = 0; i < why.size(); ++i) joined += (i ? ", " : "") + why[i];
  return {KernelSeen::kOwn, "another kernel answers: " + joined};
}

NamespaceFinding JudgeNamespaces(const json& sandbox, const json& harness,
                                 const std::vector<std::string>& names) {
  NamespaceFinding f;
  for (const auto& n : names) {
    const json* s = Num(sandbox, n.c_str());
    const json* h = Num(harness, n.c_str());
    if (!s || !h)
      f.not_shown.push_back(n);
    else if (*s == *h)
      f.shared.push_back(n);
    else
      f.apart.push_back(n);
  }
  return f;
}

}  // namespace sandcheck
