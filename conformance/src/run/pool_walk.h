// The pool scenario's walk (TaskSpec::Walk; POOL-1..7, LC-2, LC-9, LC-10): which sandboxes it
// asks for, in which order. Runner::RunWalk (pool_walk.cc) makes them; checks/pool_checks.cc
// judges what they showed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "scenario/scenario.h"

namespace sandcheck {

// One step of the walk: indices into the Walk's tenants, tools and trust (trust[0] is the trusted
// class, trust[1] the untrusted one).
struct WalkDraw {
  int tenant = 0, tool = 0, trust = 0;
  bool operator==(const WalkDraw&) const = default;
};

// The walk for `seed`: uniform random steps, drawn again from the same stream until every
// transition a pool can get wrong is somewhere next to each other — the same tenant and tool
// trusted twice (reused: reset?), untrusted twice (reused at all?), another tenant or another
// tool after a trusted step (handed over?). Deterministic: the same seed gives the same walk.
std::vector<WalkDraw> DrawWalk(int steps, uint64_t seed);
// Whether `walk` holds each of those four transitions.
bool WalkCoversTransitions(const std::vector<WalkDraw>& walk);
// A stable 64-bit seed from any string (FNV-1a): the report's seed replays the walk.
uint64_t WalkSeed(const std::string& text);
// The harness's own host as `sbx-probe --instance` shows a sandbox (a JSON object: boot_id,
// mnt, pid, net, init_start, booted_unix): a sandbox that shows the same cannot be told apart
// from the host, nor from another such sandbox.
std::string HostInstanceIdentity();

}  // namespace sandcheck
