#include "scenario.h"

#include <fmt/format.h>

#include <algorithm>
#include <regex>

#include "json_strict.h"

namespace sandcheck {
namespace {

using VT = json::value_t;

bool MatchesName(const std::string& s, const char* re) {
  return std::regex_match(s, std::regex(re));
}

bool HasControlChars(const std::string& s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

}  // namespace

sbx::Status ReadVariables(const json* vars, const std::map<std::string, std::string>& overrides,
                          std::set<std::string>* used, std::vector<Variable>* variables,
                          std::map<std::string, std::string>* values) {
  if (!vars) return sbx::Status::Ok();
  for (auto it = vars->begin(); it != vars->end(); ++it) {
    std::string path = fmt::format("variables.{}", it.key());
    if (!MatchesName(it.key(), "^[a-z][a-z0-9_]*$")) {
      return sbx::InvalidArgument(fmt::format("{}: a variable name is [a-z][a-z0-9_]*", path));
    }
    ObjectReader r(*it, path);
    Variable v;
    v.name = it.key();
    v.default_value = r.String("default", "", Required::kYes);
    v.pattern = r.String("pattern", "");
    v.description = r.String("description", "");
    RETURN_IF_ERROR(r.Finish());
    std::regex re;
    if (!v.pattern.empty()) {
      try {
        re = std::regex(v.pattern, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        return sbx::InvalidArgument(
            fmt::format("{}.pattern: not a valid regex: {}", path, e.what()));
      }
    }
    auto check = [&](const std::string& value, const std::string& where) -> sbx::Status {
      if (HasControlChars(value)) {
        return sbx::InvalidArgument(
            fmt::format("{}: value of '{}' holds a control character", where, v.name));
      }
      if (!v.pattern.empty() && !std::regex_match(value, re)) {
        return sbx::InvalidArgument(fmt::format("{}: value '{}' of variable '{}' does not match {}",
                                                where, value, v.name, v.pattern));
      }
      return sbx::Status::Ok();
    };
    RETURN_IF_ERROR(check(v.default_value, path + ".default"));
    std::string value = v.default_value;
    if (auto o = overrides.find(v.name); o != overrides.end()) {
      RETURN_IF_ERROR(check(o->second, fmt::format("--var {}", v.name)));
      value = o->second;
      if (used) used->insert(v.name);
    }
    (*values)[v.name] = value;
    variables->push_back(std::move(v));
  }
  return sbx::Status::Ok();
}

namespace {

const std::set<std::string>& ExecStatuses() {
  static const std::set<std::string> k = {"ok", "timeout", "resource_exceeded", "tool_error",
                                          "sandbox_unavailable"};
  return k;
}

// Where an expectation of the `expect` kind sits: the task's own, its `then` command's, or one
// alternative of `any_of`. They share one vocabulary; some keys belong to one level only.
enum class ExpectLevel { kTask, kThen, kAlternative };

// Reads an expectation object (docs/scenarios.md, kind `expect`) into its normalised form: every
// key present, lists for "string or list", defaults filled in.
sbx::StatusOr<json> ReadExpectation(const json& in, const std::string& path, ExpectLevel level) {
  ObjectReader r(in, path);
  json out = json::object();
  std::string first_error;
  auto fail = [&](const std::string& key, const std::string& message) {
    if (first_error.empty()) first_error = fmt::format("{}.{}: {}", path, key, message);
  };
  // A string or a list of strings, as a list.
  auto strings = [&](const char* key) {
    json list = json::array();
    if (in.is_object() && in.contains(key)) {
      r.Ignore(key);
      const json& v = in[key];
      if (v.is_string()) {
        list.push_back(v);
      } else if (v.is_array() &&
                 std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_string(); })) {
        list = v;
      } else {
        fail(key, "expected a string or a list of strings");
      }
    }
    out[key] = list;
    return list;
  };
  bool has_any_of = in.is_object() && in.contains("any_of");
  json status = strings("status");
  if (status.empty() && level != ExpectLevel::kAlternative && !has_any_of) status = {"ok"};
  for (const auto& st : status) {
    if (!ExecStatuses().count(st.get<std::string>())) {
      fail("status", fmt::format("'{}' is not one of ok, timeout, resource_exceeded, tool_error, "
                                 "sandbox_unavailable",
                                 st.get<std::string>()));
    }
  }
  out["status"] = status;
  out["state"] = r.String("state", "");
  if (out["state"] != "" && out["state"] != "RUNNING" && out["state"] != "CRASHED")
    fail("state", "RUNNING, CRASHED or \"\" (any)");
  out["exit"] = nullptr;
  if (in.is_object() && in.contains("exit")) {
    r.Ignore("exit");
    if (in["exit"].is_number_integer())
      out["exit"] = in["exit"];
    else if (!in["exit"].is_null())
      fail("exit", "expected an integer (or null: not checked)");
  }
  out["exit_nonzero"] = r.Bool("exit_nonzero", false);
  if (!out["exit"].is_null() && out["exit_nonzero"].get<bool>())
    fail("exit_nonzero", "give exit or exit_nonzero, not both");
  for (const char* key :
       {"stdout_contains", "stdout_not_contains", "stderr_contains", "output_not_contains"}) {
    strings(key);
  }
  for (const char* key :
       {"stdout_matches", "stdout_not_matches", "output_matches", "output_not_matches"}) {
    for (const auto& re : strings(key)) {
      try {
        std::regex check(re.get<std::string>(), std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        fail(key, fmt::format("'{}' is not a valid regex: {}", re.get<std::string>(), e.what()));
      }
    }
  }
  out["stdout_equals"] = nullptr;
  if (in.is_object() && in.contains("stdout_equals")) {
    r.Ignore("stdout_equals");
    if (in["stdout_equals"].is_string())
      out["stdout_equals"] = in["stdout_equals"];
    else if (!in["stdout_equals"].is_null())
      fail("stdout_equals", "expected a string");
  }
  out["json"] = json::object();
  if (const json* j = r.Object("json")) {
    for (auto it = j->begin(); it != j->end(); ++it) {
      const std::string& ptr = it.key();
      try {
        json::json_pointer check(ptr);
      } catch (const json::exception& e) {
        fail("json", fmt::format("'{}' is not a JSON pointer (RFC 6901): {}", ptr, e.what()));
      }
      const json& v = it.value();
      if (v.is_object()) {
        if (v.empty()) fail("json", fmt::format("'{}': give min and/or max", ptr));
        for (auto b = v.begin(); b != v.end(); ++b) {
          if ((b.key() != "min" && b.key() != "max") || !b.value().is_number()) {
            fail("json",
                 fmt::format("'{}': a bound object holds numbers \"min\" and/or \"max\"", ptr));
          }
        }
      } else if (v.is_array()) {
        fail("json", fmt::format("'{}': expected a scalar or {{\"min\",\"max\"}}", ptr));
      }
    }
    out["json"] = *j;
  }
  out["max_seconds"] = r.Number("max_seconds", 0);
  if (out["max_seconds"].get<double>() < 0) fail("max_seconds", "must be >= 0 (0 = none)");
  // A number with bounds, from the target's usage report when it gives one, else from stdout.
  out["figure"] = nullptr;
  if (const json* fig = r.Object("figure")) {
    ObjectReader fr(*fig, path + ".figure");
    std::string usage = fr.String("usage", "");
    std::string ptr = fr.String("json", "");
    std::string last = fr.String("last_match", "");
    std::string what = fr.String("what", !usage.empty() ? usage : !ptr.empty() ? ptr : last);
    json f = {{"usage", usage}, {"json", ptr}, {"last_match", last}, {"what", what}};
    for (const char* b : {"min", "max"}) {
      if (fr.Has(b)) f[b] = fr.Number(b, 0);
    }
    RETURN_IF_ERROR(fr.Finish());
    if (usage.empty() && ptr.empty() && last.empty())
      fail("figure", "give usage, json and/or last_match");
    if (!ptr.empty() && !last.empty()) fail("figure", "give json or last_match, not both");
    if (!last.empty()) {
      try {
        std::regex re(last, std::regex::ECMAScript);
        if (re.mark_count() != 1) fail("figure.last_match", "the regex must hold exactly one group");
      } catch (const std::regex_error& e) {
        fail("figure.last_match", fmt::format("'{}' is not a valid regex: {}", last, e.what()));
      }
    }
    if (!usage.empty() && !MatchesName(usage, "^[a-z_]+$")) fail("figure.usage", "[a-z_]+");
    if (!ptr.empty()) {
      try {
        json::json_pointer check(ptr);
      } catch (const json::exception& e) {
        fail("figure.json", fmt::format("'{}' is not a JSON pointer: {}", ptr, e.what()));
      }
    }
    if (!f.contains("min") && !f.contains("max")) fail("figure", "give min and/or max");
    out["figure"] = f;
  }
  if (level == ExpectLevel::kThen) {
    out["command"] = r.String("command", "", Required::kYes);
    out["after_revert"] = r.Bool("after_revert", false);
    out["timeout_s"] = r.Number("timeout_s", 20);
    if (in.is_object() && in.contains("command") && out["command"] == "") fail("command", "empty");
    if (out["timeout_s"].get<double>() <= 0) fail("timeout_s", "must be > 0");
  }
  if (level == ExpectLevel::kTask) {
    strings("backend_in");
    strings("answer_has");
    out["answer_min"] = json::object();
    if (const json* m = r.Object("answer_min")) {
      for (auto it = m->begin(); it != m->end(); ++it) {
        if (!it.value().is_number() || it.key().empty())
          fail("answer_min", fmt::format("'{}': expected a number (the least the figure may be)",
                                         it.key()));
      }
      out["answer_min"] = *m;
    }
    out["may_refuse"] = r.Bool("may_refuse", false);
    out["then"] = nullptr;
    if (const json* then = r.Object("then")) {
      auto t = ReadExpectation(*then, path + ".then", ExpectLevel::kThen);
      if (!t.ok()) return t.status();
      out["then"] = *t;
    }
    out["any_of"] = json::array();
    if (const json* alts = r.Array("any_of")) {
      if (alts->size() < 2) fail("any_of", "give at least two alternatives");
      for (size_t i = 0; i < alts->size(); ++i) {
        auto a = ReadExpectation((*alts)[i], fmt::format("{}.any_of[{}]", path, i),
                                 ExpectLevel::kAlternative);
        if (!a.ok()) return a.status();
        out["any_of"].push_back(*a);
      }
    }
    out["host_absent"] = nullptr;
    if (const json* h = r.Object("host_absent")) {
      ObjectReader hr(*h, path + ".host_absent");
      std::string process = hr.String("process", "", Required::kYes);
      std::string after = hr.String("after", "task");
      bool required = hr.Bool("required", false);
      double wait_s = hr.Number("wait_s", 2);
      RETURN_IF_ERROR(hr.Finish());
      if (process.size() < 8) {
        fail("host_absent.process",
             "at least 8 characters (it is matched against every process "
             "of the host)");
      }
      if (after != "task" && after != "destroy") fail("host_absent.after", "'task' or 'destroy'");
      if (wait_s < 0 || wait_s > 30) fail("host_absent.wait_s", "0..30");
      out["host_absent"] = {
          {"process", process}, {"after", after}, {"required", required}, {"wait_s", wait_s}};
    }
  }
  RETURN_IF_ERROR(r.Finish());
  if (!first_error.empty()) return sbx::InvalidArgument(first_error);
  return out;
}

// Validates params against the kind's spec and fills defaults.
sbx::StatusOr<json> ReadParams(const KindSpec& kind, const json* params, const std::string& path) {
  if (kind.kind == "expect")
    return ReadExpectation(params ? *params : json::object(), path, ExpectLevel::kTask);
  json in = params ? *params : json::object();
  json out = json::object();
  ObjectReader r(in, path);
  for (const ParamSpec& p : kind.params) {
    Required req = p.required ? Required::kYes : Required::kNo;
    switch (p.type) {
      case VT::string:
        out[p.name] = r.String(p.name, p.default_value.get<std::string>(), req);
        break;
      case VT::boolean:
        out[p.name] = r.Bool(p.name, p.default_value.get<bool>(), req);
        break;
      case VT::number_integer:
        out[p.name] = r.Integer(p.name, p.default_value.get<int64_t>(), req);
        break;
      default:
        out[p.name] = r.Number(p.name, p.default_value.get<double>(), req);
        break;
    }
  }
  RETURN_IF_ERROR(r.Finish());
  if (kind.kind == "cpu_throttled") {
    if (out["min_ratio"].get<double>() <= 1.0)
      return sbx::InvalidArgument(path + ".min_ratio: must be > 1");
    int64_t runs = out["calibration_runs"].get<int64_t>();
    if (runs < 1 || runs > 10)
      return sbx::InvalidArgument(path + ".calibration_runs: must be 1..10");
    if (out["calibration_millicores"].get<int64_t>() < 0) {
      return sbx::InvalidArgument(path + ".calibration_millicores: must be >= 0");
    }
  }
  if (kind.kind == "clean_after_revert" && out["expect_files"].get<int64_t>() < 0) {
    return sbx::InvalidArgument(path + ".expect_files: must be >= 0");
  }
  return out;
}

sbx::StatusOr<CheckSpec> ReadCheck(const json& j, const std::string& path, const Scenario& s,
                                   bool task_level) {
  ObjectReader r(j, path);
  CheckSpec c;
  c.id = r.String("id", "", Required::kYes);
  c.title = r.String("title", "");
  c.requirements = r.StringList("requirements", Required::kYes);
  c.level = r.String("level", "", Required::kYes);
  c.features = r.StringList("features");
  c.requires_pass = r.StringList("requires_pass");
  c.kind = r.String("kind", "", Required::kYes);
  const json* params = r.Object("params");
  RETURN_IF_ERROR(r.Finish());
  if (!MatchesName(c.id, "^[a-z0-9][a-z0-9-]*/[a-z0-9][a-z0-9-]*$") ||
      c.id.rfind(s.name + "/", 0) != 0) {
    return sbx::InvalidArgument(
        fmt::format("{}.id: '{}' must be '{}/<name>' ([a-z0-9-])", path, c.id, s.name));
  }
  if (c.requirements.empty()) return sbx::InvalidArgument(path + ".requirements: at least one ID");
  for (const auto& id : c.requirements) {
    if (!MatchesName(id, "^[A-Z]+-[0-9]+$")) {
      return sbx::InvalidArgument(
          fmt::format("{}.requirements: '{}' is not a requirement ID", path, id));
    }
  }
  if (c.level != "MUST" && c.level != "SHOULD") {
    return sbx::InvalidArgument(fmt::format("{}.level: '{}' is not MUST or SHOULD", path, c.level));
  }
  const KindSpec* kind = FindKind(c.kind);
  if (!kind || kind->task_level != task_level) {
    std::vector<std::string> names;
    for (const auto& k : CheckKinds()) {
      if (k.task_level == task_level) names.push_back(k.kind);
    }
    return sbx::InvalidArgument(fmt::format("{}.kind: '{}' is not a {} check kind (one of: {})",
                                            path, c.kind, task_level ? "task" : "scenario-level",
                                            Join(names, ", ")));
  }
  ASSIGN_OR_RETURN(c.params, ReadParams(*kind, params, path + ".params"));
  return c;
}

// Reads a sandbox object into `t`: the keys given replace t's (a task's own sandbox starts from
// the scenario's); the keys not given stay as they are.
sbx::Status ReadSandboxInto(const json& j, const std::string& path, SandboxTemplate* t) {
  ObjectReader r(j, path);
  t->template_name = r.String("template", t->template_name);
  t->backend = r.String("backend", t->backend);
  t->trust = r.String("trust", t->trust);
  t->tenant = r.String("tenant", t->tenant);
  t->tool = r.String("tool", t->tool);
  if (const json* limits = r.Object("limits")) {
    ObjectReader lr(*limits, path + ".limits");
    json out = json::object();
    for (const char* k : {"cpu_millicores", "memory_bytes", "pids", "disk_bytes", "fds"}) {
      int64_t v = lr.Integer(k, 0);
      if (v < 0) lr.Fail(k, "must be >= 0");
      if (v > 0) out[k] = v;
    }
    RETURN_IF_ERROR(lr.Finish());
    t->limits = out;
  }
  if (const json* egress = r.Object("egress")) {
    ObjectReader er(*egress, path + ".egress");
    json rules = json::array();
    if (const json* arr = er.Array("rules")) {
      for (size_t i = 0; i < arr->size(); ++i) {
        std::string p = fmt::format("{}.egress.rules[{}]", path, i);
        ObjectReader rr((*arr)[i], p);
        std::string kind = rr.String("kind", "", Required::kYes);
        auto hosts = rr.StringList("hosts", Required::kYes);
        const json* ports = rr.Array("ports", Required::kYes);
        RETURN_IF_ERROR(rr.Finish());
        if (kind != "http" && kind != "tls")
          return sbx::InvalidArgument(p + ".kind: 'http' or 'tls'");
        if (hosts.empty()) return sbx::InvalidArgument(p + ".hosts: at least one host");
        if (ports->empty()) return sbx::InvalidArgument(p + ".ports: at least one port");
        for (const auto& port : *ports) {
          if (!port.is_number_integer() || port.get<int64_t>() < 1 || port.get<int64_t>() > 65535) {
            return sbx::InvalidArgument(p + ".ports: integers 1..65535");
          }
        }
        rules.push_back({{"kind", kind}, {"hosts", hosts}, {"ports", *ports}});
      }
    }
    RETURN_IF_ERROR(er.Finish());
    t->egress = {{"rules", rules}};
  }
  if (r.Has("services")) t->services = r.StringMap("services");
  if (r.Has("env")) t->env = r.StringMap("env");
  if (r.Has("secrets")) t->secrets = r.StringMap("secrets");
  RETURN_IF_ERROR(r.Finish());
  for (const auto& [name, fixture] : t->services) {
    if (fixture != "mirror") {
      return sbx::InvalidArgument(
          fmt::format("{}.services.{}: unknown fixture '{}' (known: mirror)", path, name, fixture));
    }
  }
  static const std::set<std::string> kTrust = {"", "first_party", "verified", "untrusted",
                                               "unverified"};
  if (!kTrust.count(t->trust)) {
    return sbx::InvalidArgument(fmt::format(
        "{}.trust: '{}' is not first_party, verified, untrusted or unverified", path, t->trust));
  }
  for (const auto* m : {&t->env, &t->secrets}) {
    for (const auto& [k, v] : *m) {
      if (!MatchesName(k, "^[A-Za-z_][A-Za-z0-9_]*$")) {
        return sbx::InvalidArgument(fmt::format("{}.{}: '{}' is not an environment variable name",
                                                path, m == &t->env ? "env" : "secrets", k));
      }
    }
  }
  return sbx::Status::Ok();
}

sbx::Status ReadSandbox(const json* j, Scenario* s) {
  if (!j) return sbx::Status::Ok();
  return ReadSandboxInto(*j, "sandbox", &s->sandbox);
}

// The {{harness.NAME}} references in any string (or key) of `j`.
void CollectHarnessRefs(const json& j, std::set<std::string>* out) {
  static const std::regex kRef(R"(\{\{harness\.([a-z_]+)\}\})");
  auto scan = [&](const std::string& text) {
    for (auto it = std::sregex_iterator(text.begin(), text.end(), kRef);
         it != std::sregex_iterator(); ++it) {
      out->insert((*it)[1].str());
    }
  };
  if (j.is_string()) {
    scan(j.get<std::string>());
  } else if (j.is_array() || j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (j.is_object()) scan(it.key());
      CollectHarnessRefs(it.value(), out);
    }
  }
}

}  // namespace

const std::vector<KindSpec>& CheckKinds() {
  static const std::vector<KindSpec> kKinds = {
      {"allowed_download",
       true,
       {{"content", VT::string, true, ""},
        {"file", VT::string, false, ""},
        {"host", VT::string, true, ""}}},
      {"name_not_resolved",
       true,
       {{"name", VT::string, true, ""}, {"require_nxdomain", VT::boolean, false, false}}},
      {"gateway_refused", true, {{"address", VT::string, true, ""}}},
      // SCN-5, RES-1: fixed work against the same work without the cap. The slowdown must match
      // the requested quota within [min_ratio, max_ratio] (0: no upper bound), and where the
      // target reports usage, the capped run's host CPU share must not pass the cap.
      {"cpu_throttled",
       true,
       {{"min_ratio", VT::number_float, false, 1.6},
        {"max_ratio", VT::number_float, false, 0.0},
        {"calibration_millicores", VT::number_integer, false, 0},
        {"calibration_runs", VT::number_integer, false, 2}}},
      // SCN-6, RES-2, RES-8, FAIL-3: the breach ends the sandbox — at the REQUESTED limit
      // (limit_bytes, 0: the sandbox's memory_bytes): the hog's last progress line ("allocated
      // N MiB") is below it and at least progress_floor of it, a reported usage peak is within
      // peak_slack of it, `survivor_marker` (printed by the shell after the hog) is absent; after
      // the revert the recover command runs, then `under_command` (an allocation below the
      // limit) completes and `over_command` (one a little above it) is ended too.
      {"resource_exceeded",
       true,
       {{"recover_command", VT::string, false, "echo ok"},
        {"recover_stdout", VT::string, false, "ok"},
        {"limit_bytes", VT::number_integer, false, 0},
        {"progress_floor", VT::number_float, false, 0.5},
        {"peak_slack", VT::number_float, false, 0.05},
        {"survivor_marker", VT::string, false, ""},
        {"under_command", VT::string, false, ""},
        {"under_stdout", VT::string, false, ""},
        {"over_command", VT::string, false, ""}}},
      {"exit_ok", true, {{"stdout_contains", VT::string, false, ""}}},
      // The general kind: what the exec answer, its output and (optionally) a follow-up command
      // must show. Lists accept a string too; see ReadExpectation and docs/scenarios.md.
      {"expect",
       true,
       {{"status", VT::array, false, json::array({"ok"})},
        {"state", VT::string, false, ""},
        {"exit", VT::number_integer, false, nullptr},
        {"exit_nonzero", VT::boolean, false, false},
        {"stdout_contains", VT::array, false, json::array()},
        {"stdout_not_contains", VT::array, false, json::array()},
        {"stderr_contains", VT::array, false, json::array()},
        {"output_not_contains", VT::array, false, json::array()},
        {"stdout_equals", VT::string, false, nullptr},
        {"stdout_matches", VT::array, false, json::array()},
        {"stdout_not_matches", VT::array, false, json::array()},
        {"output_matches", VT::array, false, json::array()},
        {"output_not_matches", VT::array, false, json::array()},
        {"json", VT::object, false, json::object()},
        {"max_seconds", VT::number_float, false, 0.0},
        {"backend_in", VT::array, false, json::array()},
        {"answer_has", VT::array, false, json::array()},
        {"answer_min", VT::object, false, json::object()},
        {"may_refuse", VT::boolean, false, false},
        {"then", VT::object, false, nullptr},
        {"any_of", VT::array, false, json::array()},
        {"host_absent", VT::object, false, nullptr}}},
      {"clean_after_revert", false, {{"expect_files", VT::number_integer, false, 0}}},
      {"revert_measured", false, {}},
  };
  return kKinds;
}

const std::vector<HarnessValueSpec>& HarnessValueSpecs() {
  static const std::vector<HarnessValueSpec> kValues = {
      {"pid", true, "the harness's own process id (a process the sandbox must not see)"},
      {"canary_tmp", true,
       "path of a world-readable file the harness plants in its host's /tmp for the run"},
      {"canary_var_tmp", true, "the same in its host's /var/tmp"},
      {"canary_content", true, "what the canary files hold (random per run)"},
      {"env_canary", true,
       "a random value the harness puts in its own environment as SANDCHECK_HOST_CREDENTIAL "
       "for the run (inherited by the adapters and runtimes it starts): a sandbox must not see "
       "it"},
      {"token", false, "random hex, new for every run"},
      {"token_number", false, "a random 7-digit number, new for every run"},
      {"mirror_addr", false,
       "ADDR:PORT of the mirror fixture (the service behind the scenario's services), if any"},
  };
  return kValues;
}

const HarnessValueSpec* FindHarnessValue(std::string_view name) {
  for (const auto& v : HarnessValueSpecs()) {
    if (name == v.name) return &v;
  }
  return nullptr;
}

std::string SubstituteHarness(const std::string& in,
                              const std::map<std::string, std::string>& values) {
  std::string out;
  size_t pos = 0;
  static constexpr std::string_view kOpen = "{{harness.";
  while (true) {
    size_t open = in.find(kOpen, pos);
    size_t close = open == std::string::npos ? open : in.find("}}", open);
    if (close == std::string::npos) break;
    std::string name = in.substr(open + kOpen.size(), close - open - kOpen.size());
    auto it = values.find(name);
    out += in.substr(pos, open - pos);
    out += it == values.end() ? in.substr(open, close + 2 - open) : it->second;
    pos = close + 2;
  }
  return out + in.substr(pos);
}

void SubstituteHarness(json& j, const std::map<std::string, std::string>& values) {
  if (j.is_string()) {
    j = SubstituteHarness(j.get<std::string>(), values);
  } else if (j.is_array()) {
    for (auto& x : j) SubstituteHarness(x, values);
  } else if (j.is_object()) {
    json out = json::object();
    for (auto it = j.begin(); it != j.end(); ++it) {
      json v = it.value();
      SubstituteHarness(v, values);
      out[SubstituteHarness(it.key(), values)] = std::move(v);
    }
    j = std::move(out);
  }
}

const KindSpec* FindKind(std::string_view kind) {
  for (const auto& k : CheckKinds()) {
    if (k.kind == kind) return &k;
  }
  return nullptr;
}

std::vector<const CheckSpec*> Scenario::AllChecks() const {
  std::vector<const CheckSpec*> out;
  for (const auto& t : tasks) {
    if (t.check) out.push_back(&*t.check);
  }
  for (const auto& c : checks) out.push_back(&c);
  return out;
}

const TaskSpec* Scenario::FindTask(const std::string& id) const {
  for (const auto& t : tasks) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

sbx::Status SubstituteVariables(json& j, const std::map<std::string, std::string>& values,
                                const std::string& path) {
  auto subst = [&](const std::string& in, const std::string& where) -> sbx::StatusOr<std::string> {
    std::string out;
    size_t pos = 0;
    while (true) {
      size_t open = in.find("{{", pos);
      if (open == std::string::npos) break;
      size_t close = in.find("}}", open + 2);
      if (close == std::string::npos) {
        return sbx::InvalidArgument(fmt::format("{}: unterminated '{{{{' in \"{}\"", where, in));
      }
      std::string name = in.substr(open + 2, close - open - 2);
      if (name.rfind("harness.", 0) == 0) {
        // Known only when the task runs (HarnessValueSpecs): left for the runner.
        if (!FindHarnessValue(std::string_view(name).substr(8))) {
          std::vector<std::string> known;
          for (const auto& v : HarnessValueSpecs())
            known.push_back(std::string("harness.") + v.name);
          return sbx::InvalidArgument(fmt::format("{}: unknown harness value '{}' (known: {})",
                                                  where, name, Join(known, ", ")));
        }
        out += in.substr(pos, close + 2 - pos);
        pos = close + 2;
        continue;
      }
      auto it = values.find(name);
      if (it == values.end()) {
        std::vector<std::string> declared;
        for (const auto& [k, v] : values) declared.push_back(k);
        return sbx::InvalidArgument(fmt::format("{}: unknown variable '{}' (declared: {})", where,
                                                name,
                                                declared.empty() ? "none" : Join(declared, ", ")));
      }
      out += in.substr(pos, open - pos);
      out += it->second;
      pos = close + 2;
    }
    out += in.substr(pos);
    return out;
  };
  if (j.is_string()) {
    ASSIGN_OR_RETURN(std::string s, subst(j.get<std::string>(), path));
    j = s;
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) {
      RETURN_IF_ERROR(SubstituteVariables(j[i], values, fmt::format("{}[{}]", path, i)));
    }
  } else if (j.is_object()) {
    json out = json::object();
    for (auto it = j.begin(); it != j.end(); ++it) {
      std::string where = path.empty() ? it.key() : fmt::format("{}.{}", path, it.key());
      ASSIGN_OR_RETURN(std::string key, subst(it.key(), where));
      json v = it.value();
      RETURN_IF_ERROR(SubstituteVariables(v, values, where));
      out[key] = std::move(v);
    }
    j = std::move(out);
  }
  return sbx::Status::Ok();
}

sbx::StatusOr<Scenario> LoadScenario(std::string_view text, const std::string& origin,
                                     const std::map<std::string, std::string>& overrides,
                                     std::set<std::string>* used) {
  auto wrap = [&](const sbx::Status& st) {
    return sbx::InvalidArgument(fmt::format("{}: {}", origin, st.message()));
  };
  ASSIGN_OR_RETURN(json raw, ParseJsonText(text, origin));
  if (!raw.is_object()) return wrap(sbx::InvalidArgument("a scenario is a JSON object"));
  Scenario s;
  s.origin = origin;
  // Variables first: every other string may refer to them.
  if (raw.contains("variables") && !raw["variables"].is_object()) {
    return wrap(sbx::InvalidArgument("variables: expected an object"));
  }
  if (sbx::Status st = ReadVariables(raw.contains("variables") ? &raw["variables"] : nullptr,
                                     overrides, used, &s.variables, &s.values);
      !st.ok()) {
    return wrap(st);
  }
  json body = raw;
  body.erase("variables");
  body.erase("$schema");
  if (sbx::Status st = SubstituteVariables(body, s.values, ""); !st.ok()) return wrap(st);
  body["variables"] = raw.value("variables", json::object());
  if (raw.contains("$schema")) body["$schema"] = raw["$schema"];

  ObjectReader r(body, "");
  r.Ignore("$schema");
  r.Ignore("variables");
  int64_t format = r.Integer("format", 0, Required::kYes);
  s.name = r.String("name", "", Required::kYes);
  s.title = r.String("title", "");
  s.description = r.String("description", "");
  s.source = r.String("source", "");
  const json* sandbox = r.Object("sandbox", Required::kYes);
  const json* after = r.Object("after_each_task");
  const json* tasks = r.Array("tasks", Required::kYes);
  const json* checks = r.Array("checks");
  if (sbx::Status st = r.Finish(); !st.ok()) return wrap(st);
  if (format != 1)
    return wrap(sbx::InvalidArgument(fmt::format("format: {} is not supported (only 1)", format)));
  if (!MatchesName(s.name, "^[a-z0-9][a-z0-9-]*$")) {
    return wrap(sbx::InvalidArgument(fmt::format("name: '{}' is not [a-z0-9][a-z0-9-]*", s.name)));
  }
  if (sbx::Status st = ReadSandbox(sandbox, &s); !st.ok()) return wrap(st);
  if (after) {
    ObjectReader ar(*after, "after_each_task");
    s.after_each.revert = ar.Bool("revert", true);
    s.after_each.clean_check = ar.String("clean_check", s.after_each.clean_check);
    s.after_each.timeout_s = ar.Number("timeout_s", 20);
    s.after_each.canaries = ar.Bool("canaries", true);
    if (s.after_each.timeout_s <= 0) ar.Fail("timeout_s", "must be > 0");
    if (sbx::Status st = ar.Finish(); !st.ok()) return wrap(st);
  }
  if (tasks->empty()) return wrap(sbx::InvalidArgument("tasks: at least one task"));
  std::set<std::string> task_ids, check_ids;
  auto add_check = [&](const CheckSpec& c, const std::string& path) -> sbx::Status {
    for (const auto& dep : c.requires_pass) {
      if (!check_ids.count(dep)) {
        return sbx::InvalidArgument(
            fmt::format("{}.requires_pass: '{}' is not an earlier check", path, dep));
      }
    }
    if (!check_ids.insert(c.id).second)
      return sbx::InvalidArgument(fmt::format("{}.id: duplicate check '{}'", path, c.id));
    return sbx::Status::Ok();
  };
  for (size_t i = 0; i < tasks->size(); ++i) {
    std::string path = fmt::format("tasks[{}]", i);
    ObjectReader tr((*tasks)[i], path);
    TaskSpec t;
    t.id = tr.String("id", "", Required::kYes);
    t.label = tr.String("label", "");
    t.tries = tr.String("tries", "");
    t.command = tr.String("command", "", Required::kYes);
    t.timeout_s = tr.Number("timeout_s", 20);
    const json* check = tr.Object("check");
    const json* own_sandbox = tr.Object("sandbox");
    if (tr.Has("revert")) t.revert = tr.Bool("revert", true);
    t.canaries_before = tr.Bool("canaries_before", false);
    if (sbx::Status st = tr.Finish(); !st.ok()) return wrap(st);
    if (own_sandbox) {
      SandboxTemplate sb = s.sandbox;
      if (sbx::Status st = ReadSandboxInto(*own_sandbox, path + ".sandbox", &sb); !st.ok())
        return wrap(st);
      t.sandbox = std::move(sb);
    }
    CollectHarnessRefs((*tasks)[i], &t.harness_values);
    if (!MatchesName(t.id, "^[a-z0-9][a-z0-9-]*$")) {
      return wrap(
          sbx::InvalidArgument(fmt::format("{}.id: '{}' is not [a-z0-9][a-z0-9-]*", path, t.id)));
    }
    if (!task_ids.insert(t.id).second)
      return wrap(sbx::InvalidArgument(fmt::format("{}.id: duplicate task '{}'", path, t.id)));
    if (t.command.empty()) return wrap(sbx::InvalidArgument(path + ".command: empty"));
    if (t.timeout_s <= 0) return wrap(sbx::InvalidArgument(path + ".timeout_s: must be > 0"));
    if (t.label.empty()) t.label = t.id;
    if (t.tries.empty()) t.tries = t.label;
    if (check) {
      auto c = ReadCheck(*check, path + ".check", s, true);
      if (!c.ok()) return wrap(c.status());
      c->task_id = t.id;
      if (sbx::Status st = add_check(*c, path + ".check"); !st.ok()) return wrap(st);
      if (c->kind == "expect") {
        const json& p = c->params;
        bool own = t.sandbox.has_value();
        bool reverts = t.revert.value_or(s.after_each.revert);
        if (p["may_refuse"].get<bool>() && !own) {
          return wrap(sbx::InvalidArgument(
              path + ".check.params.may_refuse: only for a task with a sandbox of its own"));
        }
        if (p["host_absent"].is_object() && p["host_absent"]["after"] == "destroy" && !own) {
          return wrap(sbx::InvalidArgument(
              path +
              ".check.params.host_absent.after: 'destroy' needs a task with a sandbox of "
              "its own (the scenario's sandbox is destroyed after all tasks)"));
        }
        if (p["then"].is_object() && p["then"]["after_revert"].get<bool>() && !reverts) {
          return wrap(sbx::InvalidArgument(
              path + ".check.params.then.after_revert: the task does not revert"));
        }
      }
      t.check = std::move(*c);
    }
    s.tasks.push_back(std::move(t));
  }
  if (checks) {
    for (size_t i = 0; i < checks->size(); ++i) {
      std::string path = fmt::format("checks[{}]", i);
      auto c = ReadCheck((*checks)[i], path, s, false);
      if (!c.ok()) return wrap(c.status());
      if (sbx::Status st = add_check(*c, path); !st.ok()) return wrap(st);
      s.checks.push_back(std::move(*c));
    }
  }
  return s;
}

}  // namespace sandcheck
