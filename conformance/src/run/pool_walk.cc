// Runner::RunWalk and the walk's draw (pool_walk.h).
#include "run/pool_walk.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "common/subprocess.h"
#include "run/runner.h"

namespace sandcheck {

using nlohmann::json;

namespace {

bool Covers(const std::vector<WalkDraw>& w, bool same_tenant, bool same_tool, int trust) {
  for (size_t i = 1; i < w.size(); ++i) {
    const WalkDraw& a = w[i - 1];
    const WalkDraw& b = w[i];
    if (a.trust == trust && b.trust == trust && (a.tenant == b.tenant) == same_tenant &&
        (a.tool == b.tool) == same_tool)
      return true;
  }
  return false;
}

}  // namespace

bool WalkCoversTransitions(const std::vector<WalkDraw>& w) {
  return Covers(w, true, true, 0) &&   // trusted, same tenant and tool: reuse allowed, reset?
         Covers(w, false, true, 0) &&  // trusted, another tenant: never handed over
         Covers(w, true, false, 0) &&  // trusted, another tool: never handed over
         Covers(w, true, true, 1);     // untrusted twice: never reused
}

std::vector<WalkDraw> DrawWalk(int steps, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> bit(0, 1);
  std::vector<WalkDraw> w(static_cast<size_t>(std::max(steps, 0)));
  for (int attempt = 0; attempt < 100000; ++attempt) {
    for (auto& d : w) d = {bit(rng), bit(rng), bit(rng)};
    if (WalkCoversTransitions(w)) return w;
  }
  // Not reached for 8 steps or more in practice; a fixed cover at the start keeps the promise.
  const WalkDraw cover[] = {{0, 0, 0}, {0, 0, 0}, {1, 0, 0}, {1, 1, 0}, {0, 0, 1}, {0, 0, 1}};
  for (size_t i = 0; i < std::size(cover) && i < w.size(); ++i) w[i] = cover[i];
  return w;
}

uint64_t WalkSeed(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

std::string HostInstanceIdentity() {
  // As sbx-probe --instance prints it (fixtures/tools/sbx-probe.c), read by the harness.
  json id = {{"boot_id", nullptr}, {"mnt", nullptr},        {"pid", nullptr},
             {"net", nullptr},     {"init_start", nullptr}, {"booted_unix", nullptr}};
  std::string boot;
  if (std::ifstream("/proc/sys/kernel/random/boot_id") >> boot) id["boot_id"] = boot;
  for (const char* ns : {"mnt", "pid", "net"}) {
    struct stat st;
    if (::stat(fmt::format("/proc/self/ns/{}", ns).c_str(), &st) == 0)
      id[ns] = static_cast<int64_t>(st.st_ino);
  }
  std::string stat;
  std::getline(std::ifstream("/proc/1/stat"), stat);
  if (size_t close = stat.rfind(") "); close != std::string::npos) {
    std::istringstream fields(stat.substr(close + 2));
    std::string f;
    for (int i = 0; i < 20 && fields >> f; ++i) {
    }
    if (!f.empty()) id["init_start"] = std::stoll(f);
  }
  struct timespec rt, bt;
  if (::clock_gettime(CLOCK_REALTIME, &rt) == 0 && ::clock_gettime(CLOCK_BOOTTIME, &bt) == 0) {
    id["booted_unix"] = static_cast<double>(rt.tv_sec - bt.tv_sec) +
                        static_cast<double>(rt.tv_nsec - bt.tv_nsec) / 1e9;
  }
  return id.dump();
}

bool Runner::RunWalk(ScenarioRun& run, TaskRecord& rec) {
  const TaskSpec& t = *rec.spec;
  const TaskSpec::Walk& w = *t.walk;
  rec.walk_seed = w.seed.empty() ? run.harness["token"] : w.seed;
  if (options_.target_local) rec.walk_host_identity = HostInstanceIdentity();
  // Two lanes of the same length: sandboxes made with create, exec and destroy (protocol v1),
  // then one-shot runs through the target's warm pool where it offers them (RunPooled: the
  // reference's pools serve that path). One list of steps, judged as one walk.
  std::vector<WalkDraw> draws = DrawWalk(w.steps, WalkSeed(rec.walk_seed));
  const size_t lane = draws.size();
  std::vector<WalkDraw> pooled = DrawWalk(w.steps, WalkSeed(rec.walk_seed + "/pooled"));
  draws.insert(draws.end(), pooled.begin(), pooled.end());
  std::map<int, size_t> latest;  // class (tenant, tool, trust) → its latest step that was made
  for (size_t i = 0; i < draws.size(); ++i) {
    const WalkDraw& d = draws[i];
    const bool one_shot = i >= lane;
    WalkStep step;
    step.pooled = one_shot;
    step.tenant = SubstituteHarness(w.tenants[static_cast<size_t>(d.tenant)], run.harness);
    step.tool = w.tools[static_cast<size_t>(d.tool)];
    step.trust = w.trust[static_cast<size_t>(d.trust)];
    step.token = fmt::format("{}p{}", run.harness["token"], i);
    SandboxTemplate sb = *t.sandbox;
    sb.tenant = step.tenant;
    sb.tool = step.tool;
    sb.trust = step.trust;
    sb.env["SBX_POOL_STEP"] = step.token;
    sb.secrets["SBX_POOL_SECRET"] = "s" + step.token;
    json request = BuildCreateRequest(sb, options_);
    SubstituteHarness(request, run.harness);
    if (i == 0) rec.own_request = RedactSecrets(request);
    std::string earlier;
    for (const auto& [cls, at] : latest)
      earlier += (earlier.empty() ? "" : " ") + rec.walk[at].token;
    std::string cmd = t.command;
    for (const auto& [key, value] :
         {std::pair<std::string, std::string>{"{{walk.token}}", step.token},
          {"{{walk.earlier}}", earlier}}) {
      for (size_t at = cmd.find(key); at != std::string::npos;
           at = cmd.find(key, at + value.size()))
        cmd.replace(at, key.size(), value);
    }
    cmd = SubstituteHarness(cmd, run.harness);
    const std::string label =
        fmt::format("{} {}/{}{}", t.label, i + 1, draws.size(), one_shot ? " (pooled run)" : "");
    log_.Progress(fmt::format("{}: {} {} {}", label, step.tenant, step.tool, step.trust));
    if (one_shot) {
      // One call: take (or make) a sandbox, run, give it back to the pool.
      step.exec = Step::ExecOf("walk-run", cmd);
      Step& s = *step.exec;
      auto r = s.Time([&] { return target_.RunPooled(request, cmd, t.timeout_s); });
      if (!r.ok() && r.status().code() == sbx::Code::kUnsupported) {
        rec.walk_pooled_note = "no pooled one-shot runs: " + r.status().ToString();
        log_.Progress(fmt::format("{}: {}", t.label, rec.walk_pooled_note));
        break;
      }
      if (r.ok()) {
        s.answer = *r;
      } else {
        s.error = r.status().ToString();
      }
      log_.StepLine(label, s);
      const bool refused = !r.ok() || r->status == "sandbox_unavailable";
      if (refused && d.trust == 1) {
        step.refused = r.ok() ? fmt::format("{}: {}", r->status, r->stderr_text) : s.error;
        rec.walk.push_back(std::move(step));
        continue;
      }
      if (!r.ok()) {
        run.abort_error = fmt::format("the pooled run of '{}' failed: {}", label, s.error);
        rec.walk.push_back(std::move(step));
        return false;
      }
      step.sandbox = r->extra.value("sandbox", std::string("(pooled run)"));
    } else {
      step.create.emplace();
      // Untrusted code may be refused (no backend of its class here); trusted code may not.
      if (!CreateStep(run, label, "walk-create", request, &*step.create, &step.sandbox,
                      d.trust == 0)) {
        if (d.trust == 0) {
          rec.walk.push_back(std::move(step));
          return false;
        }
        step.refused = step.create->error;
        rec.walk.push_back(std::move(step));
        continue;
      }
      step.exec.emplace();
      bool ok = ExecStep(run, label, "walk-exec", step.sandbox, cmd, t.timeout_s, &*step.exec);
      step.destroy.emplace();
      bool destroyed =
          OpStep(run, label, "walk-destroy", step.sandbox, Op::kDestroy, &*step.destroy);
      if (!ok || !destroyed) {
        rec.walk.push_back(std::move(step));
        return false;
      }
    }
    latest[d.tenant * 4 + d.tool * 2 + d.trust] = rec.walk.size();
    rec.walk.push_back(std::move(step));
    if (Interrupted()) {
      if (run.abort_error.empty()) run.abort_error = "interrupted";
      return false;
    }
  }
  return true;
}

}  // namespace sandcheck
