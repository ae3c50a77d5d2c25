// Known gaps as data, and the profile that decides what fails a run.
//
// An expectations file (conformance/expectations/<adapter>.json, schema in docs/sandcheck.md):
//   {"target": "bwrap", "description": "...",
//    "expectations": {"six-task/cpu-cap": {"outcome": "fail", "reason": "no cgroup limits"}}}
// An expected failure that fails is xfail (does not fail the run); a check expected to fail or
// skip that passes is xpass, which fails the run (the file is out of date: an unexpected pass).
//
// Profiles:  default — a failed MUST check or an xpass fails the run; SHOULD failures are warnings.
//            strict  — failed SHOULD checks fail the run too.
//            certify — strict, expectations are ignored (a known gap is still a gap), and a skip
//                      is a failure (like bubblewrap's BWRAP_MUST_WORK).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "checks/records.h"
#include "sbx/status.h"

namespace sandcheck {

enum class Profile { kDefault, kStrict, kCertify };
const char* ProfileName(Profile p);
sbx::StatusOr<Profile> ParseProfile(const std::string& s);

struct Expectation {
  std::string outcome;  // "fail" | "skip" | "flaky" (a known flaky check, under --repeat)
  std::string reason;
};

struct Expectations {
  std::string file;
  std::string target;
  std::map<std::string, Expectation> by_check;
};

// kInvalidArgument (exit 2) for a malformed file, an unknown key or outcome.
sbx::StatusOr<Expectations> LoadExpectations(const std::string& path);

// Check IDs named by `e` that belong to one of `scenarios` (by prefix) but exist in none of them:
// a typo in the file (kInvalidArgument).
sbx::Status ValidateExpectations(const Expectations& e, const std::vector<Scenario>& scenarios);

// Sets outcome and blocking of every check from its raw verdict.
void ApplyExpectationsAndProfile(std::vector<ScenarioRun>& runs, const Expectations* e,
                                 Profile profile);

}  // namespace sandcheck
