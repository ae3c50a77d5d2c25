// Content-addressed image store and node cache (IMG-1, IMG-2). See docs/images.md.
//
// Layout:
//   <store>/<hex>.tar            the image, named by the SHA-256 of its bytes
//   <store>/refs/<name>          "sha256:<hex>" — a template name's image
//   <cache>/<hex>/rootfs/        the unpacked tree (the read-only lower layer of sandboxes)
//   <cache>/<hex>/verified       "sha256:<hex>": written only after the digest checked out
//   <cache>/<hex>.lock           flock: one unpacker per image per node
//   <cache>/<hex>.tmp-<pid>-XXXXXX/   an unpack in progress (removed if it fails)
//
// "<cache>/<hex>" appears only by an atomic rename of a complete, verified tree, so its
// presence is the proof; a crash mid-unpack leaves a .tmp directory, which the next unpacker of
// the same image removes under the lock.
#include "host/image.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <utility>
#include <vector>

#include "host/fd.h"
#include "host/sha256.h"

extern char** environ;

namespace sbx::host {
namespace {

constexpr std::string_view kDigestPrefix = "sha256:";
constexpr size_t kHexLen = 64;
constexpr size_t kMaxNameLen = 128;
constexpr size_t kChunk = 1 << 20;

// A child process that is killed and reaped unless it was waited for.
class ChildProcess {
 public:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      int st;
      while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
      }
    }
  }
  // Returns the wait status.
  StatusOr<int> Wait() {
    int st = 0;
    while (waitpid(pid_, &st, 0) < 0) {
      if (errno != EINTR) return ErrnoStatus("waitpid");
    }
    pid_ = -1;
    return st;
  }

 private:
  pid_t pid_;
};

// A directory tree removed on scope exit unless released.
class TempTree {
 public:
  explicit TempTree(std::string path) : path_(std::move(path)) {}
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;
  ~TempTree() {
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  void Release() { path_.clear(); }

 private:
  std::string path_;
};

bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// "sha256:<64 lower-case hex>" → the hex.
StatusOr<std::string> ParseDigest(std::string_view text) {
  if (text.substr(0, kDigestPrefix.size()) != kDigestPrefix) {
    return InvalidArgument(fmt::format("image digest \"{}\" does not start with sha256:", text));
  }
  std::string_view hex = text.substr(kDigestPrefix.size());
  if (hex.size() != kHexLen || !IsLowerHex(hex)) {
    return InvalidArgument(
        fmt::format("image digest \"{}\": want sha256: and 64 lower-case hex digits", text));
  }
  return std::string(hex);
}

// SECURITY: a template name becomes a path under <store>/refs, so it must be one plain path
// component: no '/', no "." or "..", nothing hidden, nothing outside [A-Za-z0-9._-].
Status ValidateName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLen) {
    return InvalidArgument(
        fmt::format("image name \"{}\": must be 1..{} characters", name, kMaxNameLen));
  }
  if (name.front() == '.') {
    return InvalidArgument(fmt::format("image name \"{}\": must not start with '.'", name));
  }
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) {
      return InvalidArgument(
          fmt::format("image name \"{}\": only letters, digits, '.', '_' and '-' allowed", name));
    }
  }
  return Status::Ok();
}

StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoStatus(fmt::format("open {}", path));
  std::string out(max + 1, '\0');
  size_t len = 0;
  while (len < out.size()) {
    ssize_t n = read(fd.get(), out.data() + len, out.size() - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(fmt::format("read {}", path));
    if (n == 0) break;
    len += static_cast<size_t>(n);
  }
  if (len > max) return InvalidArgument(fmt::format("{}: longer than {} bytes", path, max));
  out.resize(len);
  return out;
}

Status WriteFile(const std::string& path, std::string_view data) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) return ErrnoStatus(fmt::format("create {}", path));
  while (!data.empty()) {
    ssize_t n = write(fd.get(), data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(fmt::format("write {}", path));
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

// Reads `fd` from offset 0 to the end; every chunk goes to the hash and then to `sink`.
template <typename Sink>
StatusOr<std::string> HashFd(int fd, const std::string& what, Sink&& sink) {
  std::vector<char> buf(kChunk);
  Sha256 h;
  off_t off = 0;
  for (;;) {
    ssize_t n = pread(fd, buf.data(), buf.size(), off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(fmt::format("read {}", what));
    if (n == 0) break;
    h.Update(buf.data(), static_cast<size_t>(n));
    RETURN_IF_ERROR(sink(buf.data(), static_cast<size_t>(n)));
    off += n;
  }
  return Sha256::ToHex(h.Finish());
}

Status NoSink(const char*, size_t) { return Status::Ok(); }

// The marker says the tree below it came from bytes whose digest was `hex`.
bool IsVerified(const std::string& image_dir, const std::string& hex) {
  auto marker = ReadSmallFile(image_dir + "/verified", 256);
  return marker.ok() && *marker == fmt::format("{}{}\n", kDigestPrefix, hex);
}

std::string TailOf(int fd) {
  off_t end = lseek(fd, 0, SEEK_END);
  if (end <= 0) return "";
  off_t start = end > 2048 ? end - 2048 : 0;
  std::string s(static_cast<size_t>(end - start), '\0');
  ssize_t n = pread(fd, s.data(), s.size(), start);
  s.resize(n > 0 ? static_cast<size_t>(n) : 0);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Streams the already-verified image `fd` into `tar -x` in `dest`, hashing what it sends. The
// tar never reads the store file itself, so what it unpacks is exactly what was hashed (no
// window between check and use). Returns the digest of the bytes sent.
StatusOr<std::string> StreamIntoTar(int fd, const std::string& what, const std::string& dest) {
  int sv[2];
  // A socket rather than a pipe: send(MSG_NOSIGNAL) reports a dead tar as EPIPE instead of
  // raising SIGPIPE in a process that is not ours to configure.
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoStatus("socketpair for tar");
  }
  UniqueFd ours(sv[0]), theirs(sv[1]);
  UniqueFd err(memfd_create("sbx-tar-stderr", MFD_CLOEXEC));
  if (err.get() < 0) return ErrnoStatus("memfd_create for tar");
  UniqueFd devnull(open("/dev/null", O_WRONLY | O_CLOEXEC));
  if (devnull.get() < 0) return ErrnoStatus("open /dev/null");

  posix_spawn_file_actions_t fa;
  if (int rc = posix_spawn_file_actions_init(&fa)) return ErrnoStatus("spawn actions", rc);
  posix_spawn_file_actions_adddup2(&fa, theirs.get(), 0);
  posix_spawn_file_actions_adddup2(&fa, devnull.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, err.get(), 2);
  // --numeric-owner: ids as in the tar, never mapped through this host's /etc/passwd.
  // -p / --same-owner (the default for root): modes and owners exactly as built.
  // GNU tar refuses members with ".." and strips leading "/" by default.
  std::vector<std::string> args = {"tar", "-x", "-f", "-", "-C", dest, "--numeric-owner", "-p"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, "tar", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return ErrnoStatus("spawn tar", rc);
  ChildProcess tar(pid);
  theirs.Reset();

  bool tar_gone = false;
  auto send_all = [&](const char* p, size_t n) -> Status {
    while (n > 0 && !tar_gone) {
      ssize_t w = send(ours.get(), p, n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno == EPIPE) {
        tar_gone = true;  // its exit status says why
        break;
      }
      if (w < 0) return ErrnoStatus("send to tar");
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::Ok();
  };
  ASSIGN_OR_RETURN(std::string sent, HashFd(fd, what, send_all));
  ours.Reset();  // EOF for tar
  ASSIGN_OR_RETURN(int st, tar.Wait());
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    return Internal(fmt::format("unpacking {}: tar {} {}: {}", what,
                                WIFEXITED(st) ? "exited" : "killed by signal",
                                WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), TailOf(err.get())));
  }
  return sent;
}

}  // namespace

ImageStore::ImageStore(std::string store_dir, std::string cache_dir)
    : store_dir_(std::move(store_dir)), cache_dir_(std::move(cache_dir)) {}

StatusOr<std::string> ImageStore::Sha256File(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoStatus(fmt::format("open {}", path));
  return HashFd(fd.get(), path, NoSink);
}

StatusOr<Image> ImageStore::Get(const std::string& ref) {
  // 1. Resolve the reference to a digest.
  std::string hex;
  if (ref.rfind(kDigestPrefix, 0) == 0) {
    ASSIGN_OR_RETURN(hex, ParseDigest(ref));
  } else {
    RETURN_IF_ERROR(ValidateName(ref));
    std::string ref_path = fmt::format("{}/refs/{}", store_dir_, ref);
    auto text = ReadSmallFile(ref_path, 256);
    if (!text.ok()) {
      if (text.status().code() == Code::kNotFound) {
        return NotFound(fmt::format("no template \"{}\" in image store {}", ref, store_dir_));
      }
      return text.status();
    }
    std::string_view t = *text;
    while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.remove_suffix(1);
    auto parsed = ParseDigest(t);
    if (!parsed.ok()) return parsed.status().WithContext(ref_path);
    hex = std::move(parsed).value();
  }
  const std::string digest = fmt::format("{}{}", kDigestPrefix, hex);
  const std::string image_dir = fmt::format("{}/{}", cache_dir_, hex);
  Image image{digest, image_dir + "/rootfs"};

  // 2. IMG-2: already verified and unpacked on this node — the common case, two small reads.
  if (IsVerified(image_dir, hex)) return image;

  // 3. First use on this node: one unpacker per image; others wait here and then find it.
  std::error_code ec;
  std::filesystem::create_directories(cache_dir_, ec);
  if (ec) return ErrnoStatus(fmt::format("create image cache {}", cache_dir_), ec.value());
  UniqueFd lock(
      open(fmt::format("{}.lock", image_dir).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (lock.get() < 0) return ErrnoStatus(fmt::format("open {}.lock", image_dir));
  while (flock(lock.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return ErrnoStatus(fmt::format("flock {}.lock", image_dir));
  }
  if (IsVerified(image_dir, hex)) return image;  // the previous holder did it

  // Leftovers of unpackers that died (only the lock holder creates them, so none is live).
  const std::string tmp_prefix = hex + ".tmp-";
  for (std::filesystem::directory_iterator it(cache_dir_, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->path().filename().string().rfind(tmp_prefix, 0) == 0) {
      std::error_code rm_ec;
      std::filesystem::remove_all(it->path(), rm_ec);
    }
  }
  ec.clear();
  // A directory without a valid marker is not ours to trust (e.g. from an older layout).
  if (std::filesystem::exists(image_dir, ec)) {
    std::filesystem::remove_all(image_dir, ec);
    if (ec) return ErrnoStatus(fmt::format("remove unverified {}", image_dir), ec.value());
  }

  // 4. IMG-1: verify the digest before anything is unpacked.
  const std::string tar_path = fmt::format("{}/{}.tar", store_dir_, hex);
  UniqueFd tar_fd(open(tar_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (tar_fd.get() < 0) {
    if (errno == ENOENT) {
      return NotFound(fmt::format("image {} not in store {}", digest, store_dir_));
    }
    return ErrnoStatus(fmt::format("open {}", tar_path));
  }
  struct stat sb;
  if (fstat(tar_fd.get(), &sb) != 0) return ErrnoStatus(fmt::format("stat {}", tar_path));
  if (!S_ISREG(sb.st_mode)) return InvalidArgument(fmt::format("{}: not a regular file", tar_path));
  ASSIGN_OR_RETURN(std::string got, HashFd(tar_fd.get(), tar_path, NoSink));
  if (got != hex) {
    return InvalidArgument(fmt::format("digest mismatch: {} has {}{}, expected {}", tar_path,
                                       kDigestPrefix, got, digest));
  }

  // 5. Unpack into a private directory, re-hashing the bytes as they go to tar (they must be
  //    the ones just verified), mark it verified, and publish it with one rename.
  std::string tmp = fmt::format("{}/{}{}-XXXXXX", cache_dir_, tmp_prefix, getpid());
  if (mkdtemp(tmp.data()) == nullptr) return ErrnoStatus(fmt::format("mkdtemp {}", tmp));
  TempTree cleanup(tmp);
  // mkdtemp makes it 0700; the published directory is traversable like any image path.
  if (chmod(tmp.c_str(), 0755) != 0) return ErrnoStatus(fmt::format("chmod {}", tmp));
  if (mkdir((tmp + "/rootfs").c_str(), 0755) != 0) return ErrnoStatus("mkdir rootfs");
  ASSIGN_OR_RETURN(std::string sent, StreamIntoTar(tar_fd.get(), tar_path, tmp + "/rootfs"));
  if (sent != hex) {
    return InvalidArgument(
        fmt::format("digest mismatch: {} changed while it was unpacked "
                    "(now {}{}, expected {})",
                    tar_path, kDigestPrefix, sent, digest));
  }
  RETURN_IF_ERROR(WriteFile(tmp + "/verified", digest + "\n"));
  if (rename(tmp.c_str(), image_dir.c_str()) != 0) {
    // Only possible if someone unpacks without the lock; theirs is as good as ours if verified.
    int err = errno;
    if ((err == ENOTEMPTY || err == EEXIST) && IsVerified(image_dir, hex)) return image;
    return ErrnoStatus(fmt::format("rename {} to {}", tmp, image_dir), err);
  }
  cleanup.Release();
  return image;
}

}  // namespace sbx::host
