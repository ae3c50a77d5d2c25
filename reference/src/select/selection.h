// Backend selection (TRT-003 §2–§3; BK-8, SEL-1..SEL-6): a pure function from the manifest's
// preference, the tenant's floor, the tool's trust class and what this worker can run, to one
// backend or `sandbox_unavailable`. No I/O, no globals: the worker's capabilities are probed
// elsewhere and passed in. The order, the rules and the worked examples are in docs/selection.md.
//
// Thread-safety: pure functions over values; safe from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sbx/model.h"
#include "sbx/status.h"

namespace sbx::selection {

// All seven backends of TRT-003 §2. Declaration order IS the strength order, weakest first
// (docs/selection.md says why): Strength() and every comparison read it from here.
enum class BackendKind : uint8_t {
  kNative = 0,      // BK-1 OS process + namespaces
  kWasm = 1,        // BK-2 capability VM (run inside native's OS isolation here)
  kOci = 2,         // BK-3 namespaces + cgroups from an OCI bundle
  kKubernetes = 3,  // BK-6 placement: a Pod; ranked by its minimum guarantee (a container)
  kRemote = 4,      // BK-7 placement: a network-isolated worker pool
  kGvisor = 5,      // BK-4 user-space kernel
  kMicrovm = 6,     // BK-5 hardware-virtualised guest
};
inline constexpr int kBackendCount = 7;
inline constexpr std::array<BackendKind, kBackendCount> kAllBackends = {
    BackendKind::kNative, BackendKind::kWasm,   BackendKind::kOci,    BackendKind::kKubernetes,
    BackendKind::kRemote, BackendKind::kGvisor, BackendKind::kMicrovm};

// 1 (weakest) .. 7 (strongest).
constexpr int Strength(BackendKind b) { return static_cast<int>(b) + 1; }
constexpr bool StrongerThan(BackendKind a, BackendKind b) { return Strength(a) > Strength(b); }

// Placements run the tool somewhere else (a cluster, a remote pool). Moving a tool there, or
// away from where its manifest asked to run, is a data-residency decision, so selection picks a
// placement only when the manifest names it and never upgrades to or from one.
constexpr bool IsPlacement(BackendKind b) {
  return b == BackendKind::kKubernetes || b == BackendKind::kRemote;
}
// Backends that can host any tool image, hence valid upgrade targets: native, oci, gvisor,
// microvm. wasm runs only wasm modules and the placements are placements.
constexpr bool IsGeneralPurpose(BackendKind b) {
  return !IsPlacement(b) && b != BackendKind::kWasm;
}

// Stable wire names: "native", "wasm", "oci", "kubernetes", "remote", "gvisor", "microvm".
std::string_view BackendName(BackendKind b);
// kInvalidArgument naming the input and the accepted names. Exact, lower case.
StatusOr<BackendKind> ParseBackend(std::string_view name);

// SEL-3/SEL-6: the minimum backend a trust class requires. first_party: none; verified: oci
// (third-party code never runs on bare native); untrusted and unverified: gvisor.
std::optional<BackendKind> TrustRequirement(Trust t);

// A set of backends (what a worker can run). Iterates in strength order.
class BackendSet {
 public:
  BackendSet() = default;
  BackendSet(std::initializer_list<BackendKind> backends);
  static BackendSet FromMask(uint8_t mask) { return BackendSet(mask & kFullMask); }
  static BackendSet All() { return BackendSet(kFullMask); }

  bool Has(BackendKind b) const { return (mask_ >> static_cast<int>(b)) & 1u; }
  void Add(BackendKind b) { mask_ |= static_cast<uint8_t>(1u << static_cast<int>(b)); }
  void Remove(BackendKind b) { mask_ &= static_cast<uint8_t>(~(1u << static_cast<int>(b))); }
  bool empty() const { return mask_ == 0; }
  uint8_t mask() const { return mask_; }
  std::vector<BackendKind> ToVector() const;
  std::string ToString() const;  // "[native, oci]" ; "[]" when empty
  bool operator==(const BackendSet&) const = default;

 private:
  static constexpr uint8_t kFullMask = (1u << kBackendCount) - 1;
  explicit BackendSet(uint8_t mask) : mask_(mask) {}
  uint8_t mask_ = 0;
};

// SEL-2 and SEL-5: what the tenant's policy says.
struct TenantPolicy {
  std::optional<BackendKind> floor;  // minimum isolation; nullopt = none
  // When the worker lacks the required backend, may selection take the weakest STRONGER
  // general-purpose backend the worker has? Default yes (BK-8 forbids only weaker); a tenant
  // that wants exactly the required backend or nothing sets false.
  bool allow_upgrade = true;
};

struct Input {
  std::optional<BackendKind> preference;  // SEL-1: the manifest's sandbox preference
  TenantPolicy tenant;                    // SEL-2, SEL-5
  Trust trust = Trust::kUnverified;       // SEL-3: unknown provenance is unverified
  BackendSet worker;                      // SEL-5: probed capabilities of this worker
};

// Which input set the level. kDefault: no input named a backend.
enum class Decider { kPreference, kTenantFloor, kTrust, kDefault };
std::string_view DeciderName(Decider d);  // "preference", "tenant_floor", "trust", "default"

// The weakest general-purpose backend at least as strong as `level`: what a floor or a trust
// requirement of `level` resolves to (wasm -> oci, kubernetes/remote -> gvisor).
BackendKind WeakestGeneralPurposeAtLeast(BackendKind level);

struct Decision {
  BackendKind backend = BackendKind::kNative;
  // What the inputs resolve to before the worker's capabilities are looked at (rule 2).
  BackendKind required = BackendKind::kNative;
  // Every input whose requirement equals the level (fixed order: preference, floor, trust), or
  // {kDefault}.
  std::vector<Decider> decided_by;
  bool upgraded = false;             // backend is stronger than required (worker lacked it)
  std::vector<std::string> reasons;  // one line per rule applied, for logs and result.reason
};

// The selection rules (docs/selection.md §Rules):
//  1. level = the strongest of preference, tenant floor and trust requirement (SEL-4, SEL-6).
//  2. required = the preference if it is at the level (SEL-1), else the weakest general-purpose
//     backend at the level or above (floors and trust name a level, not a place); native if
//     no input names anything.
//  3. The worker has `required`: it (SEL-5).
//  4. Otherwise, if the tenant allows upgrades and `required` is not a placement: the weakest
//     general-purpose backend of the worker stronger than `required`.
//  5. Otherwise kSandboxUnavailable, naming what was required, why, and what the worker has.
// Never returns a backend weaker than any input's requirement nor one the worker lacks.
StatusOr<Decision> SelectBackend(const Input& input);

// One line for logs: "gvisor (required gvisor by trust; upgraded: no)".
std::string DescribeDecision(const Decision& d);

}  // namespace sbx::selection
