#include "drivers/target.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace sandcheck {
namespace {

using nlohmann::json;

const std::set<std::string>& ExecStatuses() {
  static const std::set<std::string> k = {"ok", "timeout", "resource_exceeded", "tool_error",
                                          "sandbox_unavailable"};
  return k;
}

sbx::Status Bad(const std::string& op, const std::string& what, const json& j) {
  std::string dump = j.dump();
  if (dump.size() > 300) dump = dump.substr(0, 300) + "...";
  return sbx::InvalidArgument(fmt::format("{} answer: {} (got {})", op, what, dump));
}

}  // namespace

bool TargetInfo::Has(const std::string& feature) const {
  return std::find(features.begin(), features.end(), feature) != features.end();
}

bool TargetInfo::HasOn(const std::string& feature, const std::string& backend) const {
  if (!Has(feature)) return false;
  auto own = backend_features.find(backend);
  if (backend.empty() || own == backend_features.end()) return true;
  auto names = [&](const std::vector<std::string>& v) {
    return std::find(v.begin(), v.end(), feature) != v.end();
  };
  if (names(own->second)) return true;
  return std::none_of(backend_features.begin(), backend_features.end(),
                      [&](const auto& kv) { return names(kv.second); });
}

sbx::StatusOr<TargetInfo> ParseInfo(const json& j) {
  if (!j.is_object()) return Bad("info", "not a JSON object", j);
  TargetInfo info;
  info.raw = j;
  if (!j.contains("name") || !j["name"].is_string())
    return Bad("info", "'name' (a string) missing", j);
  info.name = j["name"].get<std::string>();
  if (j.contains("version")) {
    if (!j["version"].is_string()) return Bad("info", "'version' is not a string", j);
    info.version = j["version"].get<std::string>();
  }
  for (const char* key : {"backends", "features"}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_array()) return Bad("info", fmt::format("'{}' is not an array", key), j);
    for (const auto& v : j[key]) {
      if (!v.is_string()) return Bad("info", fmt::format("'{}' holds a non-string", key), j);
      (std::string(key) == "backends" ? info.backends : info.features)
          .push_back(v.get<std::string>());
    }
  }
  if (j.contains("backend_features")) {
    const json& bf = j["backend_features"];
    if (!bf.is_object()) return Bad("info", "'backend_features' is not an object", j);
    for (const auto& [backend, list] : bf.items()) {
      if (!list.is_array()) return Bad("info", "'backend_features." + backend + "' is not an array", j);
      auto& out = info.backend_features[backend];
      for (const auto& v : list) {
        if (!v.is_string())
          return Bad("info", "'backend_features." + backend + "' holds a non-string", j);
        out.push_back(v.get<std::string>());
      }
    }
  }
  return info;
}

sbx::StatusOr<ExecAnswer> ParseExecAnswer(const json& j) {
  if (!j.is_object()) return Bad("exec", "not a JSON object", j);
  ExecAnswer a;
  if (!j.contains("status") || !j["status"].is_string())
    return Bad("exec", "'status' (a string) missing", j);
  a.status = j["status"].get<std::string>();
  if (!ExecStatuses().count(a.status))
    return Bad("exec", fmt::format("unknown status '{}'", a.status), j);
  if (j.contains("state")) {
    if (!j["state"].is_string()) return Bad("exec", "'state' is not a string", j);
    a.state = j["state"].get<std::string>();
    if (a.state != "RUNNING" && a.state != "CRASHED") {
      return Bad("exec", fmt::format("unknown state '{}' (RUNNING or CRASHED)", a.state), j);
    }
  }
  if (!j.contains("exit")) return Bad("exec", "'exit' missing", j);
  if (j["exit"].is_null()) {
    a.exit_code = -1;
  } else if (j["exit"].is_number_integer()) {
    a.exit_code = j["exit"].get<int>();
  } else {
    return Bad("exec", "'exit' is not an integer", j);
  }
  for (auto [key, dst] :
       {std::pair{"stdout", &a.stdout_text}, std::pair{"stderr", &a.stderr_text}}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_string()) return Bad("exec", fmt::format("'{}' is not a string", key), j);
    *dst = j[key].get<std::string>();
  }
  if (j.contains("seconds") && !j["seconds"].is_null()) {
    if (!j["seconds"].is_number()) return Bad("exec", "'seconds' is not a number", j);
    a.seconds = j["seconds"].get<double>();
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    static const std::set<std::string> known = {"status", "state",  "exit",
                                                "stdout", "stderr", "seconds"};
    if (!known.count(it.key())) a.extra[it.key()] = it.value();
  }
  return a;
}

sbx::StatusOr<OpAnswer> ParseOpAnswer(const json& j) {
  if (!j.is_object()) return Bad("operation", "not a JSON object", j);
  OpAnswer a;
  if (j.contains("seconds") && !j["seconds"].is_null()) {
    if (!j["seconds"].is_number()) return Bad("operation", "'seconds' is not a number", j);
    a.seconds = j["seconds"].get<double>();
  }
  return a;
}

sbx::StatusOr<std::unique_ptr<Target>> Target::ForThread() {
  return sbx::Unsupported(fmt::format("the {} driver cannot be shared between threads", Kind()));
}

sbx::StatusOr<OpAnswer> Target::Suspend(const std::string& /*sandbox*/) {
  return sbx::Unsupported(fmt::format("the {} driver has no suspend", Kind()));
}

sbx::StatusOr<OpAnswer> Target::Resume(const std::string& /*sandbox*/) {
  return sbx::Unsupported(fmt::format("the {} driver has no resume", Kind()));
}

sbx::StatusOr<ExecAnswer> Target::RunPooled(const json& /*request*/, const std::string& /*cmd*/,
                                            double /*timeout_s*/) {
  return sbx::Unsupported(fmt::format(
      "the {} driver has no one-shot run through a warm pool (adapter protocol v1 has none)",
      Kind()));
}

sbx::StatusOr<ForeignAnswer> Target::CallAs(const std::string& /*caller*/,
                                            const std::string& /*op*/,
                                            const std::string& /*sandbox*/,
                                            const std::string& /*cmd*/, double /*timeout_s*/) {
  return sbx::Unsupported(fmt::format(
      "the {} driver has no callers to tell apart (the reference runtime in process serves "
      "whoever holds it; its callers are sandboxd's: run against sandboxd over HTTP with "
      "--second-token)",
      Kind()));
}

sbx::StatusOr<Target::OrphanSweep> Target::MeasureOrphanSweep(int /*samples*/, int /*sandboxes*/,
                                                              const std::string& /*backend*/) {
  return sbx::Unsupported(fmt::format(
      "the {} driver cannot kill the target's runtime and watch its reaper (only the reference "
      "runtime in process, or an adapter listing the feature orphan_sweep)",
      Kind()));
}

sbx::StatusOr<std::unique_ptr<Target>> MakeTarget(const TargetOptions& options) {
  const std::string& spec = options.spec;
  if (spec == "reference") return MakeReferenceTarget(options);
  if (spec.rfind("adapter:", 0) == 0) {
    std::string path = spec.substr(8);
    if (path.empty()) return sbx::InvalidArgument("--target adapter:PATH needs a path");
    return MakeAdapterTarget(path, options);
  }
  if (spec.rfind("http://", 0) == 0 || spec.rfind("unix:", 0) == 0)
    return MakeHttpTarget(spec, options);
  if (spec.rfind("https://", 0) == 0) {
    return sbx::InvalidArgument(
        "--target https:// is not supported; use http:// on a trusted link or unix:PATH");
  }
  return sbx::InvalidArgument(fmt::format(
      "--target '{}': expected reference, http://HOST:PORT, unix:PATH or adapter:PATH", spec));
}

}  // namespace sandcheck
