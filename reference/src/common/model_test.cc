#include "sbx/model.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace sbx {
namespace {

using nlohmann::json;

TEST(Model, ResultJsonHasTheApiFields) {
  ExecResult r;
  r.status = ExecStatus::kResourceExceeded;
  r.state = SandboxState::kCrashed;
  r.exit_code = 137;
  r.stages.execute = 0.5;
  json j = r;
  EXPECT_EQ(j["status"], "resource_exceeded");
  EXPECT_EQ(j["state"], "CRASHED");
  EXPECT_EQ(j["exit"], 137);
  EXPECT_TRUE(j["stages"].contains("execute"));
  EXPECT_FALSE(j["stages"].contains("allocate"));  // a stage that did not run is absent
  for (const char* k : {"stdout", "stderr", "seconds", "usage", "backend", "signal"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
}

TEST(Model, SpecRejectsUnknownKeys) {
  auto s = SandboxSpecFromJson(json{{"template", "sandbox"}, {"limitz", json::object()}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("unknown key 'limitz'"), std::string::npos);
  EXPECT_FALSE(LimitsFromJson(json{{"cpu", 5}}).ok());
  EXPECT_FALSE(LimitsFromJson(json{{"cpu_millicores", -5}}).ok());
  EXPECT_FALSE(LimitsFromJson(json{{"cpu_millicores", "500m"}}).ok());
}

TEST(Model, SpecParsesTheAdapterCreateObject) {
  json j = json::parse(R"({"template":"sandbox","tenant":"alice","trust":"verified",
    "limits":{"cpu_millicores":500,"memory_bytes":268435456},
    "egress":{"rules":[{"kind":"http","hosts":["Pkg-Mirror.demo-tools.svc.cluster.local"],"ports":[80]}]},
    "hosts":{"pkg-mirror.demo-tools.svc.cluster.local":"127.0.0.1:8080"},
    "secrets":{"TOKEN":"s3cr3t"}})");
  auto s = SandboxSpecFromJson(j);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->limits.cpu_millicores, 500);
  EXPECT_EQ(s->trust, Trust::kVerified);
  ASSERT_EQ(s->egress.rules.size(), 1u);
  EXPECT_EQ(s->egress.rules[0].hosts[0], "pkg-mirror.demo-tools.svc.cluster.local");  // lower-cased
  EXPECT_EQ(s->secrets.at("TOKEN"), "s3cr3t");
}

TEST(Model, EgressRulesRejectIpLiteralsWildcardsAndBadPorts) {
  for (const char* host : {"203.0.113.7", "*.example.com", "", "a..b", "-a.com", "a b"}) {
    json j = {{"rules", {{{"kind", "http"}, {"hosts", {host}}, {"ports", {80}}}}}};
    EXPECT_FALSE(EgressFromJson(j).ok()) << host;
  }
  EXPECT_FALSE(EgressFromJson(json{{"rules", {{{"kind", "ftp"}, {"hosts", {"a.com"}}, {"ports", {21}}}}}}).ok());
  EXPECT_FALSE(EgressFromJson(json{{"rules", {{{"kind", "http"}, {"hosts", {"a.com"}}, {"ports", {0}}}}}}).ok());
}

TEST(Model, AllowAndHostFlags) {
  auto r = ParseAllowFlag("http://pkg-mirror.demo-tools.svc.cluster.local:80");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, "http");
  EXPECT_EQ(r->ports[0], 80);
  auto t = ParseAllowFlag("tls://pypi.org");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->ports[0], 443);
  EXPECT_FALSE(ParseAllowFlag("ftp://x.com").ok());
  EXPECT_FALSE(ParseAllowFlag("http://10.0.0.1:80").ok());
  EXPECT_FALSE(ParseAllowFlag("http://x.com:99999").ok());
  std::string n, a;
  EXPECT_TRUE(ParseHostFlag("Mirror.local=127.0.0.1:8080", &n, &a).ok());
  EXPECT_EQ(n, "mirror.local");
  EXPECT_EQ(a, "127.0.0.1:8080");
  EXPECT_FALSE(ParseHostFlag("mirror", &n, &a).ok());
  EXPECT_FALSE(ParseHostFlag("m=127.0.0.1", &n, &a).ok());
}

TEST(Model, ExecSpec) {
  auto e = ExecSpecFromJson(json{{"sandbox", "sb1"}, {"cmd", "ls"}, {"timeout_s", 5}});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->command, "ls");
  EXPECT_DOUBLE_EQ(e->timeout_s, 5);
  EXPECT_FALSE(ExecSpecFromJson(json{{"sandbox", "sb1"}}).ok());
  EXPECT_FALSE(ExecSpecFromJson(json{{"cmd", "ls"}, {"timeout_s", -1}}).ok());
  EXPECT_FALSE(ExecSpecFromJson(json{{"cmd", "ls"}, {"bogus", 1}}).ok());
  EXPECT_EQ(ParseTrust("nope").status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace sbx
