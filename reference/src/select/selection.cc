// Backend selection: see selection.h and docs/selection.md.
#include "select/selection.h"

#include <fmt/format.h>

namespace sbx::selection {
namespace {

// Wire names, indexed by the enum's value (= strength order).
constexpr std::array<std::string_view, kBackendCount> kBackendNames = {
    "native", "wasm", "oci", "kubernetes", "remote", "gvisor", "microvm"};

static_assert(Strength(BackendKind::kNative) == 1 && Strength(BackendKind::kMicrovm) == 7);
static_assert(StrongerThan(BackendKind::kGvisor, BackendKind::kRemote),
              "SEL-6 needs gvisor above every backend an untrusted tool may not run on");
static_assert(StrongerThan(BackendKind::kMicrovm, BackendKind::kGvisor));

std::string JoinNames(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

// The weakest general-purpose backend in `worker` strictly stronger than `than`.
std::optional<BackendKind> WeakestGeneralPurpose(const BackendSet& worker, BackendKind than) {
  for (BackendKind b : kAllBackends) {  // strength order
    if (worker.Has(b) && IsGeneralPurpose(b) && StrongerThan(b, than)) return b;
  }
  return std::nullopt;
}

}  // namespace

std::string_view BackendName(BackendKind b) { return kBackendNames[static_cast<int>(b)]; }

StatusOr<BackendKind> ParseBackend(std::string_view name) {
  for (BackendKind b : kAllBackends) {
    if (BackendName(b) == name) return b;
  }
  return InvalidArgument(fmt::format("unknown backend \"{}\" (one of: {})", name,
                                     JoinNames({kBackendNames.begin(), kBackendNames.end()})));
}

std::optional<BackendKind> TrustRequirement(Trust t) {
  switch (t) {
    case Trust::kFirstParty:
      return std::nullopt;
    case Trust::kVerified:
      return BackendKind::kOci;
    // SEL-6: gVisor or microVM whatever they ask; gvisor is the weaker of the two, so it is the
    // floor, and a request for microvm (stronger) stands.
    case Trust::kUntrusted:
    case Trust::kUnverified:
      return BackendKind::kGvisor;
  }
  return BackendKind::kGvisor;  // unreachable; fail closed
}

BackendSet::BackendSet(std::initializer_list<BackendKind> backends) {
  for (BackendKind b : backends) Add(b);
}

std::vector<BackendKind> BackendSet::ToVector() const {
  std::vector<BackendKind> out;
  for (BackendKind b : kAllBackends) {
    if (Has(b)) out.push_back(b);
  }
  return out;
}

std::string BackendSet::ToString() const {
  std::vector<std::string_view> names;
  for (BackendKind b : ToVector()) names.push_back(BackendName(b));
  return "[" + JoinNames(names) + "]";
}

std::string_view DeciderName(Decider d) {
  switch (d) {
    case Decider::kPreference:
      return "preference";
    case Decider::kTenantFloor:
      return "tenant_floor";
    case Decider::kTrust:
      return "trust";
    case Decider::kDefault:
      return "default";
  }
  return "default";
}

BackendKind WeakestGeneralPurposeAtLeast(BackendKind level) {
  for (BackendKind b : kAllBackends) {
    if (IsGeneralPurpose(b) && !StrongerThan(level, b)) return b;
  }
  return BackendKind::kMicrovm;  // unreachable: microvm is general-purpose and the strongest
}

StatusOr<Decision> SelectBackend(const Input& in) {
  Decision d;
  // Rule 1 (SEL-1..SEL-4, SEL-6): each input's requirement; the level is the strongest of them.
  struct Requirement {
    Decider by;
    std::optional<BackendKind> backend;
  };
  const std::array<Requirement, 3> reqs = {{
      {Decider::kPreference, in.preference},
      {Decider::kTenantFloor, in.tenant.floor},
      {Decider::kTrust, TrustRequirement(in.trust)},
  }};
  std::optional<BackendKind> level;
  for (const Requirement& r : reqs) {
    if (r.backend && (!level || StrongerThan(*r.backend, *level))) level = r.backend;
  }
  std::string inputs;  // "manifest prefers native; trust untrusted requires at least gvisor"
  for (const Requirement& r : reqs) {
    if (!r.backend) continue;
    std::string line;
    switch (r.by) {
      case Decider::kPreference:
        line = fmt::format("manifest prefers {}", BackendName(*r.backend));
        break;
      case Decider::kTenantFloor:
        line = fmt::format("tenant floor is {}", BackendName(*r.backend));
        break;
      default:
        line = fmt::format("trust {} requires at least {}", TrustName(in.trust),
                           BackendName(*r.backend));
        break;
    }
    if (!inputs.empty()) inputs += "; ";
    inputs += line;
    d.reasons.push_back(std::move(line));
    if (*r.backend == *level) d.decided_by.push_back(r.by);
  }

  // Rule 2: the target. The preference names a backend; floors and trust name only a level,
  // met by the weakest general-purpose backend at that level or above (a floor never moves a
  // tool into wasm or onto a placement). Nothing named: native (BK-1, trusted first-party).
  BackendKind target = BackendKind::kNative;
  if (!level) {
    d.decided_by = {Decider::kDefault};
    d.reasons.push_back("nothing required: native");
  } else if (in.preference == level) {
    target = *level;
  } else {
    target = WeakestGeneralPurposeAtLeast(*level);
  }
  d.required = target;
  if (level) {
    std::vector<std::string_view> deciders;
    for (Decider by : d.decided_by) deciders.push_back(DeciderName(by));
    d.reasons.push_back(fmt::format("required: {} (level {} set by {})", BackendName(target),
                                    BackendName(*level), JoinNames(deciders)));
  }

  // Rule 3 (SEL-5): the worker runs it.
  if (in.worker.Has(target)) {
    d.backend = target;
    return d;
  }

  // Rule 4: never weaker; stronger only if the tenant allows it and residency is not at stake.
  std::string why_not;
  if (!in.tenant.allow_upgrade) {
    why_not = "the tenant policy forbids upgrades";
  } else if (IsPlacement(target)) {
    why_not = fmt::format("{} is a placement, which selection never swaps for another backend",
                          BackendName(target));
  } else if (std::optional<BackendKind> up = WeakestGeneralPurpose(in.worker, target)) {
    d.backend = *up;
    d.upgraded = true;
    d.reasons.push_back(
        fmt::format("worker lacks {}; upgraded to {}, the weakest stronger "
                    "general-purpose backend it has",
                    BackendName(target), BackendName(*up)));
    return d;
  } else {
    why_not = "it has no stronger general-purpose backend";
  }

  // Rule 5 (SEL-5): refuse, never fall back.
  return Status(Code::kSandboxUnavailable,
                fmt::format("requires {} ({}) but this worker has {} and {}; never falling "
                            "back to a weaker backend",
                            BackendName(target), inputs.empty() ? "nothing else asked" : inputs,
                            in.worker.ToString(), why_not));
}

std::string DescribeDecision(const Decision& d) {
  std::vector<std::string_view> deciders;
  for (Decider by : d.decided_by) deciders.push_back(DeciderName(by));
  return fmt::format("{} (required {} by {}; upgraded: {})", BackendName(d.backend),
                     BackendName(d.required), JoinNames(deciders), d.upgraded ? "yes" : "no");
}

}  // namespace sbx::selection
