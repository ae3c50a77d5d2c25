#include "net/netns.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

namespace sbx::net {

StatusOr<host::UniqueFd> UnshareNetnsOnThisThread() {
  // SECURITY: a namespace that only this fd (and later the sandbox's processes) holds; it has
  // no device but lo until we wire it, and no mount anywhere that would outlive us.
  if (unshare(CLONE_NEWNET) != 0) return ErrnoStatus("unshare(CLONE_NEWNET)");
  return OpenThreadNetns();
}

StatusOr<host::UniqueFd> OpenThreadNetns() {
  int fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open /proc/thread-self/ns/net");
  return host::UniqueFd(fd);
}

StatusOr<host::UniqueFd> OpenProcessNetns() {
  int fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open /proc/self/ns/net");
  return host::UniqueFd(fd);
}

Status RunInNetns(int netns_fd, const std::function<Status()>& fn) {
  Status result;
  std::thread t([&] {
    if (setns(netns_fd, CLONE_NEWNET) != 0) {
      result = ErrnoStatus("setns(CLONE_NEWNET)");
      return;
    }
    result = fn();
  });
  t.join();
  return result;
}

Status WriteNetSysctl(const std::string& key, const std::string& value) {
  std::string path = "/proc/sys/" + key;
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(fmt::format("open {}", path));
  host::UniqueFd owned(fd);
  ssize_t n = write(fd, value.data(), value.size());
  if (n != static_cast<ssize_t>(value.size())) return ErrnoStatus(fmt::format("write {}", path));
  return Status::Ok();
}

StatusOr<std::string> ReadNetSysctl(const std::string& key) {
  std::string path = "/proc/sys/" + key;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(fmt::format("open {}", path));
  host::UniqueFd owned(fd);
  char buf[256];
  ssize_t n = read(fd, buf, sizeof(buf));
  if (n < 0) return ErrnoStatus(fmt::format("read {}", path));
  std::string s(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

StatusOr<uint64_t> NetnsInode(int netns_fd) {
  struct stat st;
  if (fstat(netns_fd, &st) != 0) return ErrnoStatus("fstat netns");
  return static_cast<uint64_t>(st.st_ino);
}

}  // namespace sbx::net
