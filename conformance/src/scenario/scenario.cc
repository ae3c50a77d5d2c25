// Over 600 lines: one parser for one schema (scenarios/*.schema.json), every field checked with
// an error that names it; a split would scatter the schema over files.
#include "scenario/scenario.h"

#include <fmt/format.h>

#include <algorithm>
#include <regex>

#include "common/json_strict.h"
#include "scenario/expect_reader.h"

namespace sandcheck {
namespace {

using VT = json::value_t;

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
    int64_t overhead = out["overhead_runs"].get<int64_t>();
    if (overhead < 0 || overhead > 10)
      return sbx::InvalidArgument(path + ".overhead_runs: must be 0..10");
  }
  if (kind.kind == "cpu_shared_by_threads") {
    if (out["min_ratio"].get<double>() <= 1.0)
      return sbx::InvalidArgument(path + ".min_ratio: must be > 1");
    int64_t runs = out["reference_runs"].get<int64_t>();
    if (runs < 1 || runs > 10) return sbx::InvalidArgument(path + ".reference_runs: must be 1..10");
    int64_t overhead = out["overhead_runs"].get<int64_t>();
    if (overhead < 0 || overhead > 10)
      return sbx::InvalidArgument(path + ".overhead_runs: must be 0..10");
  }
  if (kind.kind == "fresh_vs_revert" && out["max_fresh_seconds"].get<double>() <= 0) {
    return sbx::InvalidArgument(path + ".max_fresh_seconds: must be > 0");
  }
  if (kind.kind == "pool_walk") {
    const std::string rule = out["rule"];
    if (rule != "reset" && rule != "context" && rule != "tenants" && rule != "untrusted")
      return sbx::InvalidArgument(path + ".rule: one of reset, context, tenants, untrusted");
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
    if (fixture != "mirror" && fixture != "sink") {
      return sbx::InvalidArgument(fmt::format(
          "{}.services.{}: unknown fixture '{}' (known: mirror, sink)", path, name, fixture));
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
      if (name == "walk.token" || name == "walk.earlier") {
        // A walk's step values (TaskSpec::Walk): the runner's, per step.
        out += in.substr(pos, close + 2 - pos);
        pos = close + 2;
        continue;
      }
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

namespace {

// Checks every backend overlay of `body` and applies the one of `backend` (scenario.h); the
// tasks it does not run land in *skips (task id -> reason).
sbx::Status ApplyBackendOverlay(json& body, const std::string& backend,
                                std::map<std::string, std::string>* skips,
                                std::string* scenario_skip) {
  if (!body.contains("backend_overlays")) return sbx::Status::Ok();
  json overlays = body["backend_overlays"];
  body.erase("backend_overlays");
  if (!overlays.is_object())
    return sbx::InvalidArgument("backend_overlays: an object of backend name -> overlay");
  std::set<std::string> task_ids;
  if (body.contains("tasks") && body["tasks"].is_array()) {
    for (const auto& t : body["tasks"])
      if (t.is_object() && t.contains("id") && t["id"].is_string()) task_ids.insert(t["id"]);
  }
  for (auto& [name, o] : overlays.items()) {
    std::string path = "backend_overlays." + name;
    if (!MatchesName(name, "^[a-z0-9][a-z0-9-]*$"))
      return sbx::InvalidArgument(path + ": not a backend name");
    ObjectReader r(o, path);
    std::string why = r.String("why", "", Required::kYes);
    bool skip_all = r.Bool("skip", false);
    const json* sandbox = r.Object("sandbox");
    const json* after = r.Object("after_each_task");
    const json* tasks = r.Object("tasks");
    RETURN_IF_ERROR(r.Finish());
    if (why.empty()) return sbx::InvalidArgument(path + ".why: empty");
    std::map<std::string, json> per_task;
    if (tasks) {
      for (const auto& [id, to] : tasks->items()) {
        std::string tp = path + ".tasks." + id;
        if (!task_ids.count(id)) return sbx::InvalidArgument(tp + ": no task of that id");
        ObjectReader tr(to, tp);
        tr.String("command", "");
        tr.Object("check_params");
        tr.String("skip", "");
        RETURN_IF_ERROR(tr.Finish());
        per_task[id] = to;
      }
    }
    if (name != backend) continue;
    if (skip_all) {
      *scenario_skip = fmt::format("not run on the {} backend: {}", name, why);
      continue;
    }
    auto merge = [&](const char* key, const json* add) {
      if (!add) return;
      if (!body.contains(key) || !body[key].is_object()) body[key] = json::object();
      for (const auto& [k, v] : add->items()) body[key][k] = v;
    };
    merge("sandbox", sandbox);
    merge("after_each_task", after);
    for (auto& t : body["tasks"]) {
      std::string id = t.value("id", "");
      auto it = per_task.find(id);
      if (it == per_task.end()) {
        (*skips)[id] = fmt::format("not run on the {} backend: {}", name, why);
        continue;
      }
      const json& to = it->second;
      if (to.contains("skip")) {
        (*skips)[id] = fmt::format("not run on the {} backend: {}", name, to["skip"].get<std::string>());
        continue;
      }
      if (to.contains("command")) t["command"] = to["command"];
      if (to.contains("check_params") && t.contains("check") && t["check"].is_object()) {
        json& params = t["check"]["params"];
        if (!params.is_object()) params = json::object();
        for (const auto& [k, v] : to["check_params"].items()) {
          if (v.is_null())
            params.erase(k);  // back to the kind's default
          else
            params[k] = v;
        }
      }
    }
  }
  return sbx::Status::Ok();
}

}  // namespace

sbx::StatusOr<Scenario> LoadScenario(std::string_view text, const std::string& origin,
                                     const std::map<std::string, std::string>& overrides,
                                     std::set<std::string>* used, const std::string& backend) {
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
  std::map<std::string, std::string> backend_skips;
  if (sbx::Status st = ApplyBackendOverlay(body, backend, &backend_skips, &s.backend_skip); !st.ok())
    return wrap(st);

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
    if (const json* nb = tr.Object("neighbour")) {
      ObjectReader nr(*nb, path + ".neighbour");
      TaskSpec::Neighbour n;
      n.command = nr.String("command", "", Required::kYes);
      n.stdout_contains = nr.String("stdout_contains", "");
      n.timeout_s = nr.Number("timeout_s", 20);
      if (sbx::Status st = nr.Finish(); !st.ok()) return wrap(st);
      if (n.command.empty()) return wrap(sbx::InvalidArgument(path + ".neighbour.command: empty"));
      if (n.timeout_s <= 0)
        return wrap(sbx::InvalidArgument(path + ".neighbour.timeout_s: must be > 0"));
      if (!own_sandbox) {
        return wrap(sbx::InvalidArgument(
            path + ".neighbour: only for a task with a sandbox of its own (the neighbour is made "
                   "before it, with the same request)"));
      }
      t.neighbour = std::move(n);
    }
    if (const json* su = tr.Object("suspend")) {
      ObjectReader sr(*su, path + ".suspend");
      TaskSpec::Suspend sp;
      sp.hold_s = sr.Number("hold_s", 3);
      if (sbx::Status st = sr.Finish(); !st.ok()) return wrap(st);
      if (sp.hold_s < 0.5 || sp.hold_s > 30)
        return wrap(sbx::InvalidArgument(path + ".suspend.hold_s: 0.5..30"));
      t.suspend = sp;
    }
    if (const json* wk = tr.Object("walk")) {
      ObjectReader wr(*wk, path + ".walk");
      TaskSpec::Walk w;
      // A number, or a string of digits (what a --var substitutes).
      if (wk->contains("steps")) {
        const json& v = (*wk)["steps"];
        if (v.is_number_integer()) {
          w.steps = v.get<int>();
        } else if (v.is_string() && MatchesName(v.get<std::string>(), "^[0-9]{1,6}$")) {
          w.steps = std::stoi(v.get<std::string>());
        } else {
          return wrap(sbx::InvalidArgument(path + ".walk.steps: an integer"));
        }
        wr.Ignore("steps");
      }
      w.seed = wr.String("seed", "");
      for (auto [key, out] :
           {std::pair{"tenants", &w.tenants}, {"tools", &w.tools}, {"trust", &w.trust}}) {
        const json* list = wr.Array(key);
        if (!list || list->size() != 2 ||
            !std::all_of(list->begin(), list->end(), [](const json& v) {
              return v.is_string() && !v.get<std::string>().empty();
            })) {
          return wrap(sbx::InvalidArgument(
              fmt::format("{}.walk.{}: two different non-empty strings", path, key)));
        }
        for (const auto& v : *list) out->push_back(v.get<std::string>());
        if ((*out)[0] == (*out)[1])
          return wrap(sbx::InvalidArgument(
              fmt::format("{}.walk.{}: two different non-empty strings", path, key)));
      }
      if (sbx::Status st = wr.Finish(); !st.ok()) return wrap(st);
      if (w.steps < 8 || w.steps > 20000)
        return wrap(sbx::InvalidArgument(path + ".walk.steps: 8..20000"));
      if (!own_sandbox) {
        return wrap(sbx::InvalidArgument(
            path + ".walk: only for a task with a sandbox of its own (each step is one)"));
      }
      t.walk = std::move(w);
    }
    if (const json* fr = tr.Object("fresh")) {
      ObjectReader fre(*fr, path + ".fresh");
      TaskSpec::Fresh f;
      f.rounds = static_cast<int>(fre.Number("rounds", 3));
      if (sbx::Status st = fre.Finish(); !st.ok()) return wrap(st);
      if (f.rounds < 1 || f.rounds > 50)
        return wrap(sbx::InvalidArgument(path + ".fresh.rounds: 1..50"));
      if (!own_sandbox) {
        return wrap(sbx::InvalidArgument(
            path +
            ".fresh: only for a task with a sandbox of its own (it is destroyed and made "
            "again)"));
      }
      t.fresh = f;
    }
    if (const json* bu = tr.Object("bursts")) {
      ObjectReader br(*bu, path + ".bursts");
      TaskSpec::Bursts b;
      b.count = static_cast<int>(br.Number("count", 5));
      b.size = static_cast<int>(br.Number("size", 6));
      b.pause_s = br.Number("pause_s", 0.3);
      if (sbx::Status st = br.Finish(); !st.ok()) return wrap(st);
      if (b.count < 3 || b.count > 20)
        return wrap(sbx::InvalidArgument(path + ".bursts.count: 3..20"));
      if (b.size < 2 || b.size > 32)
        return wrap(sbx::InvalidArgument(path + ".bursts.size: 2..32"));
      if (!(b.pause_s >= 0.1 && b.pause_s <= 10))
        return wrap(sbx::InvalidArgument(path + ".bursts.pause_s: 0.1..10"));
      if (!own_sandbox) {
        return wrap(sbx::InvalidArgument(
            path +
            ".bursts: only for a task with a sandbox of its own (its request is the runs')"));
      }
      t.bursts = b;
    }
    if (const json* fo = tr.Object("foreign")) {
      ObjectReader fr(*fo, path + ".foreign");
      TaskSpec::Foreign f;
      f.caller = fr.String("caller", "");
      if (sbx::Status st = fr.Finish(); !st.ok()) return wrap(st);
      if (f.caller.empty())
        return wrap(sbx::InvalidArgument(path + ".foreign.caller: a non-empty string"));
      if (!own_sandbox) {
        return wrap(sbx::InvalidArgument(
            path +
            ".foreign: only for a task with a sandbox of its own (another caller may "
            "destroy it)"));
      }
      t.foreign = f;
    }
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
    if (auto skip = backend_skips.find(t.id); skip != backend_skips.end())
      t.backend_skip = skip->second;
    if (t.label.empty()) t.label = t.id;
    if (t.tries.empty()) t.tries = t.label;
    if (check) {
      auto c = ReadCheck(*check, path + ".check", s, true);
      if (!c.ok()) return wrap(c.status());
      c->task_id = t.id;
      CollectHarnessRefs(c->params, &t.harness_values);  // ones the reader added (kernel, ...)
      if (sbx::Status st = add_check(*c, path + ".check"); !st.ok()) return wrap(st);
      if (c->kind == "expect") {
        const json& p = c->params;
        bool own = t.sandbox.has_value();
        bool reverts = t.revert.value_or(s.after_each.revert);
        if (p["may_refuse"].get<bool>() && !own) {
          return wrap(sbx::InvalidArgument(
              path + ".check.params.may_refuse: only for a task with a sandbox of its own"));
        }
        if (p["beacon"].is_object() && !own) {
          return wrap(sbx::InvalidArgument(
              path +
              ".check.params.beacon: only for a task with a sandbox of its own (the "
              "beats are counted after its destroy)"));
        }
        if (p["must_refuse"].get<bool>() && !own) {
          return wrap(sbx::InvalidArgument(
              path + ".check.params.must_refuse: only for a task with a sandbox of its own"));
        }
        if (p["host_absent"].is_object() && p["host_absent"]["after"] == "destroy" && !own) {
          return wrap(sbx::InvalidArgument(
              path +
              ".check.params.host_absent.after: 'destroy' needs a task with a sandbox of "
              "its own (the scenario's sandbox is destroyed after all tasks)"));
        }
        if (p["suspended"].is_object()) {
          const auto& f = c->features;
          if (!t.suspend || !p["then"].is_object() || p["then"]["after_revert"].get<bool>() ||
              std::find(f.begin(), f.end(), "suspend") == f.end()) {
            return wrap(sbx::InvalidArgument(
                path +
                ".check.params.suspended: needs the task's `suspend`, a `then` that is "
                "not after_revert (it reads the heartbeat after the resume) and the "
                "feature 'suspend'"));
          }
        }
        if (p["then"].is_object() && p["then"]["after_revert"].get<bool>() && !reverts) {
          return wrap(sbx::InvalidArgument(
              path + ".check.params.then.after_revert: the task does not revert"));
        }
      }
      if ((c->kind == "foreign_refused") != t.foreign.has_value()) {
        return wrap(sbx::InvalidArgument(
            path + (t.foreign ? ".check.kind: a task with `foreign` is judged by foreign_refused"
                              : ".check.kind: foreign_refused judges a task with `foreign`")));
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
