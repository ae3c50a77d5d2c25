// Judging the sandbox's kernel and namespaces from the probe's facts (kernel_evidence.h), with
// the facts real sandboxes show on this machine kind: a container (the host's boot_id), gVisor
// (no boot_id, /proc/version "Linux version 4.4.0 ..."), a microVM guest (its own boot_id).
#include "checks/kernel_evidence.h"

#include <gtest/gtest.h>

namespace sandcheck {
namespace {

using nlohmann::json;

const json kHost = {{"boot_id", "d528fbfc-3976-41d5-9bf0-b87efa4cb9e3"},
                    {"btime", 1796537355},
                    {"version", "Linux version 6.18.44-fc-v1272 (builder@sandboxing) #1 SMP"}};

TEST(KernelEvidence, AContainerSharesTheHostsKernel) {
  KernelFinding f = JudgeKernel(kHost, kHost);
  EXPECT_EQ(f.seen, KernelSeen::kHost);
  EXPECT_NE(f.evidence.find("boot_id d528fbfc"), std::string::npos) << f.evidence;
}

TEST(KernelEvidence, GvisorShowsNoBootIdAndAnotherVersion) {
  json gvisor = {{"boot_id", nullptr},
                 {"btime", 1796537694},
                 {"version", "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016"}};
  KernelFinding f = JudgeKernel(gvisor, kHost);
  EXPECT_EQ(f.seen, KernelSeen::kOwn);
  EXPECT_NE(f.evidence.find("4.4.0"), std::string::npos) << f.evidence;
}

TEST(KernelEvidence, AVmGuestHasABootIdOfItsOwn) {
  json guest = {{"boot_id", "0b1c2d3e-0000-4000-8000-000000000001"},
                {"btime", 1796530000},
                {"version", "Linux version 6.1.0-28-cloud-amd64 (debian-kernel@lists.debian.org)"}};
  KernelFinding f = JudgeKernel(guest, kHost);
  EXPECT_EQ(f.seen, KernelSeen::kOwn);
  EXPECT_NE(f.evidence.find("boot_id 0b1c2d3e"), std::string::npos) << f.evidence;
}

TEST(KernelEvidence, ABootIdMountedOverOrHiddenDoesNotMakeAnotherKernel) {
  // A container that lies about boot_id (a file mounted over it) or masks it still shows the
  // host's /proc/version and boot time.
  json lying = kHost;
  lying["boot_id"] = "ffffffff-ffff-4fff-8fff-ffffffffffff";
  lying["btime"] = 1796537356;  // /proc/stat read a second later
  EXPECT_EQ(JudgeKernel(lying, kHost).seen, KernelSeen::kHost);
  json masked = kHost;
  masked["boot_id"] = nullptr;
  KernelFinding f = JudgeKernel(masked, kHost);
  EXPECT_EQ(f.seen, KernelSeen::kHost);
  EXPECT_NE(f.evidence.find("no boot_id"), std::string::npos) << f.evidence;
}

TEST(KernelEvidence, NothingShownIsUnknownNeverAVerdict) {
  json none = {{"boot_id", nullptr}, {"btime", nullptr}, {"version", nullptr}};
  EXPECT_EQ(JudgeKernel(none, kHost).seen, KernelSeen::kUnknown);
  EXPECT_EQ(JudgeKernel(json::object(), kHost).seen, KernelSeen::kUnknown);
  EXPECT_EQ(JudgeKernel("garbage", kHost).seen, KernelSeen::kUnknown);
}

TEST(KernelEvidence, NamespacesSharedApartAndNotShown) {
  json harness = {{"pid", 4026531836}, {"mnt", 4026531832}, {"net", 4026531833},
                  {"ipc", 4026531839}, {"uts", 4026531838}};
  json sandbox = {{"pid", 4026531836}, {"mnt", 4026532100}, {"net", 4026532101},
                  {"ipc", nullptr}};
  NamespaceFinding f = JudgeNamespaces(sandbox, harness, {"pid", "mnt", "net", "ipc", "uts"});
  EXPECT_EQ(f.shared, std::vector<std::string>({"pid"}));
  EXPECT_EQ(f.apart, std::vector<std::string>({"mnt", "net"}));
  EXPECT_EQ(f.not_shown, std::vector<std::string>({"ipc", "uts"}));
}

}  // namespace
}  // namespace sandcheck
