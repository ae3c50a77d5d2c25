// sbx-stage-timings: p50/p95/p99 of each lifecycle stage (LC-1) of the native backend over many
// one-shot runs of `true`, and of revert + first command for a persistent sandbox (SNAP-4).
// Prints a table, or JSON with --json. Usage: sbx-stage-timings [--runs N] [--json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sbx/runtime.h"

namespace {

struct Series {
  std::vector<double> v;
  double P(double p) const {
    if (v.empty()) return 0;
    std::vector<double> s = v;
    std::sort(s.begin(), s.end());
    return s[static_cast<size_t>(p * static_cast<double>(s.size() - 1) + 0.5)];
  }
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 200;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) runs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--json")) json = true;
    else {
      std::fprintf(stderr, "usage: sbx-stage-timings [--runs N] [--json]\n");
      return 2;
    }
  }
  if (runs < 1) return 2;
  auto rt = sbx::Runtime::Open({});
  if (!rt.ok()) {
    std::fprintf(stderr, "sbx-stage-timings: %s\n", rt.status().ToString().c_str());
    return 3;
  }
  std::map<std::string, Series> s;
  for (int i = 0; i < runs; ++i) {
    sbx::ExecRequest req;
    req.exec.command = "true";
    double t0 = Now();
    sbx::ExecResult r = (*rt)->Run(req);
    double total = Now() - t0;
    if (r.status != sbx::ExecStatus::kOk) {
      std::fprintf(stderr, "run failed: %s\n", r.reason.c_str());
      return 3;
    }
    s["allocate+initialize"].v.push_back(r.stages.allocate + r.stages.initialize);
    s["inject_context (incl. process start)"].v.push_back(r.stages.inject_context);
    s["execute (true)"].v.push_back(r.stages.execute);
    s["collect"].v.push_back(r.stages.collect);
    s["destroy+cleanup"].v.push_back(r.stages.destroy + r.stages.cleanup);
    s["one-shot run, total"].v.push_back(total);
  }
  auto id = (*rt)->Create({});
  if (!id.ok()) return 3;
  for (int i = 0; i < runs; ++i) {
    (void)(*rt)->Exec(*id, {.command = "echo x > /work/f"});
    (*rt)->Drain();
    double t0 = Now();
    auto rv = (*rt)->Revert(*id);
    double t1 = Now();
    auto ex = (*rt)->Exec(*id, {.command = "true"});
    double t2 = Now();
    if (!rv.ok() || !ex.ok()) return 3;
    s["revert"].v.push_back(t1 - t0);
    s["first command after revert"].v.push_back(t2 - t1);
    s["revert + first command"].v.push_back(t2 - t0);
  }
  (void)(*rt)->Destroy(*id);
  if (json) {
    nlohmann::json out = nlohmann::json::object();
    for (auto& [k, v] : s) out[k] = {{"p50_ms", v.P(.5) * 1e3}, {"p95_ms", v.P(.95) * 1e3}, {"p99_ms", v.P(.99) * 1e3}, {"n", v.v.size()}};
    std::puts(out.dump(2).c_str());
  } else {
    fmt::print("{:<40} {:>9} {:>9} {:>9}  (n={})\n", "stage", "p50 ms", "p95 ms", "p99 ms", runs);
    for (auto& [k, v] : s) fmt::print("{:<40} {:>9.3f} {:>9.3f} {:>9.3f}\n", k, v.P(.5) * 1e3, v.P(.95) * 1e3, v.P(.99) * 1e3);
  }
  return 0;
}
