// Runner::RunForeign (TaskSpec::foreign, PROD-1): calls on a sandbox by callers other than its
// owner, each followed by the owner's look at its sandbox.
#include <fmt/format.h>

#include <random>

#include "common/subprocess.h"
#include "run/runner.h"

namespace sandcheck {

using nlohmann::json;

namespace {

// What the owner runs after every foreign call: its canary, whatever a foreign exec wrote, and
// a last line that proves the command ran to its end.
constexpr const char* kOwnerLook =
    "cat /work/.sbx-owner 2>/dev/null; cat /work/.sbx-foreign 2>/dev/null; echo owner-looked";

}  // namespace

bool Runner::RunForeign(ScenarioRun& run, TaskRecord& rec, std::string& sandbox) {
  const TaskSpec& t = *rec.spec;
  const double timeout = run.scenario->after_each.timeout_s;
  std::random_device rd;
  rec.foreign_token = fmt::format("{:08x}{:08x}", rd(), rd());
  const std::string label = t.label;
  log_.Progress(fmt::format("{}: the owner's canary, then calls by other callers", label));
  rec.foreign_plant.emplace();
  if (!ExecStep(
          run, label, "owner-plant", sandbox,
          fmt::format("echo {} > /work/.sbx-owner && cat /work/.sbx-owner", rec.foreign_token),
          timeout, &*rec.foreign_plant)) {
    return false;
  }
  const std::string caller = SubstituteHarness(t.foreign->caller, run.harness);
  bool gone = false;  // a foreign destroy (or anything) left the owner without its sandbox
  for (const std::string& who : {caller, std::string()}) {
    for (const char* op : {"exec", "revert", "destroy"}) {
      if (Interrupted()) return true;
      TaskRecord::ForeignCall fc;
      fc.caller = who;
      fc.op = op;
      // A foreign exec writes a mark of its own and reads the owner's canary.
      const std::string cmd = fmt::format(
          "echo foreign-{} > /work/.sbx-foreign; cat /work/.sbx-owner", rec.foreign_token);
      fc.call = Step::ExecOf(fmt::format("foreign-{}", op), fc.op == "exec" ? cmd : "");
      Step& s = *fc.call;
      s.is_exec = fc.op == "exec";
      auto r = s.Time([&] { return target_.CallAs(who, op, sandbox, cmd, timeout); });
      const std::string as = who.empty() ? "no credential" : who;
      if (!r.ok() && r.status().code() == sbx::Code::kUnsupported) {
        fc.not_made = r.status().message();
        fc.call.reset();
        log_.Progress(fmt::format("{}: {} as {}: not made: {}", label, op, as, fc.not_made));
        rec.foreign.push_back(std::move(fc));
        continue;
      }
      if (!r.ok()) {
        s.error = r.status().ToString();
        log_.StepLine(label, s);
        run.abort_error = fmt::format("{} as {} on '{}' failed: {}", op, as, label, s.error);
        rec.foreign.push_back(std::move(fc));
        return false;
      }
      fc.answer = *r;
      if (r->refused) {
        s.is_exec = false;
        s.refused = r->said;
        s.op.http_status = r->http_status;
      } else if (r->exec) {
        s.answer = *r->exec;
      } else {
        s.is_exec = false;
        s.op.http_status = r->http_status;
      }
      log_.StepLine(label, s);
      // The owner's look: a sandbox the call took away is evidence, not a failure of the run.
      fc.look = Step::ExecOf("owner-look", kOwnerLook);
      Step& l = *fc.look;
      auto lr = l.Time([&] { return target_.Exec(sandbox, kOwnerLook, timeout); });
      if (lr.ok()) {
        l.answer = std::move(*lr);
      } else {
        l.error = lr.status().ToString();
        gone = true;
      }
      log_.StepLine(label, l);
      rec.foreign.push_back(std::move(fc));
      if (gone) break;
    }
    if (gone) break;
  }
  if (gone) {
    // What the owner can no longer reach may still exist: destroyed once more, best effort and
    // unrecorded as a failure of the run (the check names what happened).
    (void)target_.Destroy(sandbox);
    sandbox.clear();
  }
  return true;
}

}  // namespace sandcheck
