// Reading the `expect` vocabulary (scenario/expect_reader.h, docs/scenarios.md).
#include "scenario/expect_reader.h"

#include <fmt/format.h>

#include <regex>
#include <set>

#include "common/json_strict.h"
#include "scenario/scenario.h"

namespace sandcheck {
namespace {

using VT = json::value_t;

const std::set<std::string>& ExecStatuses() {
  static const std::set<std::string> k = {"ok", "timeout", "resource_exceeded", "tool_error",
                                          "sandbox_unavailable"};
  return k;
}

}  // namespace

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
        if (re.mark_count() != 1)
          fail("figure.last_match", "the regex must hold exactly one group");
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
          fail("answer_min",
               fmt::format("'{}': expected a number (the least the figure may be)", it.key()));
      }
      out["answer_min"] = *m;
    }
    out["may_refuse"] = r.Bool("may_refuse", false);
    out["must_refuse"] = r.Bool("must_refuse", false);
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
    // Evidence of the sandbox's kernel and namespaces (checks/kernel_evidence.h): the probe's
    // facts against the harness's own host, whose values are local-only harness values (a task
    // of a target elsewhere is not run, and says why).
    out["kernel"] = nullptr;
    std::string kernel = r.String("kernel", "");
    if (!kernel.empty()) {
      if (kernel != "own" && kernel != "host") fail("kernel", "'own' or 'host'");
      out["kernel"] = {{"want", kernel}, {"host", "{{harness.host_kernel}}"}};
    }
    out["namespaces_apart"] = nullptr;
    if (const json* ns = r.Array("namespaces_apart")) {
      static const std::set<std::string> kNames = {"pid", "mnt", "net", "ipc",
                                                   "uts", "user", "cgroup"};
      for (const auto& n : *ns) {
        if (!n.is_string() || !kNames.count(n.get<std::string>()))
          fail("namespaces_apart", "names among pid, mnt, net, ipc, uts, user, cgroup");
      }
      if (ns->empty()) fail("namespaces_apart", "name at least one namespace");
      out["namespaces_apart"] = {{"names", *ns},
                                 {"host", "{{harness.host_namespaces}}"},
                                 {"kernel", "{{harness.host_kernel}}"}};
    }
    // Egress evidence the sandbox cannot write (EGR-1, issue 32): the harness's sink
    // (run/sink_fixture.h) and its mirror's request log. The sink's probe arguments are named
    // here, so that a task of a run without a sink is not run, and says why.
    out["sink_untouched"] = nullptr;
    if (r.Bool("sink_untouched", false))
      out["sink_untouched"] = {{"probe_args", "{{harness.sink_connect}}"}};
    // The sink as the service behind a name (a TLS passthrough): reached, or not at all.
    for (const char* key : {"sink_reached", "sink_silent"}) {
      out[key] = nullptr;
      if (r.Bool(key, false)) out[key] = {{"local", "{{harness.sink_nc}}"}};
    }
    if (out["sink_reached"].is_object() && out["sink_silent"].is_object())
      fail("sink_silent", "not with sink_reached");
    out["mirror_untouched"] = r.Bool("mirror_untouched", false);
    strings("mirror_not_for");
    // SNAP-3: a heartbeat's count in the task's stdout (JSON pointer `beats`) and, in the
    // follow-up's, its count after the resume and the beats of one second awake (`per_second`).
    out["suspended"] = nullptr;
    if (const json* su = r.Object("suspended")) {
      ObjectReader sr(*su, path + ".suspended");
      std::string beats = sr.String("beats", "/beats");
      std::string rate = sr.String("per_second", "/per_second");
      RETURN_IF_ERROR(sr.Finish());
      for (const auto& [key, ptr] : {std::pair{"beats", beats}, std::pair{"per_second", rate}}) {
        if (ptr.empty() || ptr[0] != '/')
          fail(std::string("suspended.") + key, "a JSON pointer (\"/name\")");
      }
      out["suspended"] = {{"beats", beats}, {"per_second", rate}};
    }
    // LC-7 where the host cannot look: a beacon the task leaves running fetches PATH from the
    // harness's mirror; its beats in the mirror's own log after the destroy are a survivor.
    out["beacon"] = nullptr;
    if (const json* b = r.Object("beacon")) {
      ObjectReader br(*b, path + ".beacon");
      std::string at = br.String("path", "", Required::kYes);
      double wait_s = br.Number("wait_s", 1.5);
      RETURN_IF_ERROR(br.Finish());
      if (at.size() < 9 || at[0] != '/')
        fail("beacon.path",
             "a path of at least 9 characters, from '/' (matched in the mirror's log)");
      if (wait_s < 0.5 || wait_s > 30) fail("beacon.wait_s", "0.5..30");
      out["beacon"] = {{"path", at}, {"wait_s", wait_s}};
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

bool MatchesName(const std::string& s, const char* re) {
  return std::regex_match(s, std::regex(re));
}

}  // namespace sandcheck
