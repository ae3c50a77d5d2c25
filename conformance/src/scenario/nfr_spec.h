// Latency targets as data (scenarios/nfr.json, schema scenarios/schema/nfr.schema.json, prose in
// docs/nfr.md): the product limits NFR-1..NFR-5 (absolute gates) and measurements without a
// limit (ratio gates against a baseline), each with its measurement boundary, the method that
// measures it through the driver, the sample count and the gated percentile.
//
// Loading is strict like scenarios (unknown keys, wrong types, bad values → kInvalidArgument,
// exit 2) and {{variables}} are substituted the same way.
//
// Thread-safety: values; immutable after loading.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "sbx/status.h"
#include "scenario/scenario.h"

namespace sandcheck {

enum class NfrMethod { kWarmExec, kPooledRun, kCreateExec, kDestroy, kDestroyReclaim, kOrphanSweep };
const char* NfrMethodName(NfrMethod m);

struct NfrTarget {
  std::string id;  // the measurement's name in report.json ("warm-start")
  std::string title;
  bool limited = false;     // a product limit (targets[]) or a measurement only
  std::string requirement;  // "NFR-1" (limited only)
  std::string level;        // MUST | SHOULD (limited only)
  double limit_s = 0;       // strict upper bound of the gated percentile (limited only)
  double percentile = 95;
  std::string clock = "harness";  // the gated clock: harness | target
  int samples = 1, max_samples = 1;
  // {"*"}: every backend the target offers; names: only those; empty: runtime-wide.
  std::vector<std::string> backends;
  NfrMethod method = NfrMethod::kWarmExec;
  std::string command, setup;  // per method
  // A backend's own command or setup where the general one cannot run there (the wasm
  // backend runs a module's command, not a shell): backend name -> text.
  std::map<std::string, std::string> command_by_backend, setup_by_backend;
  const std::string& CommandFor(const std::string& backend) const;
  const std::string& SetupFor(const std::string& backend) const;
  int sandboxes = 0;           // orphan_sweep
  std::string boundary;        // what starts and stops the clock

  bool RuntimeWide() const { return backends.empty(); }
  // The sample count for `--samples N` (0 = the default), clamped to 1..max_samples.
  int SamplesFor(int requested) const;
};

struct NfrSpec {
  std::string name, title, source, origin;
  std::vector<Variable> variables;
  std::map<std::string, std::string> values;
  std::vector<std::string> floor_argv = {"/bin/true"};
  int floor_samples = 200;
  std::string floor_boundary;
  std::vector<NfrTarget> targets;  // product limits first, then the other measurements

  const NfrTarget* Find(const std::string& id) const;
};

// Parses a latency-target file. `overrides` are --var values (names the file declares are
// applied and recorded in `used`).
sbx::StatusOr<NfrSpec> LoadNfrSpec(std::string_view text, const std::string& origin,
                                   const std::map<std::string, std::string>& overrides,
                                   std::set<std::string>* used);

// `--scenario NAME|FILE` or `--nfr FILE`: the built-in one by name, or a file.
sbx::StatusOr<NfrSpec> LoadNfrByName(const std::string& name_or_file,
                                     const std::map<std::string, std::string>& overrides,
                                     std::set<std::string>* used);

// The check ID of a target on a backend: "<spec>/<id>-<backend>" ("<spec>/<id>" runtime-wide).
std::string NfrCheckId(const NfrSpec& spec, const NfrTarget& t, const std::string& backend);

}  // namespace sandcheck
