// Unit tests of cgroup discovery and arithmetic on sample texts (no kernel objects):
// /proc/self/cgroup + /proc/self/mountinfo of this machine (v1 hybrid, cpu and cpuacct apart,
// memory in its own sub-cgroup), a systemd hybrid host (cpu,cpuacct co-mounted), pure v2, and
// containers; the RES-1 quota arithmetic; parsing of cgroupfs files.
#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "host/cgroup_internal.h"

namespace sbx::host::cgroup_internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// This machine: v1 hybrid, every controller in its own hierarchy; our memory cgroup is not the
// root while all the others are.
constexpr char kThisHostCgroup[] =
    "9:name=systemd:/\n"
    "8:pids:/\n"
    "7:blkio:/\n"
    "6:freezer:/\n"
    "5:devices:/\n"
    "4:memory:/process_api/180987f49f2d3850180d1e4e240034e7\n"
    "3:cpuset:/\n"
    "2:cpuacct:/\n"
    "1:cpu:/\n"
    "0::/\n";
constexpr char kThisHostMountinfo[] =
    "22 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
    "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
    "37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n"
    "38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio\n"
    "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

// A systemd hybrid host (Debian 10 style): cpu,cpuacct co-mounted, optional fields present.
constexpr char kSystemdHybridCgroup[] =
    "12:pids:/user.slice/user-0.slice/session-3.scope\n"
    "11:memory:/user.slice/user-0.slice/session-3.scope\n"
    "10:freezer:/\n"
    "4:cpu,cpuacct:/user.slice\n"
    "3:net_cls,net_prio:/\n"
    "1:name=systemd:/user.slice/user-0.slice/session-3.scope\n"
    "0::/user.slice/user-0.slice/session-3.scope\n";
constexpr char kSystemdHybridMountinfo[] =
    "25 0 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro\n"
    "26 25 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:4 - tmpfs tmpfs ro,mode=755\n"
    "27 26 0:24 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:5 - cgroup2 "
    "cgroup2 rw,nsdelegate\n"
    "28 26 0:25 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:6 - cgroup "
    "cgroup rw,xattr,name=systemd\n"
    "31 26 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:9 - cgroup "
    "cgroup rw,cpu,cpuacct\n"
    "32 26 0:29 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:10 - "
    "cgroup cgroup rw,net_cls,net_prio\n"
    "33 26 0:30 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:11 - cgroup "
    "cgroup rw,freezer\n"
    "34 26 0:31 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:12 - cgroup "
    "cgroup rw,memory\n"
    "35 26 0:32 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:13 - cgroup "
    "cgroup rw,pids\n";

// Pure v2 (Debian 12 with systemd).
constexpr char kPureV2Cgroup[] = "0::/user.slice/user-1000.slice/session-2.scope\n";
constexpr char kPureV2Mountinfo[] =
    "21 26 0:20 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "25 21 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";

const Hierarchy* Find(const CgroupLayout& l, std::string_view controller) {
  int i = l.IndexOf(controller);
  return i < 0 ? nullptr : &l.hierarchies[static_cast<size_t>(i)];
}

TEST(CgroupParseTest, ProcSelfCgroupThisHost) {
  auto e = ParseProcCgroup(kThisHostCgroup);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_EQ(e->size(), 10u);
  EXPECT_EQ((*e)[0].hierarchy_id, 9);
  EXPECT_THAT((*e)[0].controllers, ElementsAre("name=systemd"));
  EXPECT_EQ((*e)[5].path, "/process_api/180987f49f2d3850180d1e4e240034e7");
  EXPECT_EQ((*e)[9].hierarchy_id, 0);
  EXPECT_TRUE((*e)[9].controllers.empty());
  EXPECT_EQ((*e)[9].path, "/");
}

TEST(CgroupParseTest, ProcSelfCgroupCoMountedAndColonInPath) {
  auto e = ParseProcCgroup("4:cpu,cpuacct:/a:b/c\n");
  ASSERT_TRUE(e.ok());
  EXPECT_THAT((*e)[0].controllers, ElementsAre("cpu", "cpuacct"));
  EXPECT_EQ((*e)[0].path, "/a:b/c");
}

TEST(CgroupParseTest, ProcSelfCgroupMalformed) {
  EXPECT_EQ(ParseProcCgroup("garbage\n").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ParseProcCgroup("x:cpu:/\n").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ParseProcCgroup("1:cpu:relative\n").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ParseProcCgroup("-1:cpu:/\n").status().code(), Code::kInvalidArgument);
}

TEST(CgroupParseTest, MountinfoKeepsOnlyCgroupMounts) {
  auto m = ParseCgroupMounts(kSystemdHybridMountinfo);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 7u);
  EXPECT_TRUE((*m)[0].v2);
  EXPECT_EQ((*m)[0].mount_point, "/sys/fs/cgroup/unified");
  EXPECT_THAT((*m)[1].controllers, ElementsAre("xattr", "name=systemd"));
  EXPECT_EQ((*m)[2].mount_point, "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_THAT((*m)[2].controllers, ElementsAre("cpu", "cpuacct"));
}

TEST(CgroupParseTest, MountinfoUnescapesAndRejectsMalformed) {
  auto m = ParseCgroupMounts(
      "40 31 0:32 /my\\040root /mnt/my\\040cgroups\\134x rw - cgroup cgroup rw,memory\n");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)[0].root, "/my root");
  EXPECT_EQ((*m)[0].mount_point, "/mnt/my cgroups\\x");
  EXPECT_EQ(ParseCgroupMounts("40 31 0:32 / /x rw cgroup cgroup rw\n").status().code(),
            Code::kInvalidArgument);  // no "-" separator
}

TEST(CgroupLayoutTest, ThisHostIsV1WithSeparateCpuAndCpuacct) {
  auto l = ResolveLayout(kThisHostCgroup, kThisHostMountinfo, CgroupOptions{});
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->version, CgroupVersion::kV1);
  ASSERT_EQ(l->hierarchies.size(), 5u);  // cpu, cpuacct, memory, pids, freezer; no cpuset etc.
  EXPECT_EQ(Find(*l, "cpu")->own_dir, "/sys/fs/cgroup/cpu");
  EXPECT_EQ(Find(*l, "cpuacct")->own_dir, "/sys/fs/cgroup/cpuacct");
  EXPECT_NE(Find(*l, "cpu"), Find(*l, "cpuacct"));
  EXPECT_EQ(Find(*l, "memory")->own_dir,
            "/sys/fs/cgroup/memory/process_api/180987f49f2d3850180d1e4e240034e7");
  EXPECT_EQ(Find(*l, "pids")->own_dir, "/sys/fs/cgroup/pids");
  EXPECT_EQ(Find(*l, "freezer")->own_dir, "/sys/fs/cgroup/freezer");
  EXPECT_EQ(Find(*l, "cpuset"), nullptr);
  EXPECT_EQ(Find(*l, "devices"), nullptr);
}

TEST(CgroupLayoutTest, AdoptsAnotherProcesssRecordedOwnCgroups) {
  // The reaper (FAIL-6): a dead runtime's memory cgroup was another /process_api/<id>.
  auto l = ResolveLayout(kThisHostCgroup, kThisHostMountinfo, CgroupOptions{});
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ASSERT_TRUE(AdoptOwnDirs({"/sys/fs/cgroup/memory/process_api/other", "/sys/fs/cgroup/pids/x"}, &*l).ok());
  EXPECT_EQ(Find(*l, "memory")->own_dir, "/sys/fs/cgroup/memory/process_api/other");
  EXPECT_EQ(Find(*l, "pids")->own_dir, "/sys/fs/cgroup/pids/x");
  EXPECT_EQ(Find(*l, "cpu")->own_dir, "/sys/fs/cgroup/cpu");  // not recorded: unchanged
  for (const char* bad : {"/sys/fs/cgroup/memory/../../../etc", "sys/fs/cgroup/memory/a",
                          "/sys/fs/cgroup/memory//a", "/etc/passwd", "/sys/fs/cgroup/memoryX/a",
                          "/sys/fs/cgroup/memory/./a", ""}) {
    EXPECT_EQ(AdoptOwnDirs({bad}, &*l).code(), Code::kInvalidArgument) << bad;
  }
}

TEST(CgroupLayoutTest, SystemdHybridCoMountedCpuCpuacctIsOneHierarchy) {
  auto l = ResolveLayout(kSystemdHybridCgroup, kSystemdHybridMountinfo, CgroupOptions{});
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->version, CgroupVersion::kV1);
  ASSERT_EQ(l->hierarchies.size(), 4u);
  ASSERT_NE(Find(*l, "cpu"), nullptr);
  EXPECT_EQ(Find(*l, "cpu"), Find(*l, "cpuacct"));
  EXPECT_THAT(Find(*l, "cpu")->controllers, ElementsAre("cpu", "cpuacct"));
  EXPECT_EQ(Find(*l, "cpu")->own_dir, "/sys/fs/cgroup/cpu,cpuacct/user.slice");
  EXPECT_EQ(Find(*l, "memory")->own_dir,
            "/sys/fs/cgroup/memory/user.slice/user-0.slice/session-3.scope");
  EXPECT_EQ(Find(*l, "freezer")->own_dir, "/sys/fs/cgroup/freezer");
}

TEST(CgroupLayoutTest, ForcedV2OnHybridUsesTheUnifiedMount) {
  CgroupOptions o;
  o.mode = CgroupOptions::Mode::kV2;
  auto l = ResolveLayout(kSystemdHybridCgroup, kSystemdHybridMountinfo, o);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->version, CgroupVersion::kV2);
  ASSERT_EQ(l->hierarchies.size(), 1u);
  EXPECT_EQ(l->hierarchies[0].own_dir,
            "/sys/fs/cgroup/unified/user.slice/user-0.slice/session-3.scope");
  EXPECT_EQ(l->IndexOf("memory"), 0);  // v2: one directory for every controller
}

TEST(CgroupLayoutTest, PureV2) {
  auto l = ResolveLayout(kPureV2Cgroup, kPureV2Mountinfo, CgroupOptions{});
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->version, CgroupVersion::kV2);
  ASSERT_EQ(l->hierarchies.size(), 1u);
  EXPECT_EQ(l->hierarchies[0].mount_point, "/sys/fs/cgroup");
  EXPECT_EQ(l->hierarchies[0].own_dir, "/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope");
  CgroupOptions v1;
  v1.mode = CgroupOptions::Mode::kV1;
  auto forced = ResolveLayout(kPureV2Cgroup, kPureV2Mountinfo, v1);
  EXPECT_EQ(forced.status().code(), Code::kUnsupported);
  EXPECT_THAT(forced.status().message(), HasSubstr("memory"));
}

TEST(CgroupLayoutTest, V2ContainerWithCgroupNamespace) {
  auto l = ResolveLayout("0::/\n", "1 0 0:5 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n", {});
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->hierarchies[0].own_dir, "/sys/fs/cgroup");
}

TEST(CgroupLayoutTest, V1ContainerWithoutCgroupNamespaceMountsItsOwnSubtree) {
  // Docker without cgroupns: the mount shows only /docker/<id>, and that is where we are.
  std::string cg, mi;
  int id = 1;
  for (const char* c : {"cpu,cpuacct", "memory", "pids", "freezer"}) {
    cg += fmt::format("{}:{}:/docker/abc/sub\n", id, c);
    mi += fmt::format("{} 1 0:{} /docker/abc /sys/fs/cgroup/{} rw - cgroup cgroup rw,{}\n",
                      100 + id, 40 + id, c, c);
    ++id;
  }
  auto l = ResolveLayout(cg, mi, {});
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(Find(*l, "memory")->own_dir, "/sys/fs/cgroup/memory/sub");
  EXPECT_EQ(Find(*l, "cpuacct")->own_dir, "/sys/fs/cgroup/cpu,cpuacct/sub");
}

TEST(CgroupLayoutTest, OwnCgroupOutsideTheMountIsUnsupported) {
  // The mount shows /docker/abc but we are in /docker/other: not visible, do not guess.
  auto l = ResolveLayout("0::/docker/other\n",
                         "1 0 0:5 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", {});
  EXPECT_EQ(l.status().code(), Code::kUnsupported);
  // A prefix that is not a path component does not count either.
  l = ResolveLayout("0::/docker/abcdef\n",
                    "1 0 0:5 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", {});
  EXPECT_EQ(l.status().code(), Code::kUnsupported);
  // Outside our cgroup namespace.
  l = ResolveLayout("0::/../../system.slice\n",
                    "1 0 0:5 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", {});
  EXPECT_EQ(l.status().code(), Code::kUnsupported);
  EXPECT_THAT(l.status().message(), HasSubstr("namespace"));
}

TEST(CgroupLayoutTest, MissingV1ControllerFallsToV2OrFailsLoudly) {
  // This host without the pids hierarchy.
  std::string cg = kThisHostCgroup, mi = kThisHostMountinfo;
  cg.erase(cg.find("8:pids:/\n"), 9);
  mi.erase(mi.find("39 31"), mi.find("40 31") - mi.find("39 31"));
  CgroupOptions v1;
  v1.mode = CgroupOptions::Mode::kV1;
  auto l = ResolveLayout(cg, mi, v1);
  EXPECT_EQ(l.status().code(), Code::kUnsupported);
  EXPECT_THAT(l.status().message(), HasSubstr("pids"));
  v1.require_controllers = false;
  l = ResolveLayout(cg, mi, v1);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->hierarchies.size(), 4u);
  EXPECT_EQ(Find(*l, "pids"), nullptr);
  // kAuto: v1 is incomplete, so the unified hierarchy is tried (Open then checks delegation).
  l = ResolveLayout(cg, mi, {});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->version, CgroupVersion::kV2);
  // Nothing at all.
  EXPECT_EQ(ResolveLayout("", "", {}).status().code(), Code::kUnsupported);
}

TEST(CgroupQuotaTest, MillicoresToCfsQuota) {  // RES-1
  auto q = CpuQuotaFor(500);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->quota_us, 50000);
  EXPECT_EQ(q->period_us, 100000);
  EXPECT_EQ(CpuQuotaFor(1000)->quota_us, 100000);
  EXPECT_EQ(CpuQuotaFor(250)->quota_us, 25000);
  EXPECT_EQ(CpuQuotaFor(2500)->quota_us, 250000);
  EXPECT_EQ(CpuQuotaFor(10)->quota_us, 1000);  // the kernel's minimum, still 100 ms period
  EXPECT_EQ(CpuQuotaFor(10)->period_us, 100000);
  EXPECT_EQ(CpuQuotaFor(1024000)->quota_us, 102400000);
  // Below 10 millicores: 1 s period keeps the same fraction.
  EXPECT_EQ(CpuQuotaFor(9)->quota_us, 9000);
  EXPECT_EQ(CpuQuotaFor(9)->period_us, 1000000);
  EXPECT_EQ(CpuQuotaFor(1)->quota_us, 1000);
  // 0 = no cap.
  EXPECT_EQ(CpuQuotaFor(0)->quota_us, -1);
  EXPECT_EQ(CpuQuotaFor(-1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(CpuQuotaFor(1024001).status().code(), Code::kInvalidArgument);
}

TEST(CgroupQuotaTest, QuotaOverPeriodIsTheFractionAskedFor) {
  for (int64_t m = 1; m <= 8000; m += 7) {
    auto q = CpuQuotaFor(m);
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(q->quota_us * 1000, m * q->period_us) << m;
    EXPECT_GE(q->quota_us, kCfsMinQuotaUs) << m;
    EXPECT_LE(q->period_us, kCfsMaxPeriodUs) << m;
  }
}

TEST(CgroupQuotaTest, CpuMaxValue) {
  EXPECT_EQ(CpuMaxValue(*CpuQuotaFor(500)), "50000 100000");
  EXPECT_EQ(CpuMaxValue(*CpuQuotaFor(0)), "max 100000");
}

TEST(CgroupFileTest, KeyedValues) {
  constexpr char kOomControl[] = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
  EXPECT_EQ(KeyedValue(kOomControl, "oom_kill"), 3);
  EXPECT_EQ(KeyedValue(kOomControl, "under_oom"), 0);
  constexpr char kMemoryEvents[] = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 2\noom_group_kill 1\n";
  EXPECT_EQ(KeyedValue(kMemoryEvents, "oom"), 1);  // not confused with oom_kill
  EXPECT_EQ(KeyedValue(kMemoryEvents, "oom_kill"), 2);
  constexpr char kCpuStatV1[] =
      "nr_periods 12\nnr_throttled 6\nthrottled_time 301234567\nnr_bursts 0\nburst_time 0\n";
  EXPECT_EQ(KeyedValue(kCpuStatV1, "throttled_time"), 301234567);
  constexpr char kCpuStatV2[] = "usage_usec 598000\nuser_usec 590000\nsystem_usec 8000\n";
  EXPECT_EQ(KeyedValue(kCpuStatV2, "usage_usec"), 598000);
  EXPECT_EQ(KeyedValue(kCpuStatV2, "throttled_usec"), std::nullopt);
  EXPECT_EQ(KeyedValue("populated 1\nfrozen 1\n", "frozen"), 1);
  EXPECT_EQ(KeyedValue("frozen x\n", "frozen"), std::nullopt);
}

TEST(CgroupFileTest, PidList) {
  EXPECT_THAT(ParsePidList("12\n345\n\n6\n"), ElementsAre(12, 345, 6));
  EXPECT_TRUE(ParsePidList("").empty());
}

TEST(CgroupFileTest, Names) {
  EXPECT_TRUE(ValidateName("sbx-1_a.b", "n").ok());
  EXPECT_EQ(ValidateName("", "n").code(), Code::kInvalidArgument);
  EXPECT_EQ(ValidateName("..", "n").code(), Code::kInvalidArgument);
  EXPECT_EQ(ValidateName("a/b", "n").code(), Code::kInvalidArgument);
  EXPECT_EQ(ValidateName("a b", "n").code(), Code::kInvalidArgument);
  EXPECT_EQ(ValidateName(std::string(65, 'a'), "n").code(), Code::kInvalidArgument);
}

// ReadProcsRecursive over plain directories laid out like cgroupfs: processes in a nested
// sub-cgroup must not be missed by kill-all.
TEST(CgroupFileTest, ProcsAreCollectedFromSubCgroups) {
  char tmpl[] = "/tmp/cgroup_test_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string root = tmpl;
  ASSERT_EQ(mkdir((root + "/a").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((root + "/a/b").c_str(), 0755), 0);
  auto put = [](const std::string& p, const char* s) {
    FILE* f = fopen(p.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs(s, f);
    fclose(f);
  };
  put(root + "/cgroup.procs", "1\n2\n");
  put(root + "/a/cgroup.procs", "");
  put(root + "/a/b/cgroup.procs", "77\n");
  EXPECT_THAT(ReadProcsRecursive(root), ElementsAre(1, 2, 77));
  EXPECT_THAT(SubDirs(root), ElementsAre("a"));
  for (const char* f : {"/a/b/cgroup.procs", "/a/cgroup.procs", "/cgroup.procs"}) {
    unlink((root + f).c_str());
  }
  EXPECT_TRUE(RemoveTree(root, 0.1).ok());
  EXPECT_FALSE(Exists(root));
}

}  // namespace
}  // namespace sbx::host::cgroup_internal
