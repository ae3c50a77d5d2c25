#include "scenario/nfr_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <regex>

#include "common/json_strict.h"
#include "scenario/catalog.h"

namespace sandcheck {
namespace {

bool Matches(const std::string& s, const char* re) { return std::regex_match(s, std::regex(re)); }

struct MethodName {
  NfrMethod method;
  const char* name;
};
constexpr MethodName kMethods[] = {{NfrMethod::kWarmExec, "warm_exec"},
                                   {NfrMethod::kPooledRun, "pooled_run"},
                                   {NfrMethod::kCreateExec, "create_exec"},
                                   {NfrMethod::kDestroy, "destroy"},
                                   {NfrMethod::kDestroyReclaim, "destroy_reclaim"},
                                   {NfrMethod::kOrphanSweep, "orphan_sweep"}};

sbx::StatusOr<NfrTarget> ReadTarget(const json& j, const std::string& path, bool limited) {
  ObjectReader r(j, path);
  NfrTarget t;
  t.limited = limited;
  t.id = r.String("id", "", Required::kYes);
  t.title = r.String("title", "");
  if (limited) {
    t.requirement = r.String("requirement", "", Required::kYes);
    t.level = r.String("level", "", Required::kYes);
    t.limit_s = r.Number("limit_ms", 0, Required::kYes) / 1000.0;
    t.percentile = r.Number("percentile", 95);
  }
  t.clock = r.String("clock", "harness");
  t.samples = static_cast<int>(r.Integer("samples", 0, Required::kYes));
  t.max_samples = static_cast<int>(r.Integer("max_samples", 0, Required::kYes));
  t.backends = r.StringList("backends", Required::kYes);
  std::string method = r.String("method", "", Required::kYes);
  t.command = r.String("command", "");
  t.setup = r.String("setup", "");
  t.command_by_backend = r.StringMap("command_by_backend");
  t.setup_by_backend = r.StringMap("setup_by_backend");
  std::string sandboxes = r.String("sandboxes", "");
  t.boundary = r.String("boundary", "", Required::kYes);
  RETURN_IF_ERROR(r.Finish());
  auto bad = [&](const std::string& key, const std::string& why) {
    return sbx::InvalidArgument(fmt::format("{}.{}: {}", path, key, why));
  };
  if (!Matches(t.id, "^[a-z0-9][a-z0-9-]*$")) return bad("id", "'" + t.id + "' is not [a-z0-9-]");
  if (limited) {
    if (!Matches(t.requirement, "^NFR-[0-9]+$") || !IsKnownRequirement(t.requirement)) {
      return bad("requirement", "'" + t.requirement + "' is not an NFR ID of the catalogue");
    }
    if (t.level != "MUST" && t.level != "SHOULD") return bad("level", "MUST or SHOULD");
    if (!(t.limit_s > 0)) return bad("limit_ms", "must be > 0");
    if (!(t.percentile > 0 && t.percentile <= 100)) return bad("percentile", "must be in (0, 100]");
  }
  if (t.clock != "harness" && t.clock != "target") return bad("clock", "'harness' or 'target'");
  if (t.samples < 1) return bad("samples", "must be >= 1");
  if (t.max_samples < t.samples) return bad("max_samples", "must be >= samples");
  for (const auto& b : t.backends) {
    if (b != "*" && !Matches(b, "^[a-z0-9][a-z0-9-]*$"))
      return bad("backends", "'" + b + "' is not a backend name or *");
  }
  if (std::count(t.backends.begin(), t.backends.end(), "*") && t.backends.size() > 1)
    return bad("backends", "\"*\" stands alone");
  bool known = false;
  for (const auto& m : kMethods) {
    if (method == m.name) {
      t.method = m.method;
      known = true;
    }
  }
  if (!known) {
    return bad("method", fmt::format("'{}' is not one of warm_exec, pooled_run, create_exec, "
                                     "destroy, destroy_reclaim, orphan_sweep",
                                     method));
  }
  bool exec_method = t.method == NfrMethod::kWarmExec || t.method == NfrMethod::kPooledRun ||
                     t.method == NfrMethod::kCreateExec;
  if (exec_method && t.command.empty()) return bad("command", "needed by " + method);
  if (!exec_method && !t.command.empty()) return bad("command", "not used by " + method);
  const bool destroys = t.method == NfrMethod::kDestroy || t.method == NfrMethod::kDestroyReclaim;
  if (destroys != !t.setup.empty())
    return bad("setup", "given for destroy and destroy_reclaim, and only for them");
  if (!t.command_by_backend.empty() && t.command.empty())
    return bad("command_by_backend", "only beside a command");
  if (!t.setup_by_backend.empty() && t.setup.empty())
    return bad("setup_by_backend", "only beside a setup");
  for (const auto* m : {&t.command_by_backend, &t.setup_by_backend}) {
    for (const auto& [b, text] : *m) {
      if (!Matches(b, "^[a-z0-9][a-z0-9-]*$"))
        return bad(m == &t.command_by_backend ? "command_by_backend" : "setup_by_backend",
                   "'" + b + "' is not a backend name");
      if (text.empty())
        return bad(m == &t.command_by_backend ? "command_by_backend" : "setup_by_backend",
                   "'" + b + "': empty");
    }
  }
  if (t.method == NfrMethod::kOrphanSweep) {
    if (!Matches(sandboxes, "^[1-9][0-9]?$")) return bad("sandboxes", "1..99 (needed)");
    t.sandboxes = std::atoi(sandboxes.c_str());
    if (!t.RuntimeWide()) return bad("backends", "orphan_sweep is runtime-wide: []");
  } else if (!sandboxes.empty()) {
    return bad("sandboxes", "only for orphan_sweep");
  }
  return t;
}

}  // namespace

const char* NfrMethodName(NfrMethod m) {
  for (const auto& k : kMethods) {
    if (k.method == m) return k.name;
  }
  return "?";
}

const std::string& NfrTarget::CommandFor(const std::string& backend) const {
  auto it = command_by_backend.find(backend);
  return it == command_by_backend.end() ? command : it->second;
}

const std::string& NfrTarget::SetupFor(const std::string& backend) const {
  auto it = setup_by_backend.find(backend);
  return it == setup_by_backend.end() ? setup : it->second;
}

int NfrTarget::SamplesFor(int requested) const {
  int n = requested > 0 ? requested : samples;
  return std::clamp(n, 1, max_samples);
}

const NfrTarget* NfrSpec::Find(const std::string& id) const {
  for (const auto& t : targets) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

std::string NfrCheckId(const NfrSpec& spec, const NfrTarget& t, const std::string& backend) {
  if (t.RuntimeWide() || backend.empty()) return spec.name + "/" + t.id;
  std::string b;
  for (char c : backend) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    b.push_back(ok ? c : (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : '-');
  }
  return fmt::format("{}/{}-{}", spec.name, t.id, b);
}

sbx::StatusOr<NfrSpec> LoadNfrSpec(std::string_view text, const std::string& origin,
                                   const std::map<std::string, std::string>& overrides,
                                   std::set<std::string>* used) {
  auto wrap = [&](const sbx::Status& st) {
    return sbx::InvalidArgument(fmt::format("{}: {}", origin, st.message()));
  };
  ASSIGN_OR_RETURN(json raw, ParseJsonText(text, origin));
  if (!raw.is_object()) return wrap(sbx::InvalidArgument("a latency-target file is a JSON object"));
  NfrSpec s;
  s.origin = origin;
  if (raw.contains("variables") && !raw["variables"].is_object())
    return wrap(sbx::InvalidArgument("variables: expected an object"));
  if (sbx::Status st = ReadVariables(raw.contains("variables") ? &raw["variables"] : nullptr,
                                     overrides, used, &s.variables, &s.values);
      !st.ok()) {
    return wrap(st);
  }
  json body = raw;
  body.erase("variables");
  body.erase("$schema");
  if (sbx::Status st = SubstituteVariables(body, s.values, ""); !st.ok()) return wrap(st);
  ObjectReader r(body, "");
  int64_t format = r.Integer("format", 0, Required::kYes);
  std::string kind = r.String("kind", "", Required::kYes);
  s.name = r.String("name", "", Required::kYes);
  s.title = r.String("title", "");
  s.source = r.String("source", "");
  const json* floor = r.Object("floor");
  const json* targets = r.Array("targets", Required::kYes);
  const json* measurements = r.Array("measurements");
  if (sbx::Status st = r.Finish(); !st.ok()) return wrap(st);
  if (format != 1) return wrap(sbx::InvalidArgument(fmt::format("format: {} is not 1", format)));
  if (kind != "nfr") return wrap(sbx::InvalidArgument("kind: must be \"nfr\""));
  if (!Matches(s.name, "^[a-z0-9][a-z0-9-]*$"))
    return wrap(sbx::InvalidArgument("name: '" + s.name + "' is not [a-z0-9-]"));
  if (floor) {
    ObjectReader fr(*floor, "floor");
    if (fr.Has("argv")) s.floor_argv = fr.StringList("argv");
    s.floor_samples = static_cast<int>(fr.Integer("samples", 200));
    s.floor_boundary = fr.String("boundary", "");
    if (sbx::Status st = fr.Finish(); !st.ok()) return wrap(st);
    if (s.floor_argv.empty() || s.floor_argv[0].empty() || s.floor_argv[0][0] != '/')
      return wrap(sbx::InvalidArgument("floor.argv: an absolute program path first"));
    if (s.floor_samples < 0 || s.floor_samples > 100000)
      return wrap(sbx::InvalidArgument("floor.samples: 0..100000"));
  }
  if (targets->empty()) return wrap(sbx::InvalidArgument("targets: at least one"));
  std::set<std::string> ids;
  for (auto [arr, limited, key] :
       {std::tuple{targets, true, "targets"}, std::tuple{measurements, false, "measurements"}}) {
    if (!arr) continue;
    for (size_t i = 0; i < arr->size(); ++i) {
      std::string path = fmt::format("{}[{}]", key, i);
      auto t = ReadTarget((*arr)[i], path, limited);
      if (!t.ok()) return wrap(t.status());
      if (!ids.insert(t->id).second)
        return wrap(sbx::InvalidArgument(fmt::format("{}.id: duplicate '{}'", path, t->id)));
      s.targets.push_back(std::move(*t));
    }
  }
  return s;
}

sbx::StatusOr<NfrSpec> LoadNfrByName(const std::string& name_or_file,
                                     const std::map<std::string, std::string>& overrides,
                                     std::set<std::string>* used) {
  ASSIGN_OR_RETURN(Source src, FindScenarioSource(name_or_file));
  if (!IsNfrDocument(src.text)) {
    return sbx::InvalidArgument(
        fmt::format("{}: not a latency-target file (\"kind\": \"nfr\")", src.origin));
  }
  return LoadNfrSpec(src.text, src.origin, overrides, used);
}

}  // namespace sandcheck
