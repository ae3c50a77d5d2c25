// cgroupfs file I/O: read, write one value per write(2), list, remove. Direct file I/O rather
// than libcgroup (docs/cgroups.md says why). Errors go through sbx::ErrnoStatus.
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <string>
#include <vector>

#include "host/cgroup_internal.h"

namespace sbx::host::cgroup_internal {

StatusOr<std::string> ReadFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(fmt::format("open {}", path));
  std::string out;
  char buf[4096];
  while (true) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      return ErrnoStatus(fmt::format("read {}", path), err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

Status WriteFile(const std::string& path, std::string_view value) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(fmt::format("open {}", path));
  ssize_t n;
  do {
    n = write(fd, value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  int err = errno;
  close(fd);
  if (n < 0) return ErrnoStatus(fmt::format("write \"{}\" to {}", value, path), err);
  if (static_cast<size_t>(n) != value.size()) {
    return Internal(fmt::format("short write of \"{}\" to {}", value, path));
  }
  return Status::Ok();
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

std::optional<int64_t> ReadInt(const std::string& path) {
  StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return std::nullopt;
  std::string& s = *text;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  if (s.empty() || s == "max") return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long v = strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || *end != '\0') return std::nullopt;
  return static_cast<int64_t>(v);
}

std::optional<int64_t> ReadKeyed(const std::string& path, std::string_view key) {
  StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return std::nullopt;
  return KeyedValue(*text, key);
}

std::vector<std::string> SubDirs(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (e->d_type == DT_DIR) {
      out.push_back(std::move(name));
    } else if (e->d_type == DT_UNKNOWN) {
      struct stat st;
      if (stat((dir + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        out.push_back(std::move(name));
      }
    }
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<pid_t> ReadProcsRecursive(const std::string& dir) {
  std::vector<pid_t> out;
  if (StatusOr<std::string> text = ReadFile(dir + "/cgroup.procs"); text.ok()) {
    out = ParsePidList(*text);
  }
  // SECURITY: a sandbox that managed to create sub-cgroups must not hide processes from
  // kill-all, so we descend (cgroup.procs lists only a cgroup's direct members).
  for (const std::string& sub : SubDirs(dir)) {
    std::vector<pid_t> more = ReadProcsRecursive(dir + "/" + sub);
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

Status RemoveTree(const std::string& dir, double timeout_s) {
  for (const std::string& sub : SubDirs(dir)) {
    RETURN_IF_ERROR(RemoveTree(dir + "/" + sub, timeout_s));
  }
  int err = 0;
  // EBUSY right after the last process died: its exit may not have finished yet.
  WaitUntil(
      [&] {
        err = rmdir(dir.c_str()) == 0 ? 0 : errno;
        return err != EBUSY;
      },
      timeout_s);
  if (err == 0 || err == ENOENT) return Status::Ok();
  return ErrnoStatus(fmt::format("rmdir {}", dir), err);
}

double MonotonicSeconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void SleepBackoff(int round) {
  long ns = 50000L << std::min(round, 5);  // 50 µs .. 1.6 ms
  timespec ts{0, std::min(ns, 2000000L)};
  nanosleep(&ts, nullptr);
}

}  // namespace sbx::host::cgroup_internal
