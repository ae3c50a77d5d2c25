// `sandcheck run --scenario load` (issue 17, docs/load.md): many one-shot runs at once against
// ANY target, through its driver, each echoing a token nobody else has; then nothing may be
// lost, nothing may come back to the wrong caller, and nothing may be left on the host.
//
// Per run: RunPooled (the target's one-shot through its warm pool) or, where the driver has
// none, create + exec + destroy. A run is
//   ok       status ok, exit 0 and stdout exactly "TOKEN\n";
//   wrong    an answer that is not its own (another token, other bytes): a result crossed over;
//   refused  the target said "not now" (429/503, sandbox_unavailable before anything ran) and
//            the client came back after Retry-After, up to max_retries times: counted, not lost;
//   lost     anything else (an error call, a timeout, a crash, refused past the retries).
// Around the load (after a warm-up at the same concurrency, so the warm pools are as full before
// as after): the target's open descriptors and RSS where it reports them (GET /v1/info
// "capacity"), and on a local target the host's kernel objects (cgroup directories, network
// and mount namespaces, root-namespace interfaces, processes holding the run's token), which must
// come back to where they were (polled until they do or settle_s has passed).
//
// Thread-safety: RunLoad uses `concurrency` threads, each with its own Target::ForThread().
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checks/expectations.h"
#include "drivers/target.h"
#include "run/live_log.h"

namespace sandcheck {

struct LoadOptions {
  int runs = 200;
  int concurrency = 8;
  std::string backend;    // "" = the target's choice
  std::string trust;      // "" = the target's default; first_party/verified may reuse (LC-10)
  double timeout_s = 20;  // one command's timeout
  int max_retries = 50;   // per run, after a refusal
  // How long kernel objects and descriptors may take to come back: a warm pool that grew
  // under the load shrinks once the demand window (10 s in the reference) has passed.
  double settle_s = 20;
  bool target_local = true;
  Profile profile = Profile::kDefault;
};

struct LoadResult {
  nlohmann::json checks = nlohmann::json::array();
  nlohmann::json measurements = nlohmann::json::array();
  nlohmann::json load = nlohmann::json::object();  // report.json "load": the figures
  std::vector<std::string> errors;                 // infrastructure failures (exit 3)
};

LoadResult RunLoad(Target& target, const TargetInfo& info, const LoadOptions& options,
                   const std::string& run_id, LiveLog& log);

// This host's kernel objects a sandbox runtime makes (for the before/after of a local target):
// {"cgroup_dirs","net_namespaces","mount_namespaces","interfaces"}.
nlohmann::json HostObjectCensus();

// The target's own figures from its info (capacity.open_fds, capacity.rss_bytes): null if it
// reports none.
nlohmann::json TargetResources(const TargetInfo& info);

}  // namespace sandcheck
