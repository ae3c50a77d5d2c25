// The run-time values of {{harness.NAME}} (scenario.h: HarnessValueSpecs), made once per run:
// random tokens, the harness's pid, the mirror fixture's address, and — only when a scenario
// of the run refers to them — canary files planted on the harness's own host (FS-1: a sandbox
// must not be able to read them) and a credential-looking variable in the harness's own
// environment (SANDCHECK_HOST_CREDENTIAL: a sandbox must not see it either). The canaries are
// world-readable files in /tmp, /var/tmp, /run and /dev/shm, so that only the sandbox's own file-system view keeps
// them out, not file permissions; they are removed when the HarnessValues is destroyed, and
// canaries of dead sandcheck processes (a run that was killed) are swept when the next run plants
// its own.
//
// Thread-safety: one thread.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "sbx/status.h"

namespace sandcheck {

class HarnessValues {
 public:
  // `used`: the names the run's scenarios refer to (canaries are planted only if used);
  // `local`: the target's sandboxes run on this host (else no local-only value is made);
  // `mirror_addr`: "" when there is no mirror fixture.
  static sbx::StatusOr<HarnessValues> Make(const std::set<std::string>& used, bool local,
                                           const std::string& mirror_addr);
  HarnessValues(HarnessValues&& o) noexcept;
  HarnessValues& operator=(HarnessValues&&) = delete;
  HarnessValues(const HarnessValues&) = delete;
  HarnessValues& operator=(const HarnessValues&) = delete;
  ~HarnessValues();

  const std::map<std::string, std::string>& values() const { return values_; }
  const std::vector<std::string>& canaries() const { return canaries_; }

 private:
  HarnessValues() = default;
  std::map<std::string, std::string> values_;
  std::vector<std::string> canaries_;  // files to remove
};

// Puts SANDCHECK_HOST_CREDENTIAL=<random> in this process's environment (the value of
// {{harness.env_canary}}). Call first thing in main(), before any thread starts.
void PlantEnvCanary();

// Whether a --target's sandboxes run on this host: reference, adapter:, unix: and http:// to a
// loopback address are local; any other http:// is elsewhere. `override` is --target-host
// ("local", "remote" or "" for this guess).
bool TargetIsLocal(const std::string& target_spec, const std::string& override_mode);

}  // namespace sandcheck
