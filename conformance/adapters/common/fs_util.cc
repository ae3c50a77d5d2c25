#include "common/fs_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "common/fd.h"

namespace sandcheck::adapter {

sbx::StatusOr<std::string> ReadFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return sbx::ErrnoStatus(fmt::format("open {}", path));
  std::string out;
  char buf[8192];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sbx::ErrnoStatus(fmt::format("read {}", path));
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

namespace {

sbx::Status WriteAll(int fd, std::string_view data, const std::string& what) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sbx::ErrnoStatus(fmt::format("write {}", what));
    data.remove_prefix(static_cast<size_t>(n));
  }
  return sbx::Status::Ok();
}

// Empties the directory open at `dirfd` (which lives on device `dev`), then nothing else.
sbx::Status EmptyAt(int dirfd, dev_t dev, const std::string& shown) {
  // Collect names first: unlinking while iterating a DIR stream is unspecified.
  int dup_fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return sbx::ErrnoStatus("dup");
  DIR* dir = fdopendir(dup_fd);
  if (!dir) {
    close(dup_fd);
    return sbx::ErrnoStatus(fmt::format("opendir {}", shown));
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(dir)) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  closedir(dir);
  for (const auto& name : names) {
    struct stat st;
    if (fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      return sbx::ErrnoStatus(fmt::format("stat {}/{}", shown, name));
    }
    if (S_ISDIR(st.st_mode)) {
      if (st.st_dev != dev) {
        return sbx::FailedPrecondition(
            fmt::format("{}/{} is a mount point; refusing to delete across it", shown, name));
      }
      // SECURITY: O_NOFOLLOW|O_DIRECTORY: a directory swapped for a symlink between the stat
      // and the open fails here instead of leading the walk out of the sandbox's tree.
      UniqueFd sub(openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub.valid()) return sbx::ErrnoStatus(fmt::format("open {}/{}", shown, name));
      struct stat sub_st;
      if (fstat(sub.get(), &sub_st) != 0 || sub_st.st_dev != dev) {
        return sbx::FailedPrecondition(fmt::format("{}/{} changed file system", shown, name));
      }
      RETURN_IF_ERROR(EmptyAt(sub.get(), dev, shown + "/" + name));
      if (unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
        return sbx::ErrnoStatus(fmt::format("rmdir {}/{}", shown, name));
      }
    } else if (unlinkat(dirfd, name.c_str(), 0) != 0 && errno != ENOENT) {
      return sbx::ErrnoStatus(fmt::format("unlink {}/{}", shown, name));
    }
  }
  return sbx::Status::Ok();
}

}  // namespace

sbx::Status WriteFileAtomic(const std::string& path, std::string_view content, mode_t mode) {
  std::string tmp = path + ".tmp";
  UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode));
  if (!fd.valid()) return sbx::ErrnoStatus(fmt::format("create {}", tmp));
  RETURN_IF_ERROR(WriteAll(fd.get(), content, tmp));
  fd.Reset();
  if (rename(tmp.c_str(), path.c_str()) != 0)
    return sbx::ErrnoStatus(fmt::format("rename {}", path));
  return sbx::Status::Ok();
}

sbx::Status EmptyDirectory(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return sbx::ErrnoStatus(fmt::format("open {}", path));
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return sbx::ErrnoStatus(fmt::format("stat {}", path));
  return EmptyAt(fd.get(), st.st_dev, path);
}

sbx::Status RemoveTree(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return sbx::Status::Ok();
    return sbx::ErrnoStatus(fmt::format("stat {}", path));
  }
  if (S_ISDIR(st.st_mode)) {
    RETURN_IF_ERROR(EmptyDirectory(path));
    if (rmdir(path.c_str()) != 0 && errno != ENOENT) {
      return sbx::ErrnoStatus(fmt::format("rmdir {}", path));
    }
    return sbx::Status::Ok();
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return sbx::ErrnoStatus(fmt::format("unlink {}", path));
  }
  return sbx::Status::Ok();
}

sbx::StatusOr<int> CountEntries(const std::string& path) {
  DIR* dir = opendir(path.c_str());
  if (!dir) return sbx::ErrnoStatus(fmt::format("opendir {}", path));
  int n = 0;
  while (dirent* e = readdir(dir)) {
    std::string_view name = e->d_name;
    if (name != "." && name != "..") ++n;
  }
  closedir(dir);
  return n;
}

sbx::Status WriteFileBeneath(const std::string& root, std::string_view relative,
                             std::string_view content, mode_t mode, uid_t uid, gid_t gid) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos <= relative.size()) {
    size_t next = relative.find('/', pos);
    if (next == std::string_view::npos) next = relative.size();
    std::string part(relative.substr(pos, next - pos));
    if (part.empty() || part == "." || part == "..") {
      return sbx::InvalidArgument(fmt::format("bad path component in \"{}\"", relative));
    }
    parts.push_back(std::move(part));
    pos = next + 1;
  }
  UniqueFd dir(open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid()) return sbx::ErrnoStatus(fmt::format("open {}", root));
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const char* name = parts[i].c_str();
    if (mkdirat(dir.get(), name, 0755) == 0) {
      if (fchownat(dir.get(), name, uid, gid, AT_SYMLINK_NOFOLLOW) != 0) {
        return sbx::ErrnoStatus(fmt::format("chown {}", parts[i]));
      }
    } else if (errno != EEXIST) {
      return sbx::ErrnoStatus(fmt::format("mkdir {}", parts[i]));
    }
    // SECURITY: the sandbox owns this tree; O_NOFOLLOW refuses a planted symlink.
    UniqueFd sub(openat(dir.get(), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub.valid()) return sbx::ErrnoStatus(fmt::format("open {}", parts[i]));
    dir = std::move(sub);
  }
  const std::string& leaf = parts.back();
  // SECURITY: O_NOFOLLOW on the leaf as well; an existing symlink there is an error, and the
  // file is never opened for writing through a link to a host file.
  UniqueFd fd(openat(dir.get(), leaf.c_str(),
                     O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK,
                     mode & 0777));
  if (!fd.valid()) return sbx::ErrnoStatus(fmt::format("create {}", relative));
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return sbx::ErrnoStatus("fstat");
  if (!S_ISREG(st.st_mode))
    return sbx::InvalidArgument(fmt::format("{} is not a regular file", relative));
  RETURN_IF_ERROR(WriteAll(fd.get(), content, std::string(relative)));
  if (fchown(fd.get(), uid, gid) != 0) return sbx::ErrnoStatus("fchown");
  if (fchmod(fd.get(), mode & 0777) != 0) return sbx::ErrnoStatus("fchmod");
  return sbx::Status::Ok();
}

}  // namespace sandcheck::adapter
