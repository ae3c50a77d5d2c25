#include "k8s/manifest.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <set>

namespace sbx::k8s {
namespace {

using nlohmann::json;

constexpr int64_t kDefaultMemory = 512LL << 20;  // Limits: 0 = default (model.h)
constexpr int64_t kDefaultDisk = 256LL << 20;

// A Kubernetes quantity: "256Mi" when whole mebibytes, else bytes.
std::string BytesQuantity(int64_t bytes) {
  if (bytes % (1LL << 20) == 0) return fmt::format("{}Mi", bytes >> 20);
  return fmt::format("{}", bytes);
}

bool LabelValue(const std::string& v) {
  if (v.empty() || v.size() > 63) return false;
  if (!std::isalnum(static_cast<unsigned char>(v.front())) ||
      !std::isalnum(static_cast<unsigned char>(v.back())))
    return false;
  return std::all_of(v.begin(), v.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '-' || c == '_' || c == '.';
  });
}

StatusOr<json> Labels(const std::string& sandbox_id, const SandboxSpec& spec,
                      const ManifestOptions& o) {
  json labels = {{"app.kubernetes.io/managed-by", "sandcheck-reference"},
                 {"sandcheck.io/sandbox", sandbox_id}};
  if (!o.runtime_id.empty()) labels["sandcheck.io/runtime"] = o.runtime_id;
  labels["sandcheck.io/tenant"] = spec.tenant;
  for (const auto& [k, v] : labels.items()) {
    if (!LabelValue(v.get<std::string>()))
      return InvalidArgument(fmt::format("label {}: '{}' is not a label value", k, v.get<std::string>()));
  }
  return labels;
}

json Metadata(const std::string& name, const json& labels, const ManifestOptions& o) {
  return {{"name", name}, {"namespace", o.namespace_name}, {"labels", labels}};
}

}  // namespace

StatusOr<std::string> ObjectName(const std::string& sandbox_id) {
  // DNS-1123 label: "sbx-" + id within 63 characters of [a-z0-9-], ending alphanumeric.
  if (sandbox_id.empty() || sandbox_id.size() > 59 ||
      !std::all_of(sandbox_id.begin(), sandbox_id.end(),
                   [](unsigned char c) { return std::islower(c) || std::isdigit(c); })) {
    return InvalidArgument(fmt::format(
        "sandbox id '{}': a Kubernetes object name needs 1..59 of [a-z0-9]", sandbox_id));
  }
  return "sbx-" + sandbox_id;
}

std::string RuntimeClassFor(const Placement& p, const ManifestOptions& o) {
  if (p.microvm_floor) return o.microvm_class;
  if (p.trust == Trust::kUntrusted || p.trust == Trust::kUnverified) return o.gvisor_class;
  return "";  // the cluster's default: a container (oci's level)
}

StatusOr<json> PodManifest(const std::string& sandbox_id, const SandboxSpec& spec,
                           const Placement& placement, const ManifestOptions& o) {
  ASSIGN_OR_RETURN(std::string name, ObjectName(sandbox_id));
  auto image = o.images.find(spec.template_name);
  if (image == o.images.end()) {
    return InvalidArgument(fmt::format("template '{}' has no image for Kubernetes (known: {})",
                                       spec.template_name, fmt::join([&] {
                                         std::vector<std::string> k;
                                         for (const auto& [t, i] : o.images) k.push_back(t);
                                         return k;
                                       }(), ", ")));
  }
  if (o.run_as <= 0) return InvalidArgument("run_as: the tools never run as root");
  ASSIGN_OR_RETURN(json labels, Labels(sandbox_id, spec, o));
  const Limits& l = spec.limits;
  int64_t memory = l.memory_bytes > 0 ? l.memory_bytes : kDefaultMemory;
  int64_t disk = l.disk_bytes > 0 ? l.disk_bytes : kDefaultDisk;
  json limits = {{"memory", BytesQuantity(memory)}, {"ephemeral-storage", BytesQuantity(disk)}};
  if (l.cpu_millicores > 0) limits["cpu"] = fmt::format("{}m", l.cpu_millicores);
  json env = json::array();
  for (const auto& [k, v] : spec.env) env.push_back({{"name", k}, {"value", v}});
  json seccomp = {{"type", "RuntimeDefault"}};
  json container = {
      {"name", "sandbox"},
      {"image", image->second},
      {"imagePullPolicy", "IfNotPresent"},
      // The Pod only has to stay up: every command arrives through the exec subresource.
      {"command", json::array({"sleep", "2147483647"})},
      {"workingDir", "/work"},
      {"env", env},
      {"resources", {{"limits", limits}, {"requests", limits}}},
      {"securityContext",
       {{"allowPrivilegeEscalation", false},
        {"privileged", false},
        {"readOnlyRootFilesystem", true},
        {"runAsNonRoot", true},
        {"runAsUser", o.run_as},
        {"runAsGroup", o.run_as},
        {"capabilities", {{"drop", json::array({"ALL"})}}},
        {"seccompProfile", seccomp}}},
      {"volumeMounts",
       json::array({{{"name", "work"}, {"mountPath", "/work"}},
                    {{"name", "tmp"}, {"mountPath", "/tmp"}}})},
  };
  json spec_json = {
      {"restartPolicy", "Never"},
      {"automountServiceAccountToken", false},
      {"enableServiceLinks", false},
      {"hostNetwork", false},
      {"hostPID", false},
      {"hostIPC", false},
      {"terminationGracePeriodSeconds", 1},
      {"dnsPolicy", "None"},
      {"dnsConfig",
       {{"nameservers", json::array({o.gateway_dns_ip})},
        {"searches", json::array()},
        {"options", json::array({{{"name", "ndots"}, {"value", "1"}}})}}},
      {"securityContext",
       {{"runAsNonRoot", true},
        {"runAsUser", o.run_as},
        {"runAsGroup", o.run_as},
        {"fsGroup", o.run_as},
        {"seccompProfile", seccomp}}},
      {"containers", json::array({container})},
      {"volumes",
       json::array({{{"name", "work"}, {"emptyDir", {{"sizeLimit", BytesQuantity(disk)}}}},
                    {{"name", "tmp"}, {"emptyDir", {{"sizeLimit", BytesQuantity(disk)}}}}})},
  };
  if (std::string rc = RuntimeClassFor(placement, o); !rc.empty())
    spec_json["runtimeClassName"] = rc;
  return json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", Metadata(name, labels, o)},
              {"spec", spec_json}};
}

StatusOr<json> NetworkPolicyManifest(const std::string& sandbox_id, const SandboxSpec& spec,
                                     const ManifestOptions& o) {
  ASSIGN_OR_RETURN(std::string name, ObjectName(sandbox_id));
  ASSIGN_OR_RETURN(json labels, Labels(sandbox_id, spec, o));
  json egress = json::array();  // SNAP-5: an empty policy reaches nothing, not even DNS
  if (!spec.egress.empty()) {
    json gateway = {
        {"namespaceSelector",
         {{"matchLabels", {{"kubernetes.io/metadata.name", o.gateway_namespace}}}}},
        {"podSelector", {{"matchLabels", o.gateway_labels}}}};
    std::set<int> ports;
    for (const EgressRule& r : spec.egress.rules)
      for (int p : r.ports) ports.insert(p);
    json tcp = json::array();
    for (int p : ports) tcp.push_back({{"protocol", "TCP"}, {"port", p}});
    if (!tcp.empty()) egress.push_back({{"to", json::array({gateway})}, {"ports", tcp}});
    egress.push_back({{"to", json::array({gateway})},
                      {"ports", json::array({{{"protocol", "UDP"}, {"port", 53}},
                                             {{"protocol", "TCP"}, {"port", 53}}})}});
  }
  return json{
      {"apiVersion", "networking.k8s.io/v1"},
      {"kind", "NetworkPolicy"},
      {"metadata", Metadata(name, labels, o)},
      {"spec",
       {{"podSelector", {{"matchLabels", {{"sandcheck.io/sandbox", sandbox_id}}}}},
        {"policyTypes", json::array({"Ingress", "Egress"})},
        {"ingress", json::array()},
        {"egress", egress}}}};
}

StatusOr<json> SandboxManifests(const std::string& sandbox_id, const SandboxSpec& spec,
                                const Placement& placement, const ManifestOptions& o) {
  ASSIGN_OR_RETURN(json pod, PodManifest(sandbox_id, spec, placement, o));
  ASSIGN_OR_RETURN(json policy, NetworkPolicyManifest(sandbox_id, spec, o));
  return json{{"apiVersion", "v1"}, {"kind", "List"}, {"items", json::array({policy, pod})}};
}

}  // namespace sbx::k8s
