// Backend selection (BK-8, SEL-1..SEL-6): exhaustive properties over every combination of
// preference (7 + none) x tenant floor (7 + none) x trust class (4) x worker capability set
// (all 128 subsets of the 7 backends) x upgrade policy (2), then the documented examples of
// docs/selection.md as hand-written rows.
#include "select/selection.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace sbx::selection {
namespace {

using B = BackendKind;

constexpr std::array<Trust, 4> kTrusts = {Trust::kFirstParty, Trust::kVerified, Trust::kUntrusted,
                                          Trust::kUnverified};

std::vector<std::optional<B>> NoneAndAll() {
  std::vector<std::optional<B>> v = {std::nullopt};
  for (B b : kAllBackends) v.push_back(b);
  return v;
}

// The test's own statement of SEL-3/SEL-6 (not read from the code under test).
std::optional<B> TrustFloorPerSpec(Trust t) {
  switch (t) {
    case Trust::kFirstParty:
      return std::nullopt;
    case Trust::kVerified:
      return B::kOci;
    default:
      return B::kGvisor;
  }
}

int S(std::optional<B> b) { return b ? Strength(*b) : 0; }

std::string Name(std::optional<B> b) { return b ? std::string(BackendName(*b)) : "-"; }

std::string Describe(const Input& in) {
  return fmt::format("pref={} floor={} trust={} upgrade={} worker={}", Name(in.preference),
                     Name(in.tenant.floor), TrustName(in.trust), in.tenant.allow_upgrade,
                     in.worker.ToString());
}

// Outcome compressed for cross-combination checks: 0 = sandbox_unavailable, else Strength().
int Outcome(const StatusOr<Decision>& r) { return r.ok() ? Strength(r->backend) : 0; }

TEST(SelectionOrder, IsTheDocumentedTotalOrder) {
  // docs/selection.md §Order. Changing it is a design change: update the doc and this line.
  const std::vector<std::string> want = {"native", "wasm",   "oci",    "kubernetes",
                                         "remote", "gvisor", "microvm"};
  std::vector<std::string> got;
  for (B b : kAllBackends) got.emplace_back(BackendName(b));
  EXPECT_EQ(got, want);
  for (int i = 0; i + 1 < kBackendCount; ++i) {
    EXPECT_TRUE(StrongerThan(kAllBackends[i + 1], kAllBackends[i]));
    EXPECT_FALSE(StrongerThan(kAllBackends[i], kAllBackends[i + 1]));
    EXPECT_FALSE(StrongerThan(kAllBackends[i], kAllBackends[i]));
  }
  // SEL-6 relies on this: every backend an untrusted tool may not use is below gvisor.
  for (B b : {B::kNative, B::kWasm, B::kOci, B::kKubernetes, B::kRemote}) {
    EXPECT_TRUE(StrongerThan(B::kGvisor, b)) << BackendName(b);
  }
}

TEST(SelectionNames, RoundTripAndRejectUnknown) {
  for (B b : kAllBackends) {
    StatusOr<B> p = ParseBackend(BackendName(b));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, b);
  }
  for (const char* bad : {"", "Native", "gVisor", "firecracker", "container", "docker", " oci"}) {
    StatusOr<B> p = ParseBackend(bad);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
  }
  EXPECT_EQ(BackendSet({B::kMicrovm, B::kNative}).ToString(), "[native, microvm]");
  EXPECT_EQ(BackendSet().ToString(), "[]");
}

TEST(SelectBackend, ExhaustiveProperties) {
  const std::vector<std::optional<B>> opts = NoneAndAll();
  // outcome[pref][floor][trust][worker][upgrade], for the cross-combination properties.
  std::vector<int> outcome(8 * 8 * 4 * 128 * 2, -1);
  auto idx = [](size_t p, size_t f, size_t t, unsigned m, int u) {
    return (((p * 8 + f) * 4 + t) * 128 + m) * 2 + u;
  };
  std::vector<std::string> failures;
  auto fail = [&](const Input& in, const std::string& what) {
    if (failures.size() < 30) failures.push_back(Describe(in) + ": " + what);
  };
  size_t combos = 0, ok_count = 0, upgrades = 0;

  for (size_t p = 0; p < opts.size(); ++p) {
    for (size_t f = 0; f < opts.size(); ++f) {
      for (size_t t = 0; t < kTrusts.size(); ++t) {
        for (unsigned m = 0; m < 128; ++m) {
          for (int u = 0; u < 2; ++u) {
            ++combos;
            Input in;
            in.preference = opts[p];
            in.tenant.floor = opts[f];
            in.tenant.allow_upgrade = u == 1;
            in.trust = kTrusts[t];
            in.worker = BackendSet::FromMask(static_cast<uint8_t>(m));
            const StatusOr<Decision> r = SelectBackend(in);
            outcome[idx(p, f, t, m, u)] = Outcome(r);

            // Deterministic: the same input gives the same outcome and the same words.
            const StatusOr<Decision> again = SelectBackend(in);
            if (Outcome(again) != Outcome(r) ||
                (r.ok() ? again->reasons != r->reasons
                        : again.status().message() != r.status().message())) {
              fail(in, "not deterministic");
            }

            // The level and the target, computed here from the documented rules 1 and 2.
            std::optional<B> level;
            for (std::optional<B> q :
                 {in.preference, in.tenant.floor, TrustFloorPerSpec(in.trust)}) {
              if (S(q) > S(level)) level = q;
            }
            B required = B::kNative;
            if (level && in.preference == level) {
              required = *level;
            } else if (level) {
              for (B g : {B::kMicrovm, B::kGvisor, B::kOci, B::kNative}) {
                if (Strength(g) >= S(level)) required = g;
              }
            }

            if (!r.ok()) {
              if (r.status().code() != Code::kSandboxUnavailable) {
                fail(in, "error other than sandbox_unavailable: " + r.status().ToString());
                continue;
              }
              // No needless refusal: the worker really has nothing acceptable.
              for (B b : in.worker.ToVector()) {
                bool acceptable =
                    b == required || (in.tenant.allow_upgrade && !IsPlacement(required) &&
                                      IsGeneralPurpose(b) && StrongerThan(b, required));
                if (acceptable)
                  fail(in, fmt::format("refused though worker has {}", BackendName(b)));
              }
              // SEL-5: the refusal names what was wanted and what the worker has.
              const std::string& msg = r.status().message();
              if (msg.find(std::string(BackendName(required))) == std::string::npos) {
                fail(in, "refusal does not name the required backend: " + msg);
              }
              if (msg.find(in.worker.ToString()) == std::string::npos) {
                fail(in, "refusal does not name the worker's backends: " + msg);
              }
              continue;
            }

            ++ok_count;
            const B got = r->backend;
            // SEL-5: never a backend the worker lacks.
            if (!in.worker.Has(got)) fail(in, "chose a backend the worker lacks");
            // BK-8, SEL-4: never weaker than any input's requirement.
            for (std::optional<B> q :
                 {in.preference, in.tenant.floor, TrustFloorPerSpec(in.trust)}) {
              if (Strength(got) < S(q)) fail(in, "weaker than " + Name(q));
            }
            // SEL-6: untrusted and unverified run on gvisor or microvm, whatever they ask.
            if ((in.trust == Trust::kUntrusted || in.trust == Trust::kUnverified) &&
                got != B::kGvisor && got != B::kMicrovm) {
              fail(in, "untrusted tool on " + Name(got));
            }
            if (r->required != required) {
              fail(in, "required " + Name(r->required) + " != " + Name(required));
            }
            if (in.worker.Has(required)) {
              // Exact when possible: no upgrade past what is required.
              if (got != required || r->upgraded)
                fail(in, "did not take the available required backend");
            } else {
              ++upgrades;
              // An upgrade: allowed, from a non-placement, to the weakest stronger general one.
              if (!in.tenant.allow_upgrade) fail(in, "upgraded although the tenant forbids it");
              if (IsPlacement(required)) fail(in, "swapped a placement");
              if (!IsGeneralPurpose(got)) fail(in, "upgraded to " + Name(got));
              if (!r->upgraded) fail(in, "upgrade not flagged");
              for (B b : in.worker.ToVector()) {
                if (IsGeneralPurpose(b) && StrongerThan(b, required) && StrongerThan(got, b)) {
                  fail(in, "upgrade skipped the weaker " + Name(b));
                }
              }
            }
            // Placements and wasm are chosen only when the manifest names them (never by a
            // floor, a trust class or an upgrade).
            if ((IsPlacement(got) || got == B::kWasm) && got != in.preference) {
              fail(in, "chose " + Name(got) + " unasked");
            }
            // The deciders are exactly the inputs that require `required`.
            std::vector<Decider> want;
            if (level && in.preference == level) want.push_back(Decider::kPreference);
            if (level && in.tenant.floor == level) want.push_back(Decider::kTenantFloor);
            if (level && TrustFloorPerSpec(in.trust) == level) want.push_back(Decider::kTrust);
            if (!level) want.push_back(Decider::kDefault);
            if (r->decided_by != want) fail(in, "wrong deciders: " + DescribeDecision(*r));
          }
        }
      }
    }
  }

  // Cross-combination properties over the recorded outcomes.
  for (size_t p = 0; p < 8; ++p) {
    for (size_t f = 0; f < 8; ++f) {
      for (size_t t = 0; t < 4; ++t) {
        for (unsigned m = 0; m < 128; ++m) {
          for (int u = 0; u < 2; ++u) {
            const int here = outcome[idx(p, f, t, m, u)];
            Input in;
            in.preference = opts[p];
            in.tenant.floor = opts[f];
            in.trust = kTrusts[t];
            in.tenant.allow_upgrade = u == 1;
            in.worker = BackendSet::FromMask(static_cast<uint8_t>(m));
            // Preference and floor combine symmetrically (the strongest wins) when both name
            // general-purpose backends; a floor naming wasm or a placement is only a level.
            auto general = [](std::optional<B> b) { return !b || IsGeneralPurpose(*b); };
            if (general(opts[p]) && general(opts[f]) && outcome[idx(f, p, t, m, u)] != here) {
              fail(in, "preference/floor not symmetric");
            }
            // BK-8: raising the tenant floor never gives a weaker backend.
            for (size_t f2 = f + 1; f2 < 8; ++f2) {
              const int higher = outcome[idx(p, f2, t, m, u)];
              if (here > 0 && higher > 0 && higher < here) fail(in, "higher floor, weaker backend");
            }
            // Unverified is treated exactly as untrusted (SEL-6); a stricter trust class never
            // gives a weaker backend.
            if (t == 3 && outcome[idx(p, f, 2, m, u)] != here) fail(in, "unverified != untrusted");
            for (size_t t2 = t + 1; t2 < 4; ++t2) {
              const int stricter = outcome[idx(p, f, t2, m, u)];
              if (here > 0 && stricter > 0 && stricter < here)
                fail(in, "stricter trust, weaker backend");
            }
            // Allowing upgrades only ever turns refusals into stronger backends.
            if (u == 0 && here > 0 && outcome[idx(p, f, t, m, 1)] != here)
              fail(in, "upgrade flag changed a success");
            // A worker that can run more never refuses what a smaller one accepted.
            for (int bit = 0; bit < kBackendCount; ++bit) {
              if (here > 0 && outcome[idx(p, f, t, m | (1u << bit), u)] == 0) {
                fail(in, "adding a backend to the worker caused a refusal");
              }
            }
          }
        }
      }
    }
  }

  EXPECT_EQ(combos, 8u * 8 * 4 * 128 * 2);
  // Both outcomes and the upgrade path are really exercised (a vacuous run cannot pass).
  EXPECT_GT(ok_count, combos / 4);
  EXPECT_LT(ok_count, combos);
  EXPECT_GT(upgrades, 0u);
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_TRUE(failures.empty());
}

// The worked examples of docs/selection.md §Examples, row for row.
struct Row {
  const char* name;
  std::optional<B> preference;
  std::optional<B> floor;
  Trust trust;
  BackendSet worker;
  bool allow_upgrade;
  std::optional<B> want;  // nullopt: sandbox_unavailable
  std::vector<Decider> decided_by;
  bool upgraded;
};

TEST(SelectBackend, DocumentedExamples) {
  using D = Decider;
  const std::vector<Row> rows = {
      {"1 first-party native",
       B::kNative,
       {},
       Trust::kFirstParty,
       {B::kNative, B::kOci, B::kGvisor},
       true,
       B::kNative,
       {D::kPreference},
       false},
      {"2 nothing asked",
       {},
       {},
       Trust::kFirstParty,
       {B::kNative, B::kOci},
       true,
       B::kNative,
       {D::kDefault},
       false},
      {"3 verified asks native",
       B::kNative,
       {},
       Trust::kVerified,
       {B::kNative, B::kOci},
       true,
       B::kOci,
       {D::kTrust},
       false},
      {"4 verified asks wasm",
       B::kWasm,
       {},
       Trust::kVerified,
       {B::kWasm, B::kOci},
       true,
       B::kOci,
       {D::kTrust},
       false},
      {"5 wasm above native floor",
       B::kWasm,
       B::kNative,
       Trust::kFirstParty,
       {B::kNative, B::kWasm},
       true,
       B::kWasm,
       {D::kPreference},
       false},
      {"6 floor beats preference",
       B::kNative,
       B::kGvisor,
       Trust::kFirstParty,
       {B::kNative, B::kGvisor},
       true,
       B::kGvisor,
       {D::kTenantFloor},
       false},
      {"7 preference beats floor",
       B::kMicrovm,
       B::kOci,
       Trust::kFirstParty,
       {B::kOci, B::kMicrovm},
       true,
       B::kMicrovm,
       {D::kPreference},
       false},
      {"8 untrusted asks native",
       B::kNative,
       {},
       Trust::kUntrusted,
       {B::kNative, B::kGvisor},
       true,
       B::kGvisor,
       {D::kTrust},
       false},
      {"9 unverified asks remote",
       B::kRemote,
       {},
       Trust::kUnverified,
       {B::kRemote, B::kGvisor},
       true,
       B::kGvisor,
       {D::kTrust},
       false},
      {"10 untrusted asks microvm",
       B::kMicrovm,
       {},
       Trust::kUntrusted,
       {B::kGvisor, B::kMicrovm},
       true,
       B::kMicrovm,
       {D::kPreference},
       false},
      {"11 untrusted, no gvisor: upgrade",
       {},
       {},
       Trust::kUntrusted,
       {B::kNative, B::kMicrovm},
       true,
       B::kMicrovm,
       {D::kTrust},
       true},
      {"12 same, upgrades forbidden",
       {},
       {},
       Trust::kUntrusted,
       {B::kNative, B::kMicrovm},
       false,
       {},
       {},
       false},
      {"13 untrusted, nothing strong enough",
       B::kNative,
       {},
       Trust::kUntrusted,
       {B::kNative, B::kWasm, B::kOci, B::kKubernetes, B::kRemote},
       true,
       {},
       {},
       false},
      {"14 upgrade skips a placement",
       B::kOci,
       {},
       Trust::kFirstParty,
       {B::kNative, B::kKubernetes, B::kGvisor},
       true,
       B::kGvisor,
       {D::kPreference},
       true},
      {"15 placement never swapped",
       B::kRemote,
       {},
       Trust::kFirstParty,
       {B::kNative, B::kOci, B::kGvisor, B::kMicrovm},
       true,
       {},
       {},
       false},
      {"16 upgrade skips wasm",
       B::kNative,
       {},
       Trust::kFirstParty,
       {B::kWasm, B::kOci},
       true,
       B::kOci,
       {D::kPreference},
       true},
      {"17 kubernetes above an oci floor",
       B::kKubernetes,
       B::kOci,
       Trust::kVerified,
       {B::kOci, B::kKubernetes},
       true,
       B::kKubernetes,
       {D::kPreference},
       false},
      {"18 floor names a placement: a level",
       {},
       B::kKubernetes,
       Trust::kFirstParty,
       {B::kKubernetes, B::kGvisor},
       true,
       B::kGvisor,
       {D::kTenantFloor},
       false},
      {"19 floor wasm means oci-or-stronger",
       {},
       B::kWasm,
       Trust::kFirstParty,
       {B::kWasm, B::kOci},
       true,
       B::kOci,
       {D::kTenantFloor},
       false},
      {"20 all three agree",
       B::kGvisor,
       B::kGvisor,
       Trust::kUntrusted,
       {B::kGvisor},
       true,
       B::kGvisor,
       {D::kPreference, D::kTenantFloor, D::kTrust},
       false},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    Input in;
    in.preference = row.preference;
    in.tenant.floor = row.floor;
    in.tenant.allow_upgrade = row.allow_upgrade;
    in.trust = row.trust;
    in.worker = row.worker;
    StatusOr<Decision> r = SelectBackend(in);
    if (!row.want) {
      ASSERT_FALSE(r.ok()) << DescribeDecision(*r);
      EXPECT_EQ(r.status().code(), Code::kSandboxUnavailable);
      EXPECT_NE(r.status().message().find(row.worker.ToString()), std::string::npos)
          << r.status().message();
      continue;
    }
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->backend, *row.want) << DescribeDecision(*r);
    EXPECT_EQ(r->decided_by, row.decided_by) << DescribeDecision(*r);
    EXPECT_EQ(r->upgraded, row.upgraded);
  }
}

TEST(SelectBackend, RefusalSaysWhatAndWhy) {
  Input in;
  in.preference = B::kNative;
  in.trust = Trust::kUntrusted;
  in.worker = {B::kNative, B::kOci};
  StatusOr<Decision> r = SelectBackend(in);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kSandboxUnavailable);
  EXPECT_EQ(CodeName(r.status().code()), "sandbox_unavailable");
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("requires gvisor"), std::string::npos) << m;
  EXPECT_NE(m.find("trust untrusted requires at least gvisor"), std::string::npos) << m;
  EXPECT_NE(m.find("manifest prefers native"), std::string::npos) << m;
  EXPECT_NE(m.find("[native, oci]"), std::string::npos) << m;
  EXPECT_NE(m.find("no stronger general-purpose backend"), std::string::npos) << m;

  in.worker = {};
  in.trust = Trust::kFirstParty;
  in.preference.reset();
  r = SelectBackend(in);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kSandboxUnavailable);
}

}  // namespace
}  // namespace sbx::selection
