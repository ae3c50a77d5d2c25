#include "scenario/harness_values.h"

#include "host/kernel_identity.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <random>

namespace sandcheck {
namespace {

constexpr const char* kCanaryPrefix = "sandcheck-canary-";
constexpr const char* kEnvCanaryName = "SANDCHECK_HOST_CREDENTIAL";

std::string RandomHex(size_t bytes) {
  std::random_device rd;
  std::string out;
  for (size_t i = 0; i < bytes; ++i) out += fmt::format("{:02x}", rd() & 0xff);
  return out;
}

// Removes canaries left by sandcheck processes that no longer exist (a run that was killed).
void SweepStaleCanaries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::string prefix = kCanaryPrefix;
  for (dirent* e; (e = ::readdir(d)) != nullptr;) {
    std::string name = e->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) continue;
    ::unlinkat(::dirfd(d), name.c_str(), 0);
  }
  ::closedir(d);
}

sbx::Status Plant(const std::string& path, const std::string& content) {
  // O_EXCL | O_NOFOLLOW: never write through something someone else put there.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return sbx::ErrnoStatus("plant the canary " + path);
  ::fchmod(fd, 0644);  // world-readable whatever the umask: only isolation may keep it out
  std::string text = content + "\n";
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    return sbx::Internal("cannot write the canary " + path);
  }
  return sbx::Status::Ok();
}

// Whether every directory from / down to `dir` lets other users through (o+x), so that a file
// there is kept from a sandbox's user by isolation alone, not by permissions; "" if so, else why.
std::string ClosedToOthers(const std::string& dir) {
  if (dir.empty() || dir[0] != '/') return "$HOME is not an absolute path";
  std::string at;
  size_t i = 0;
  do {
    size_t next = dir.find('/', i + 1);
    at = dir.substr(0, next == std::string::npos ? dir.size() : next);
    struct stat st {};
    if (::stat(at.empty() ? "/" : at.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return fmt::format("{} is not a directory", at);
    if (!(st.st_mode & S_IXOTH))
      return fmt::format("{} (mode {:04o}) does not let other users through: file permissions, "
                         "not isolation, would keep a sandbox's user out, which proves nothing",
                         at, st.st_mode & 07777);
    i = next;
  } while (i != std::string::npos && i + 1 < dir.size());
  return "";
}

}  // namespace

sbx::StatusOr<HarnessValues> HarnessValues::Make(const std::set<std::string>& used, bool local,
                                                 const std::string& mirror_addr) {
  HarnessValues h;
  std::random_device rd;
  if (local) {
    h.values_["pid"] = std::to_string(::getpid());
    // The host side of the kernel and namespace evidence (checks/kernel_evidence.h).
    h.values_["host_kernel"] = HostKernelIdentity().dump();
    h.values_["host_namespaces"] = HarnessNamespaces().dump();
  }
  h.values_["token"] = RandomHex(6);
  h.values_["token_number"] = std::to_string(1000000 + rd() % 9000000);
  if (!mirror_addr.empty()) h.values_["mirror_addr"] = mirror_addr;
  if (const char* env = std::getenv(kEnvCanaryName); local && used.count("env_canary") && env) {
    h.values_["env_canary"] = env;
  }
  bool canaries = local && (used.count("canary_tmp") || used.count("canary_var_tmp") ||
                            used.count("canary_run") || used.count("canary_dev_shm") ||
                            used.count("canary_home") || used.count("canary_content"));
  if (canaries) {
    std::string content = "sandcheck-canary-" + RandomHex(16);
    std::string name = fmt::format("{}{}-{}", kCanaryPrefix, ::getpid(), RandomHex(4));
    h.values_["canary_content"] = content;
    // /tmp and /var/tmp, which a sandbox usually gets fresh; /run and /dev/shm, which a runtime
    // that hides only those two (the host's root bound in, private /tmp) still shows.
    for (const auto& [key, dir] :
         {std::pair{"canary_tmp", "/tmp"}, {"canary_var_tmp", "/var/tmp"},
          {"canary_run", "/run"}, {"canary_dev_shm", "/dev/shm"}}) {
      SweepStaleCanaries(dir);
      std::string path = fmt::format("{}/{}", dir, name);
      RETURN_IF_ERROR(Plant(path, content));
      h.canaries_.push_back(path);
      h.values_[key] = path;
    }
    // The harness's $HOME, where it is open to other users; else a path there that does not
    // exist (the command's `cat` then reads nothing either way), and the reason, in the report.
    const char* home_env = std::getenv("HOME");
    std::string home = home_env ? home_env : "";
    while (home.size() > 1 && home.back() == '/') home.pop_back();
    std::string why = ClosedToOthers(home);
    std::string path = fmt::format("{}/{}", home, name);
    if (why.empty()) {
      SweepStaleCanaries(home);
      RETURN_IF_ERROR(Plant(path, content));
      h.canaries_.push_back(path);
    } else {
      h.values_["canary_home_not_planted"] = why;
      if (home.empty() || home[0] != '/') path = "/nonexistent/" + name;
    }
    h.values_["canary_home"] = path;
  }
  return h;
}

HarnessValues::HarnessValues(HarnessValues&& o) noexcept
    : values_(std::move(o.values_)), canaries_(std::move(o.canaries_)) {
  o.canaries_.clear();
}

HarnessValues::~HarnessValues() {
  for (const auto& path : canaries_) ::unlink(path.c_str());
}

void PlantEnvCanary() {
  // A credential-looking variable in the harness's own environment, which every adapter and
  // runtime it starts inherits (and the in-process reference runtime holds): a runtime that
  // hands its own environment to the sandbox — the demo actor's subprocess.run does — shows it
  // to the command. Set before any thread starts (setenv is not thread-safe).
  std::string value = "sandcheck-host-credential-" + RandomHex(12);
  ::setenv(kEnvCanaryName, value.c_str(), 1);
}

bool TargetIsLocal(const std::string& spec, const std::string& override_mode) {
  if (override_mode == "local") return true;
  if (override_mode == "remote") return false;
  if (spec == "reference" || spec.rfind("adapter:", 0) == 0 || spec.rfind("unix:", 0) == 0)
    return true;
  for (const char* local : {"http://127.", "http://localhost", "http://[::1]"}) {
    if (spec.rfind(local, 0) == 0) return true;
  }
  return false;
}

}  // namespace sandcheck
