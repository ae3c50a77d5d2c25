// kind foreign_refused (PROD-1): calls on a sandbox by callers other than its owner (the task's
// TaskSpec::foreign, run/foreign_calls.cc), judged from the owner's side. The target's word
// (refused or not) may only make the verdict stricter: a call it says it refused must also have
// left no trace — the owner's canary still there (no revert reached it), no mark of the foreign
// exec in the sandbox nor the canary in that exec's output, and the sandbox still answering its
// owner (no destroy reached it).
#include <fmt/format.h>

#include "checks/verdict.h"

namespace sandcheck::eval {

using nlohmann::json;

namespace {

bool HasLine(const std::string& out, const std::string& line) {
  size_t at = 0;
  while ((at = out.find(line, at)) != std::string::npos) {
    bool starts = at == 0 || out[at - 1] == '\n';
    size_t end = at + line.size();
    if (starts && (end == out.size() || out[end] == '\n' || out[end] == '\r')) return true;
    at = end;
  }
  return false;
}

}  // namespace

Verdict ForeignRefused(TaskRecord& t) {
  Verdict v;
  const std::string& token = t.foreign_token;
  if (!t.foreign_plant || !t.foreign_plant->error.empty() || !Ran(t.foreign_plant->answer) ||
      t.foreign_plant->answer.stdout_text.find(token) == std::string::npos) {
    v.outcome = Outcome::kError;
    v.reason = "the owner's canary could not be planted in its own sandbox" +
               (t.foreign_plant ? ": " + Told(t.foreign_plant->answer) : std::string());
    return v;
  }
  json calls = json::array();
  std::vector<std::string> faults, not_made;
  int made = 0, refused = 0;
  for (const auto& f : t.foreign) {
    const std::string as = f.caller.empty() ? "a caller with no credential" : "tenant " + f.caller;
    json c = {{"caller", f.caller}, {"op", f.op}};
    if (!f.not_made.empty()) {
      c["not_made"] = f.not_made;
      not_made.push_back(fmt::format("{} as {}: {}", f.op, as, f.not_made));
      calls.push_back(c);
      continue;
    }
    if (!f.answer) continue;
    ++made;
    c["refused"] = f.answer->refused;
    c["said"] = f.answer->said;
    if (f.answer->refused) {
      ++refused;
    } else {
      faults.push_back(fmt::format("{}'s {} on the owner's sandbox was carried out ({})", as, f.op,
                                   f.answer->said.substr(0, 120)));
    }
    if (f.answer->exec && f.answer->exec->stdout_text.find(token) != std::string::npos) {
      faults.push_back(fmt::format("{}'s exec read the owner's canary", as));
    }
    if (f.look) {
      const std::string& out = f.look->answer.stdout_text;
      c["owner_look"] = f.look->error.empty() ? json(out.substr(0, 300)) : json(f.look->error);
      if (!f.look->error.empty()) {
        faults.push_back(fmt::format("after {}'s {}, the owner's own exec on its sandbox fails: {}",
                                     as, f.op, f.look->error.substr(0, 160)));
      } else if (out.find("owner-looked") == std::string::npos) {
        faults.push_back(
            fmt::format("after {}'s {}, the owner's sandbox no longer runs its "
                        "command to its end ({})",
                        as, f.op, Told(f.look->answer)));
      } else {
        if (!HasLine(out, token)) {
          faults.push_back(
              fmt::format("after {}'s {}, the owner's canary is gone from /work", as, f.op));
        }
        if (HasLine(out, "foreign-" + token)) {
          faults.push_back(fmt::format(
              "after {}'s {}, the sandbox holds what that caller's exec wrote", as, f.op));
        }
      }
    }
    calls.push_back(c);
  }
  v.evidence["foreign_calls"] = calls;
  if (!not_made.empty()) v.evidence["not_made"] = not_made;
  if (!faults.empty()) {
    std::string why = faults.front();
    if (faults.size() > 1) why += fmt::format(" (and {} more)", faults.size() - 1);
    v.outcome = Outcome::kFail;
    v.reason = "another caller reached the sandbox: " + why;
    v.evidence["faults"] = faults;
    return v;
  }
  if (made == 0) {
    v.outcome = Outcome::kSkip;
    v.reason = not_made.empty() ? "no call by another caller was made"
                                : "no call by another caller could be made: " + not_made.front();
    return v;
  }
  v.outcome = Outcome::kPass;
  v.reason = fmt::format(
      "{} of {} calls by other callers refused; after each the owner's sandbox answered with its "
      "canary and nothing of theirs",
      refused, made);
  if (!not_made.empty())
    v.reason += fmt::format(" ({} not made: {})", not_made.size(), not_made.front());
  return v;
}

}  // namespace sandcheck::eval
