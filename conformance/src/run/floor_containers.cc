#include "run/floor_containers.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/process.h"
#include "common/subprocess.h"

namespace sandcheck {
namespace {

using nlohmann::json;

constexpr double kCallTimeoutS = 60;   // one runtime CLI call
constexpr double kStartTimeoutS = 60;  // a floor container printing "ready"
constexpr double kReapTimeoutS = 10;   // a killed container's processes going away
constexpr double kProbeTimeoutS = 10;  // runsc do on a platform being probed

bool WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  return static_cast<bool>(f);
}

}  // namespace

std::string MakeBundle(const std::string& dir) {
  std::string busybox;
  for (const char* b : {"/bin/busybox", "/usr/bin/busybox"})
    if (::access(b, X_OK) == 0) busybox = b;
  if (busybox.empty()) return "no busybox on this host (Debian: busybox-static)";
  std::error_code ec;
  std::filesystem::create_directories(dir + "/rootfs/bin", ec);
  for (const char* d : {"/rootfs/proc", "/rootfs/dev", "/rootfs/tmp"})
    std::filesystem::create_directories(dir + d, ec);
  std::filesystem::copy_file(busybox, dir + "/rootfs/bin/busybox", ec);
  if (ec) return "copying busybox: " + ec.message();
  for (const char* l : {"sh", "true", "sleep", "echo"})
    std::filesystem::create_symlink("busybox", dir + "/rootfs/bin/" + l, ec);
  json config = {{"ociVersion", "1.0.2"},
                 {"process",
                  {{"terminal", false},
                   {"user", {{"uid", 0}, {"gid", 0}}},
                   {"args", {"/bin/sh", "-c", "echo ready; exec sleep 1000000"}},
                   {"env", {"PATH=/bin"}},
                   {"cwd", "/"},
                   {"noNewPrivileges", true}}},
                 {"root", {{"path", "rootfs"}, {"readonly", true}}},
                 {"hostname", "sandcheck-floor"},
                 {"mounts",
                  {{{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}},
                   {{"destination", "/dev"},
                    {"type", "tmpfs"},
                    {"source", "tmpfs"},
                    {"options", {"nosuid", "mode=755", "size=64k"}}}}},
                 {"linux",
                  {{"namespaces",
                    {{{"type", "pid"}},
                     {{"type", "mount"}},
                     {{"type", "ipc"}},
                     {{"type", "uts"}},
                     {{"type", "network"}}}}}}};
  if (!WriteText(dir + "/config.json", config.dump(2))) return "writing the bundle's config";
  return "";
}

void StartContainer(FloorContainer& fc, const std::string& bundle, bool hide_unified) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    fc.error = std::string("pipe: ") + std::strerror(errno);
    return;
  }
  OwnedFd r(p[0]), w(p[1]);
  OwnedFd err(::memfd_create("sandcheck-floor-stderr", MFD_CLOEXEC));
  ProcessSpec c{fc.runtime, fc.private_view};
  for (const char* a : {"run", "--bundle"}) c.argv.push_back(a);
  c.argv.push_back(bundle);
  c.argv.push_back(fc.id);
  fc.pid = Spawn(c, w.get(), err.get(), hide_unified);
  w.Reset();
  if (fc.pid < 0) {
    fc.error = std::string("fork: ") + std::strerror(errno);
    return;
  }
  auto line = ReadLine(r.get(), kStartTimeoutS);
  if (!line.ok() || line->find("ready") == std::string::npos) {
    std::string e = ReadAll(err.get());
    fc.error = fmt::format("the floor container did not start ({}){}",
                           line.ok() ? "no ready line" : line.status().ToString(),
                           e.empty() ? "" : ": " + e);
  }
}

void StopContainer(FloorContainer& fc, bool hide_unified) {
  if (fc.pid <= 0) return;
  std::string ignored;
  for (std::vector<std::string> verb :
       {std::vector<std::string>{"kill", fc.id, "KILL"},
        std::vector<std::string>{}, /* wait for the foreground run */
        std::vector<std::string>{"delete", fc.runtime[0].ends_with("runsc") ? "-force" : "-f",
                                 fc.id}}) {
    if (verb.empty()) {
      WaitChild(fc.pid, kReapTimeoutS);
      fc.pid = -1;
      continue;
    }
    ProcessSpec c{fc.runtime, fc.private_view};
    c.argv.insert(c.argv.end(), verb.begin(), verb.end());
    TimedRun(c, hide_unified, &ignored, kCallTimeoutS);
  }
}

// A probe is bounded: kvm with a /dev/kvm that does not work (this machine kind) does not fail,
// runsc waits for a sandbox that never comes up. What a failed probe left running is killed
// before the next.
std::string RunscPlatform(const std::string& runsc, const std::string& work, std::string* why) {
  std::vector<std::string> order = {"systrap", "kvm", "ptrace"};
  if (const char* env = std::getenv("SBX_GVISOR_PLATFORM"); env && *env)
    order.insert(order.begin(), env);
  for (const std::string& platform : order) {
    std::string root = work + "/probe-" + platform;
    ProcessSpec c{
        {runsc, "--root", root, "--platform=" + platform, "--network=none", "do", "/bin/true"}};
    std::string w;
    if (TimedRun(c, false, &w, kProbeTimeoutS) >= 0) return platform;
    KillProcessesNaming(root, kReapTimeoutS);
    *why += fmt::format("{}{}: {}", why->empty() ? "" : "; ", platform, w);
  }
  return "";
}

}  // namespace sandcheck
