#include "checks/expectations.h"

#include <fmt/format.h>

#include "common/json_strict.h"

namespace sandcheck {

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kPass:
      return "pass";
    case Outcome::kFail:
      return "fail";
    case Outcome::kSkip:
      return "skip";
    case Outcome::kXfail:
      return "xfail";
    case Outcome::kXpass:
      return "xpass";
    case Outcome::kError:
      return "error";
    case Outcome::kFlaky:
      return "flaky";
  }
  return "error";
}

std::optional<Outcome> ParseOutcome(const std::string& s) {
  for (Outcome o : {Outcome::kPass, Outcome::kFail, Outcome::kSkip, Outcome::kXfail,
                    Outcome::kXpass, Outcome::kError, Outcome::kFlaky}) {
    if (s == OutcomeName(o)) return o;
  }
  return std::nullopt;
}

const char* ProfileName(Profile p) {
  switch (p) {
    case Profile::kDefault:
      return "default";
    case Profile::kStrict:
      return "strict";
    case Profile::kCertify:
      return "certify";
  }
  return "default";
}

sbx::StatusOr<Profile> ParseProfile(const std::string& s) {
  if (s == "default") return Profile::kDefault;
  if (s == "strict") return Profile::kStrict;
  if (s == "certify") return Profile::kCertify;
  return sbx::InvalidArgument(fmt::format("--profile '{}': one of default, strict, certify", s));
}

sbx::StatusOr<Expectations> LoadExpectations(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  ASSIGN_OR_RETURN(json j, ParseJsonText(text, path));
  Expectations e;
  e.file = path;
  ObjectReader r(j, "");
  r.Ignore("$schema");
  e.target = r.String("target", "");
  r.String("description", "");
  const json* items = r.Object("expectations", Required::kYes);
  if (sbx::Status st = r.Finish(); !st.ok())
    return sbx::InvalidArgument(fmt::format("{}: {}", path, st.message()));
  for (auto it = items->begin(); it != items->end(); ++it) {
    ObjectReader er(*it, "expectations." + it.key());
    Expectation x;
    x.outcome = er.String("outcome", "", Required::kYes);
    x.reason = er.String("reason", "", Required::kYes);
    if (sbx::Status st = er.Finish(); !st.ok())
      return sbx::InvalidArgument(fmt::format("{}: {}", path, st.message()));
    if (x.outcome != "fail" && x.outcome != "skip" && x.outcome != "flaky") {
      return sbx::InvalidArgument(
          fmt::format("{}: expectations.{}.outcome: '{}' (expected fail, skip or flaky)", path,
                      it.key(), x.outcome));
    }
    if (x.reason.empty()) {
      return sbx::InvalidArgument(
          fmt::format("{}: expectations.{}.reason: say why", path, it.key()));
    }
    e.by_check[it.key()] = x;
  }
  return e;
}

sbx::Status ValidateExpectations(const Expectations& e, const std::vector<Scenario>& scenarios) {
  for (const auto& [id, x] : e.by_check) {
    for (const auto& s : scenarios) {
      if (id.rfind(s.name + "/", 0) != 0) continue;
      bool found = false;
      for (const CheckSpec* c : s.AllChecks()) found = found || c->id == id;
      if (!found) {
        return sbx::InvalidArgument(
            fmt::format("{}: '{}' is not a check of scenario {}", e.file, id, s.name));
      }
    }
  }
  return sbx::Status::Ok();
}

void ApplyExpectationsAndProfile(std::vector<ScenarioRun>& runs, const Expectations* e,
                                 Profile profile) {
  bool use_expectations = e && profile != Profile::kCertify;
  for (auto& run : runs) {
    for (auto& r : run.checks) {
      r.outcome = r.raw;
      const Expectation* x = nullptr;
      if (e) {
        auto it = e->by_check.find(r.spec->id);
        if (it != e->by_check.end()) {
          x = &it->second;
          r.expected_outcome = x->outcome;
          r.expected_reason = x->reason;
        }
      }
      if (use_expectations && x) {
        if ((r.raw == Outcome::kFail && x->outcome == "fail") ||
            (r.raw == Outcome::kFlaky && x->outcome == "flaky")) {
          r.outcome = Outcome::kXfail;
        } else if (r.raw == Outcome::kPass) {
          r.outcome = Outcome::kXpass;
          r.reason =
              fmt::format("unexpected pass: expected {} ({}); update the expectations file. {}",
                          x->outcome, x->reason, r.reason);
        }
      }
      if (profile == Profile::kCertify && r.outcome == Outcome::kSkip) {
        r.outcome = Outcome::kFail;
        r.reason = "skipped, and --profile certify counts a skip as a failure: " + r.reason;
      }
      switch (r.outcome) {
        case Outcome::kFail:
        case Outcome::kFlaky:  // --repeat: an outcome that changed cannot certify anything
          r.blocking = r.spec->level == "MUST" || profile != Profile::kDefault;
          break;
        case Outcome::kXpass:
        case Outcome::kError:
          r.blocking = true;
          break;
        default:
          r.blocking = false;
      }
    }
  }
}

}  // namespace sandcheck
