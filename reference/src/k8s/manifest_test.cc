// The Kubernetes manifests of a sandbox (BK-6): every isolation field is there, limits map to
// resources, the trust class to the RuntimeClass, the egress policy to a NetworkPolicy that
// reaches the gateway only; secrets never appear. (Their shape is checked against the
// published API types by tests/e2e/test_kubernetes_manifests.py.)
#include "k8s/manifest.h"

#include <gtest/gtest.h>

namespace sbx::k8s {
namespace {

using nlohmann::json;

SandboxSpec Spec() {
  SandboxSpec s;
  s.tenant = "alice";
  s.trust = Trust::kUntrusted;
  s.limits.cpu_millicores = 500;
  s.limits.memory_bytes = 256LL << 20;
  s.limits.disk_bytes = 32LL << 20;
  s.env = {{"LANG", "C"}};
  s.secrets = {{"TOKEN", "s-very-secret-value"}};
  s.egress.rules.push_back({"http", {"pkg-mirror.demo-tools.svc.cluster.local"}, {80, 8080}});
  return s;
}

ManifestOptions Options() {
  ManifestOptions o;
  o.runtime_id = "1234-abcdef";
  return o;
}

TEST(KubernetesManifest, PodHoldsEveryIsolationField) {
  auto pod = PodManifest("sb0a1b2c3d", Spec(), {Trust::kUntrusted, false}, Options());
  ASSERT_TRUE(pod.ok()) << pod.status().ToString();
  const json& spec = (*pod)["spec"];
  EXPECT_EQ((*pod)["metadata"]["name"], "sbx-sb0a1b2c3d");
  EXPECT_EQ((*pod)["metadata"]["labels"]["sandcheck.io/runtime"], "1234-abcdef");
  EXPECT_EQ(spec["runtimeClassName"], "gvisor");
  EXPECT_EQ(spec["automountServiceAccountToken"], false);
  EXPECT_EQ(spec["enableServiceLinks"], false);
  EXPECT_EQ(spec["hostNetwork"], false);
  EXPECT_EQ(spec["dnsPolicy"], "None");
  EXPECT_EQ(spec["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
  EXPECT_EQ(spec["securityContext"]["runAsNonRoot"], true);
  const json& c = spec["containers"][0];
  EXPECT_EQ(c["securityContext"]["allowPrivilegeEscalation"], false);
  EXPECT_EQ(c["securityContext"]["readOnlyRootFilesystem"], true);
  EXPECT_EQ(c["securityContext"]["capabilities"]["drop"], json::array({"ALL"}));
  EXPECT_GT(c["securityContext"]["runAsUser"].get<int64_t>(), 0);
  EXPECT_EQ(c["resources"]["limits"]["cpu"], "500m");
  EXPECT_EQ(c["resources"]["limits"]["memory"], "256Mi");
  EXPECT_EQ(c["resources"]["limits"]["ephemeral-storage"], "32Mi");
  EXPECT_EQ(c["resources"]["requests"], c["resources"]["limits"]);
  EXPECT_EQ(c["workingDir"], "/work");
  EXPECT_EQ(c["env"], json::array({{{"name", "LANG"}, {"value", "C"}}}));
  for (const json& v : spec["volumes"]) EXPECT_EQ(v["emptyDir"]["sizeLimit"], "32Mi");
  // LC-4: a secret lives in memory only, never in a Pod spec.
  EXPECT_EQ(pod->dump().find("s-very-secret-value"), std::string::npos);
  EXPECT_EQ(pod->dump().find("TOKEN"), std::string::npos);
}

TEST(KubernetesManifest, TrustPicksTheRuntimeClassNeverWeaker) {
  ManifestOptions o = Options();
  EXPECT_EQ(RuntimeClassFor({Trust::kFirstParty, false}, o), "");
  EXPECT_EQ(RuntimeClassFor({Trust::kVerified, false}, o), "");
  EXPECT_EQ(RuntimeClassFor({Trust::kUntrusted, false}, o), "gvisor");
  EXPECT_EQ(RuntimeClassFor({Trust::kUnverified, false}, o), "gvisor");
  EXPECT_EQ(RuntimeClassFor({Trust::kFirstParty, true}, o), "kata");
  EXPECT_EQ(RuntimeClassFor({Trust::kUntrusted, true}, o), "kata");
  auto pod = PodManifest("sb1", Spec(), {Trust::kFirstParty, false}, o);
  ASSERT_TRUE(pod.ok());
  EXPECT_FALSE((*pod)["spec"].contains("runtimeClassName"));
}

TEST(KubernetesManifest, DefaultsAndOddSizes) {
  SandboxSpec s = Spec();
  s.limits = {};
  auto pod = PodManifest("sb1", s, {}, Options());
  ASSERT_TRUE(pod.ok());
  const json& limits = (*pod)["spec"]["containers"][0]["resources"]["limits"];
  EXPECT_FALSE(limits.contains("cpu"));  // 0 = no cap (RES-1's default)
  EXPECT_EQ(limits["memory"], "512Mi");
  EXPECT_EQ(limits["ephemeral-storage"], "256Mi");
  s.limits.memory_bytes = 1000000;
  pod = PodManifest("sb1", s, {}, Options());
  ASSERT_TRUE(pod.ok());
  EXPECT_EQ((*pod)["spec"]["containers"][0]["resources"]["limits"]["memory"], "1000000");
}

TEST(KubernetesManifest, NetworkPolicyReachesTheGatewayOnly) {
  auto np = NetworkPolicyManifest("sb1", Spec(), Options());
  ASSERT_TRUE(np.ok()) << np.status().ToString();
  const json& spec = (*np)["spec"];
  EXPECT_EQ(spec["podSelector"]["matchLabels"]["sandcheck.io/sandbox"], "sb1");
  EXPECT_EQ(spec["policyTypes"], json::array({"Ingress", "Egress"}));
  EXPECT_EQ(spec["ingress"], json::array());
  ASSERT_EQ(spec["egress"].size(), 2u);
  for (const json& rule : spec["egress"]) {
    ASSERT_EQ(rule["to"].size(), 1u);
    EXPECT_EQ(rule["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
              "sandcheck-egress-gateway");
    EXPECT_FALSE(rule["to"][0].contains("ipBlock"));
  }
  EXPECT_EQ(spec["egress"][0]["ports"],
            json::parse(R"([{"protocol":"TCP","port":80},{"protocol":"TCP","port":8080}])"));
  // SNAP-5: no rule, no egress at all.
  SandboxSpec closed = Spec();
  closed.egress.rules.clear();
  auto none = NetworkPolicyManifest("sb1", closed, Options());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)["spec"]["egress"], json::array());
}

TEST(KubernetesManifest, BadInputIsRefusedWithItsName) {
  SandboxSpec s = Spec();
  EXPECT_EQ(PodManifest("Sb1", s, {}, Options()).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(PodManifest("", s, {}, Options()).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(PodManifest(std::string(60, 'a'), s, {}, Options()).status().code(),
            Code::kInvalidArgument);
  s.template_name = "nope";
  auto t = PodManifest("sb1", s, {}, Options());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("template 'nope'"), std::string::npos);
  s = Spec();
  s.tenant = "-bad-";
  EXPECT_EQ(PodManifest("sb1", s, {}, Options()).status().code(), Code::kInvalidArgument);
  ManifestOptions root = Options();
  root.run_as = 0;
  EXPECT_EQ(PodManifest("sb1", Spec(), {}, root).status().code(), Code::kInvalidArgument);
}

TEST(KubernetesManifest, AListOfPolicyThenPod) {
  auto list = SandboxManifests("sb1", Spec(), {Trust::kUntrusted, false}, Options());
  ASSERT_TRUE(list.ok());
  EXPECT_EQ((*list)["kind"], "List");
  ASSERT_EQ((*list)["items"].size(), 2u);
  EXPECT_EQ((*list)["items"][0]["kind"], "NetworkPolicy");  // in force before the Pod runs
  EXPECT_EQ((*list)["items"][1]["kind"], "Pod");
}

}  // namespace
}  // namespace sbx::k8s
