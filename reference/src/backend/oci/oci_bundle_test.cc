// Unit tests of the OCI bundle (oci_bundle.cc): what every container is given, and the OCI
// form of the seccomp deny-list.
#include "backend/oci/oci_bundle.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <set>

#include "host/seccomp.h"

namespace sbx::backend {
namespace {

using Json = nlohmann::json;

OciBundleSpec Spec() {
  OciBundleSpec s;
  s.root_path = "/img/rootfs";
  s.mounts = {{"/work", "bind", "/b/rootfs/work", {"rbind", "rw"}}};
  s.init.args = {"/bin/sh", "-c", "sleep"};
  s.init.nofile = 77;
  s.limits = {.cpu_millicores = 500,
              .memory_bytes = 256 << 20,
              .pids = 64,
              .disk_bytes = 1 << 20,
              .fds = 77};
  return s;
}

TEST(OciBundle, ProcessIsUnprivileged) {
  OciProcess p;
  p.args = {"true"};
  p.env = {{"A", "b"}};
  Json j = OciProcessJson(p);
  EXPECT_EQ(j["user"]["uid"], 1000);
  EXPECT_EQ(j["user"]["gid"], 1000);
  EXPECT_TRUE(j["user"]["additionalGids"].empty());
  for (const char* set : {"bounding", "effective", "permitted", "inheritable", "ambient"}) {
    EXPECT_TRUE(j["capabilities"][set].empty()) << set;
  }
  EXPECT_EQ(j["noNewPrivileges"], true);
  EXPECT_EQ(j["terminal"], false);
  EXPECT_EQ(j["env"], Json::array({"A=b"}));
  bool nofile = false, core = false;
  for (const auto& r : j["rlimits"]) {
    if (r["type"] == "RLIMIT_NOFILE") nofile = r["soft"] == 1024 && r["hard"] == 1024;
    if (r["type"] == "RLIMIT_CORE") core = r["soft"] == 0 && r["hard"] == 0;
  }
  EXPECT_TRUE(nofile);
  EXPECT_TRUE(core);
}

// The in-sandbox agent (a crun/runc container's init) keeps exactly the capabilities it names,
// never in the inheritable or ambient sets (which would pass them on through exec), and a
// hard RLIMIT_NOFILE above its own soft one, so a command's limit can be set up to it.
TEST(OciBundle, AgentKeepsOnlyTheCapabilitiesItNames) {
  OciProcess p;
  p.args = {"/dev/.sbx-init", "--agent"};
  p.uid = p.gid = 0;
  p.capabilities = {"CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"};
  p.nofile = 256;
  p.nofile_hard = 20000;
  Json j = OciProcessJson(p);
  for (const char* set : {"bounding", "effective", "permitted"}) {
    EXPECT_EQ(j["capabilities"][set], Json::array({"CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"}))
        << set;
  }
  EXPECT_TRUE(j["capabilities"]["inheritable"].empty());
  EXPECT_TRUE(j["capabilities"]["ambient"].empty());
  EXPECT_EQ(j["noNewPrivileges"], true);
  EXPECT_EQ(j["rlimits"][0]["soft"], 256);
  EXPECT_EQ(j["rlimits"][0]["hard"], 20000);
}

TEST(OciBundle, ConfigHasReadOnlyRootLimitsAndNamespaces) {
  Json j = OciConfig(Spec());
  EXPECT_EQ(j["root"]["path"], "/img/rootfs");
  EXPECT_EQ(j["root"]["readonly"], true);
  EXPECT_EQ(j["process"]["rlimits"][0]["soft"], 77);
  const Json& res = j["linux"]["resources"];
  EXPECT_EQ(res["cpu"]["quota"], 50000);
  EXPECT_EQ(res["cpu"]["period"], 100000);
  EXPECT_EQ(res["memory"]["limit"], 256 << 20);
  EXPECT_EQ(res["memory"]["swap"], 256 << 20) << "swap capped at the limit";
  EXPECT_EQ(res["pids"]["limit"], 64);
  std::set<std::string> ns;
  for (const auto& n : j["linux"]["namespaces"]) {
    ns.insert(n["type"]);
    if (n["type"] == "network") {
      EXPECT_FALSE(n.contains("path")) << "a new, empty netns";
    }
  }
  EXPECT_EQ(ns, (std::set<std::string>{"pid", "mount", "ipc", "uts", "network", "cgroup"}));
  EXPECT_FALSE(j["linux"].contains("cgroupsPath"));
  EXPECT_FALSE(j["linux"].contains("seccomp"));
  bool work = false, proc = false;
  for (const auto& m : j["mounts"]) {
    work = work || m["destination"] == "/work";
    proc = proc || (m["destination"] == "/proc" && m["type"] == "proc");
  }
  EXPECT_TRUE(work);
  EXPECT_TRUE(proc);
}

TEST(OciBundle, EgressNamespaceIsJoinedByPath) {
  OciBundleSpec s = Spec();
  s.netns_path = "/proc/1/fd/9";
  s.cgroup_namespace = false;
  s.cgroups_path = "c1";
  s.resources = false;
  Json j = OciConfig(s);
  int networks = 0;
  for (const auto& n : j["linux"]["namespaces"]) {
    EXPECT_NE(n["type"], "cgroup");
    if (n["type"] == "network") {
      ++networks;
      EXPECT_EQ(n["path"], "/proc/1/fd/9");
    }
  }
  EXPECT_EQ(networks, 1);
  EXPECT_EQ(j["linux"]["cgroupsPath"], "c1");
  EXPECT_FALSE(j["linux"].contains("resources"));
}

TEST(OciSeccomp, EveryEntryOfTheDenyListIsTranslated) {
  auto filter = host::SeccompFilter::Compile();
  ASSERT_TRUE(filter.ok()) << filter.status().ToString();
  auto j = OciSeccompFromDenyList(filter->denied());
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ((*j)["defaultAction"], "SCMP_ACT_ALLOW");
  EXPECT_EQ((*j)["architectures"], Json::array({"SCMP_ARCH_X86_64"}));
  std::set<std::string> names;
  int clone_rules = 0, personality_rules = 0, ioctl_rules = 0;
  for (const auto& r : (*j)["syscalls"]) {
    std::string name = r["names"][0];
    names.insert(name);
    EXPECT_EQ(r["action"], "SCMP_ACT_ERRNO");
    if (name == "clone") {
      ++clone_rules;
      EXPECT_EQ(r["args"][0]["op"], "SCMP_CMP_MASKED_EQ");
      EXPECT_EQ(r["args"][0]["value"], r["args"][0]["valueTwo"]);
    }
    if (name == "clone3") {
      EXPECT_EQ(r["errnoRet"], ENOSYS);
    }
    if (name == "personality") ++personality_rules;
    if (name == "ioctl") ++ioctl_rules;
    if (name == "mount") {
      EXPECT_EQ(r["errnoRet"], EPERM);
    }
  }
  for (const std::string& d : filter->denied()) {
    std::string base = d.substr(0, d.find('('));
    EXPECT_TRUE(names.count(base)) << d;
  }
  EXPECT_EQ(clone_rules, 7);
  EXPECT_EQ(personality_rules, 1 + 31 + 1);
  EXPECT_EQ(ioctl_rules, 2);
}

TEST(OciSeccomp, AnEntryWithoutATranslationIsAnError) {
  EXPECT_EQ(OciSeccompFromDenyList({"mount", "prctl(PR_SET_MM)"}).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(OciSeccompFromDenyList({"clone(CLONE_NEWTIME)"}).status().code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(OciSeccompFromDenyList({"mount"}).ok());
}

}  // namespace
}  // namespace sbx::backend
