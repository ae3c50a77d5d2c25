// newc archives: see microvm_cpio.h.
#include "backend/microvm/microvm_cpio.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <string_view>
#include <utility>

namespace sbx::microvm {
namespace {

// A file being written under a temporary name; renamed into place by Commit, else removed.
class OutFile {
 public:
  static StatusOr<OutFile> Create(const std::string& path) {
    OutFile f;
    f.path_ = path;
    f.tmp_ = path + ".tmpXXXXXX";
    f.fd_ = mkostemp(f.tmp_.data(), O_CLOEXEC);
    if (f.fd_ < 0) return ErrnoStatus("creating a temporary file for " + path);
    fchmod(f.fd_, 0644);
    return f;
  }
  OutFile() = default;
  OutFile(OutFile&& o) noexcept { *this = std::move(o); }
  OutFile& operator=(OutFile&& o) noexcept {
    std::swap(fd_, o.fd_);
    std::swap(path_, o.path_);
    std::swap(tmp_, o.tmp_);
    std::swap(buf_, o.buf_);
    std::swap(written_, o.written_);
    return *this;
  }
  ~OutFile() {
    if (fd_ >= 0) {
      close(fd_);
      unlink(tmp_.c_str());
    }
  }

  Status Write(std::string_view data) {
    buf_.append(data.data(), data.size());
    written_ += data.size();
    if (buf_.size() >= (1u << 20)) return Flush();
    return Status::Ok();
  }
  Status Pad4() {
    size_t pad = (4 - written_ % 4) % 4;
    return Write(std::string_view("\0\0\0", pad));
  }
  uint64_t written() const { return written_; }
  Status Commit() {
    RETURN_IF_ERROR(Flush());
    if (close(fd_) < 0) {
      fd_ = -1;
      unlink(tmp_.c_str());
      return ErrnoStatus("closing " + tmp_);
    }
    fd_ = -1;
    if (rename(tmp_.c_str(), path_.c_str()) < 0) {
      Status s = ErrnoStatus("renaming " + tmp_ + " to " + path_);
      unlink(tmp_.c_str());
      return s;
    }
    return Status::Ok();
  }

 private:
  Status Flush() {
    size_t off = 0;
    while (off < buf_.size()) {
      ssize_t w = write(fd_, buf_.data() + off, buf_.size() - off);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return ErrnoStatus("writing " + tmp_);
      off += static_cast<size_t>(w);
    }
    buf_.clear();
    return Status::Ok();
  }

  int fd_ = -1;
  std::string path_, tmp_, buf_;
  uint64_t written_ = 0;
};

// Copies the file at `path` (expected `size` bytes) into `out`.
Status CopyInto(const std::string& path, uint64_t size, OutFile& out) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoStatus("opening " + path);
  std::string buf(1 << 16, '\0');
  uint64_t got = 0;
  Status s;
  while (got < size) {
    ssize_t r = read(fd, buf.data(), std::min<uint64_t>(buf.size(), size - got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      s = ErrnoStatus("reading " + path);
      break;
    }
    if (r == 0) {
      s = Internal(fmt::format("{} shrank while archiving ({} of {} bytes)", path, got, size));
      break;
    }
    s = out.Write(std::string_view(buf.data(), static_cast<size_t>(r)));
    if (!s.ok()) break;
    got += static_cast<uint64_t>(r);
  }
  close(fd);
  return s;
}

struct Entry {
  std::string src;   // path on the host
  std::string name;  // name in the archive
  struct stat st;
};

// Depth-first, children in byte order, a directory before its contents.
Status Walk(const std::string& src, const std::string& name, std::vector<Entry>& out) {
  DIR* d = opendir(src.c_str());
  if (!d) return ErrnoStatus("opening directory " + src);
  std::vector<std::string> names;
  errno = 0;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    names.push_back(std::move(n));
  }
  int err = errno;
  closedir(d);
  if (err) return ErrnoStatus("reading directory " + src, err);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    Entry e;
    e.src = src + "/" + n;
    e.name = name.empty() ? n : name + "/" + n;
    if (lstat(e.src.c_str(), &e.st) < 0) return ErrnoStatus("lstat " + e.src);
    mode_t type = e.st.st_mode & S_IFMT;
    if (type != S_IFREG && type != S_IFDIR && type != S_IFLNK) continue;  // devices, fifos, sockets
    bool dir = type == S_IFDIR;
    std::string child_src = e.src, child_name = e.name;
    out.push_back(std::move(e));
    if (dir) RETURN_IF_ERROR(Walk(child_src, child_name, out));
  }
  return Status::Ok();
}

struct Owner {
  uint32_t uid = 0, gid = 0;
};

Owner OwnerOf(const struct stat& st, bool root_owned) {
  if (root_owned) return {};
  return {static_cast<uint32_t>(st.st_uid), static_cast<uint32_t>(st.st_gid)};
}

std::string Header(uint32_t ino, Owner owner, mode_t mode, uint32_t nlink, uint64_t filesize,
                   const std::string& name, uint32_t rdev_major = 0, uint32_t rdev_minor = 0) {
  // magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor, rdevmajor, rdevminor,
  // namesize, check
  std::string h = fmt::format(
      "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}", ino,
      static_cast<uint32_t>(mode), owner.uid, owner.gid, nlink, 0u, static_cast<uint32_t>(filesize),
      0u, 0u, rdev_major, rdev_minor, static_cast<uint32_t>(name.size() + 1), 0u);
  h += name;
  h.push_back('\0');
  return h;
}

}  // namespace

Status WriteNewcTree(const std::string& rootfs_dir, const std::string& prefix,
                     const std::string& out_path) {
  return WriteNewcTree(rootfs_dir, prefix, out_path, NewcOptions{});
}

Status WriteNewcTree(const std::string& rootfs_dir, const std::string& prefix,
                     const std::string& out_path, const NewcOptions& options) {
  for (const NewcNode& n : options.nodes) {
    mode_t type = n.mode & S_IFMT;
    if ((type != S_IFCHR && type != S_IFBLK) || n.name.empty() || n.name.front() == '/')
      return InvalidArgument(fmt::format(
          "node \"{}\": a character or block device with a relative name is expected", n.name));
  }
  struct stat root {};
  if (stat(rootfs_dir.c_str(), &root) < 0) return ErrnoStatus("stat " + rootfs_dir);
  if (!S_ISDIR(root.st_mode)) return InvalidArgument(rootfs_dir + " is not a directory");
  std::string pfx = prefix;
  while (!pfx.empty() && pfx.back() == '/') pfx.pop_back();
  while (!pfx.empty() && pfx.front() == '/') pfx.erase(0, 1);
  std::vector<Entry> entries;
  if (!pfx.empty()) entries.push_back(Entry{rootfs_dir, pfx, root});
  RETURN_IF_ERROR(Walk(rootfs_dir, pfx, entries));

  // Hard links: the names of one (dev, ino) among regular files with st_nlink > 1.
  std::map<std::pair<dev_t, ino_t>, std::vector<size_t>> links;
  for (size_t i = 0; i < entries.size(); i++) {
    const auto& st = entries[i].st;
    if (S_ISREG(st.st_mode) && st.st_nlink > 1) links[{st.st_dev, st.st_ino}].push_back(i);
  }
  // Inode numbers in archive order; the names of one file share the first name's number.
  std::vector<uint32_t> ino(entries.size(), 0);
  std::vector<uint32_t> nlink(entries.size(), 1);
  std::vector<bool> has_data(entries.size(), true);
  uint32_t next = 1;
  for (size_t i = 0; i < entries.size(); i++) {
    if (ino[i]) continue;
    ino[i] = next++;
    const auto& st = entries[i].st;
    if (S_ISDIR(st.st_mode)) nlink[i] = 2;
    if (S_ISREG(st.st_mode) && st.st_nlink > 1) {
      const auto& group = links[{st.st_dev, st.st_ino}];
      for (size_t k : group) {
        ino[k] = ino[i];
        nlink[k] = static_cast<uint32_t>(group.size());
        has_data[k] = k == group.back();  // newc: the data goes with the last name
      }
    }
  }

  ASSIGN_OR_RETURN(OutFile out, OutFile::Create(out_path));
  for (size_t i = 0; i < entries.size(); i++) {
    const Entry& e = entries[i];
    mode_t mode = e.st.st_mode;
    const Owner own = OwnerOf(e.st, options.root_owned);
    if (S_ISLNK(mode)) {
      std::string target(4096, '\0');
      ssize_t n = readlink(e.src.c_str(), target.data(), target.size());
      if (n < 0) return ErrnoStatus("readlink " + e.src);
      target.resize(static_cast<size_t>(n));
      RETURN_IF_ERROR(out.Write(Header(ino[i], own, mode, 1, target.size(), e.name)));
      RETURN_IF_ERROR(out.Pad4());
      RETURN_IF_ERROR(out.Write(target));
      RETURN_IF_ERROR(out.Pad4());
    } else if (S_ISREG(mode)) {
      uint64_t size = has_data[i] ? static_cast<uint64_t>(e.st.st_size) : 0;
      if (size > 0xffffffffull)
        return InvalidArgument(e.src + " is over 4 GiB: newc cannot hold it");
      RETURN_IF_ERROR(out.Write(Header(ino[i], own, mode, nlink[i], size, e.name)));
      RETURN_IF_ERROR(out.Pad4());
      if (size) RETURN_IF_ERROR(CopyInto(e.src, size, out));
      RETURN_IF_ERROR(out.Pad4());
    } else {  // directory
      RETURN_IF_ERROR(out.Write(Header(ino[i], own, mode, nlink[i], 0, e.name)));
      RETURN_IF_ERROR(out.Pad4());
    }
  }
  for (const NewcNode& n : options.nodes) {
    RETURN_IF_ERROR(
        out.Write(Header(next++, Owner{}, n.mode, 1, 0, n.name, n.rdev_major, n.rdev_minor)));
    RETURN_IF_ERROR(out.Pad4());
  }
  RETURN_IF_ERROR(out.Write(Header(0, Owner{}, 0, 1, 0, "TRAILER!!!")));
  RETURN_IF_ERROR(out.Pad4());
  return out.Commit();
}

Status ConcatFiles(const std::vector<std::string>& in, const std::string& out_path) {
  ASSIGN_OR_RETURN(OutFile out, OutFile::Create(out_path));
  for (const auto& path : in) {
    struct stat st {};
    if (stat(path.c_str(), &st) < 0) return ErrnoStatus("stat " + path);
    if (!S_ISREG(st.st_mode)) return InvalidArgument(path + " is not a regular file");
    RETURN_IF_ERROR(CopyInto(path, static_cast<uint64_t>(st.st_size), out));
    RETURN_IF_ERROR(out.Pad4());
  }
  return out.Commit();
}

}  // namespace sbx::microvm
