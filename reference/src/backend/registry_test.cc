// The registry (registry.cc) compiled as a build with SBX_BACKENDS=native would compile it: the
// six backends are still listed, in strength order, and every one left out says why it cannot
// run (docs/backends.md, "Leaving a backend out"). This target defines only SBX_BACKEND_NATIVE
// and links no backend library; MakeNativeBackend is the fake below.
#include <gtest/gtest.h>

#include "backend/backend.h"

namespace sbx::backend {

class FakeNative final : public Backend {
 public:
  std::string name() const override { return "native"; }
  Status Probe() override { return Status::Ok(); }
  std::vector<std::string> Features() const override { return {"limits.cpu"}; }
  StatusOr<std::unique_ptr<Sandbox>> Create(const std::string&, const SandboxSpec&, StageTimings*,
                                            CreateMode) override {
    return Internal("not used");
  }
};

std::unique_ptr<Backend> MakeNativeBackend(const BackendContext&) {
  return std::make_unique<FakeNative>();
}

namespace {

TEST(Registry, ALeftOutBackendIsListedAndSaysItIsNotCompiledIn) {
  BackendContext ctx;
  auto backends = MakeBackends(ctx);
  std::vector<std::string> names;
  for (auto& b : backends) names.push_back(b->name());
  EXPECT_EQ(names,
            (std::vector<std::string>{"native", "oci", "gvisor", "wasm", "remote", "microvm"}));
  ASSERT_EQ(backends.size(), 6u);
  EXPECT_TRUE(backends[0]->Probe().ok());
  for (size_t i = 1; i < backends.size(); ++i) {
    Status probe = backends[i]->Probe();
    EXPECT_EQ(probe.code(), Code::kUnsupported) << names[i];
    EXPECT_NE(probe.message().find("the " + names[i] + " backend is not compiled into this build"),
              std::string::npos)
        << probe.message();
    EXPECT_TRUE(backends[i]->Features().empty());
    auto created = backends[i]->Create("x", SandboxSpec{}, nullptr, CreateMode{});
    ASSERT_FALSE(created.ok());
    EXPECT_EQ(created.status().code(), Code::kUnsupported);
  }
}

}  // namespace
}  // namespace sbx::backend
