// The CPU hard-cap measurement shared by the integration tests of every backend (RES-1,
// SCN-5). Header only; included by *_itest.cc.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>

#include "sbx/model.h"

namespace sbx::testing_cpu {

// RES-1, SCN-5: fixed work (sbx-cpu) at 1000m and at 500m, `rounds` of each interleaved; the
// best (shortest) wall time of each. `run(millicores)` runs "sbx-cpu -n N" in a sandbox.
// On a shared 2-core machine a busy neighbour slows the unthrottled run most (it then gets 60-70 %
// of a core and the wall-time ratio drops to 1.3-1.4 although the cap holds), so the verdict
// also accepts the capped wall time against the CPU time the unthrottled run needed (host
// cgroup accounting, never the in-sandbox reading) — but only together with the evidence that
// the quota itself bit: no capped run got more than ~half a CPU, and one was throttled. A
// neighbour can keep every capped run below half a CPU, so that the quota never bites: then more
// rounds are run, until one is throttled (the event the verdict needs), at most `max_rounds`.
struct CpuCap {
  double full = 1e9, half = 1e9;  // best wall seconds at 1000m and 500m
  double full_cpu = 0;            // cgroup CPU seconds of the best 1000m run
  double half_share = 0;          // the highest cgroup CPU seconds / wall of the 500m runs
  double half_throttled = 0;      // the most cgroup throttled seconds of a 500m run
  int rounds = 0;
  double ratio() const { return half / full; }
  double ratio_vs_cpu() const { return full_cpu > 0 ? half / full_cpu : 0; }
  double verdict_ratio() const { return std::max(ratio(), ratio_vs_cpu()); }
};
template <typename RunFn>
CpuCap MeasureCpuCap(RunFn run, int rounds = 3, int max_rounds = 12) {
  CpuCap c;
  for (int i = 0; i < max_rounds && (i < rounds || c.half_throttled <= 0); ++i) {
    ++c.rounds;
    for (int64_t mc : {int64_t{1000}, int64_t{500}}) {
      ExecResult r = run(mc);
      if (r.status != ExecStatus::kOk || r.seconds <= 0) continue;
      if (mc == 1000) {
        if (r.seconds < c.full) {
          c.full = r.seconds;
          c.full_cpu = r.usage.cpu_seconds;
        }
      } else {
        c.half = std::min(c.half, r.seconds);
        c.half_share = std::max(c.half_share, r.usage.cpu_seconds / r.seconds);
        c.half_throttled = std::max(c.half_throttled, r.usage.throttled_seconds);
      }
    }
  }
  return c;
}

inline std::string Describe(const CpuCap& c) {
  std::ostringstream os;
  os << "1000m: " << c.full << " s wall (" << c.full_cpu << " s CPU), 500m: " << c.half
     << " s wall (at most " << c.half_share << " of a CPU, throttled up to " << c.half_throttled
     << " s): ratio " << c.ratio() << ", vs CPU " << c.ratio_vs_cpu() << ", " << c.rounds
     << " rounds";
  return os.str();
}

// The verdict: the capped run took at least 1.7x the uncapped wall time (or its CPU time), no
// capped run got more than ~half a CPU, and the quota throttled one.
inline void ExpectCpuCapBites(const CpuCap& cap) {
  EXPECT_GE(cap.verdict_ratio(), 1.7) << Describe(cap);
  EXPECT_LE(cap.half_share, 0.55) << "a 500m run got more than half a CPU: " << Describe(cap);
  EXPECT_GT(cap.half_throttled, 0) << "the quota never throttled: " << Describe(cap);
}

}  // namespace sbx::testing_cpu
