// Unit tests for the OCI spec the adapters hand to runc/crun/runsc: every limit asked for is
// in it with the right unit, and the isolation defaults are strict.
#include <gtest/gtest.h>

#include "common/oci.h"

namespace sandcheck::adapter {
namespace {

SandboxRecord Record() {
  SandboxRecord r;
  r.id = "0123456789abcdef";
  r.limits.cpu_millicores = 500;
  r.limits.memory_bytes = 256ll << 20;
  r.limits.pids = 64;
  r.limits.fds = 100;
  r.env = {{"FOO", "bar"}};
  return r;
}

TEST(OciSpecTest, LimitsAreInTheSpec) {
  Json s = BuildOciSpec(Record(), "/state/work", "echo hi", "sandcheck-x", OciOptions{});
  const Json& res = s["linux"]["resources"];
  EXPECT_EQ(res["cpu"]["quota"], 50000);  // 500 millicores = 50 ms per 100 ms
  EXPECT_EQ(res["cpu"]["period"], 100000);
  EXPECT_EQ(res["memory"]["limit"], 256ll << 20);
  EXPECT_EQ(res["memory"]["swap"], 256ll << 20);
  EXPECT_EQ(res["memory"]["disableOOMKiller"], true);  // RES-8: nothing runs past a breach
  EXPECT_EQ(res["pids"]["limit"], 64);
  EXPECT_EQ(s["process"]["rlimits"][0]["hard"], 100);
  EXPECT_EQ(s["linux"]["cgroupsPath"], "sandcheck-x");
}

TEST(OciSpecTest, NoLimitsAskedNoneWritten) {
  SandboxRecord r;
  r.id = "0123456789abcdef";
  Json s = BuildOciSpec(r, "/w", "true", "c", OciOptions{});
  const Json& res = s["linux"]["resources"];
  EXPECT_FALSE(res.contains("cpu"));
  EXPECT_FALSE(res.contains("memory"));
  EXPECT_FALSE(res.contains("pids"));
}

TEST(OciSpecTest, StrictDefaults) {
  Json s = BuildOciSpec(Record(), "/state/work", "echo hi", "c", OciOptions{});
  EXPECT_EQ(s["root"]["readonly"], true);
  EXPECT_EQ(s["process"]["user"]["uid"], 1000);
  EXPECT_TRUE(s["process"]["capabilities"]["bounding"].empty());
  EXPECT_EQ(s["process"]["noNewPrivileges"], true);
  EXPECT_EQ(s["process"]["args"], Json({"/bin/sh", "-c", "echo hi"}));
  EXPECT_EQ(s["process"]["cwd"], "/work");
  bool has_net_ns = false;
  for (const auto& ns : s["linux"]["namespaces"]) has_net_ns |= ns["type"] == "network";
  EXPECT_TRUE(has_net_ns);
  bool work_rw = false;
  for (const auto& m : s["mounts"]) {
    if (m["destination"] == "/work") {
      EXPECT_EQ(m["source"], "/state/work");
      work_rw = true;
    }
  }
  EXPECT_TRUE(work_rw);
  bool env_passed = false;
  for (const auto& e : s["process"]["env"]) env_passed |= e == "FOO=bar";
  EXPECT_TRUE(env_passed);
}

}  // namespace
}  // namespace sandcheck::adapter
