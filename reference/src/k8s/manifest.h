// Kubernetes manifests of a sandbox (BK-6, issue 14; docs/kubernetes.md): the Pod and the
// NetworkPolicy a kubernetes backend creates for one sandbox, from the same SandboxSpec every
// backend gets. Pure functions: no API server is needed to make them (none can run on this
// machine; the manifests are checked against the published API types offline, see the doc).
//
// What each field enforces:
//   Pod.spec.runtimeClassName          the trust class's isolation (SEL-3/SEL-6): gvisor for
//                                       untrusted and unverified code, the options' class for
//                                       a tenant floored to microvm (kata), else the cluster's
//                                       default runtime (a container: oci's level)
//   resources.limits + requests         cpu (RES-1), memory (RES-2), ephemeral-storage (RES-3)
//   emptyDir sizeLimit                  /work and /tmp, the writable places (FS-2, RES-3)
//   securityContext                     non-root, no privilege escalation, every capability
//                                       dropped, read-only root, seccomp RuntimeDefault (FS-1)
//   automountServiceAccountToken false  no API credential inside (EGR-5's spirit: the cluster
//   enableServiceLinks false            API is not even named in the environment)
//   dnsPolicy None + the gateway        names resolve at the egress gateway only (EGR-2)
//   NetworkPolicy                       egress to the gateway only, on the policy's ports and
//                                       DNS; no egress at all for an empty policy (SNAP-5);
//                                       no ingress
//   labels sandcheck.io/*               the reaper lists a runtime's objects by them
// Not expressible per Pod, hence not in the manifest: pids (RES-4: the kubelet's podPidsLimit),
// file descriptors (RES-6: the node's), secrets (LC-4: memory only, handed to each command
// over the exec stream, never stored in a Pod spec).
//
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "sbx/model.h"
#include "sbx/status.h"

namespace sbx::k8s {

struct ManifestOptions {
  std::string namespace_name = "sandcheck";
  std::string runtime_id;  // this runtime: the label the reaper lists by
  // template name -> image reference; a template not listed is refused.
  std::map<std::string, std::string> images = {{"sandbox", "docker.io/library/busybox:1.36"}};
  // RuntimeClass names: untrusted/unverified code, and a tenant floored to microvm.
  std::string gvisor_class = "gvisor";
  std::string microvm_class = "kata";
  // The egress gateway's pods (their namespace and labels) and its cluster IP for DNS.
  std::string gateway_namespace = "sandcheck-system";
  std::map<std::string, std::string> gateway_labels = {
      {"app.kubernetes.io/name", "sandcheck-egress-gateway"}};
  std::string gateway_dns_ip = "10.96.0.53";
  // The uid/gid the tools run as (never 0).
  int64_t run_as = 65534;
};

// The isolation a sandbox asks for: its trust class, and whether its tenant's floor is microvm.
struct Placement {
  Trust trust = Trust::kUnverified;
  bool microvm_floor = false;
};

// "sbx-<id>": a DNS-1123 label (ids are [a-z0-9]); kInvalidArgument for an id that is not.
StatusOr<std::string> ObjectName(const std::string& sandbox_id);

// The RuntimeClass for `placement`, "" for the cluster's default.
std::string RuntimeClassFor(const Placement& placement, const ManifestOptions& options);

// The Pod of sandbox `sandbox_id`. kInvalidArgument for an unknown template, a bad id, or a
// limit Kubernetes cannot express.
StatusOr<nlohmann::json> PodManifest(const std::string& sandbox_id, const SandboxSpec& spec,
                                     const Placement& placement, const ManifestOptions& options);

// Its NetworkPolicy: egress to the gateway on the policy's ports and DNS, nothing else.
StatusOr<nlohmann::json> NetworkPolicyManifest(const std::string& sandbox_id,
                                               const SandboxSpec& spec,
                                               const ManifestOptions& options);

// Both, as a v1 List (what `kubectl apply -f` takes; `sandboxctl manifest kubernetes`).
StatusOr<nlohmann::json> SandboxManifests(const std::string& sandbox_id, const SandboxSpec& spec,
                                          const Placement& placement,
                                          const ManifestOptions& options);

}  // namespace sbx::k8s
