// The host's channels into a VM and their I/O helpers (microvm_channels.h).
#include "backend/microvm/microvm_channels.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace sbx::microvm {

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string Tail(const std::string& path, size_t max) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (s.size() > max) s = "…" + s.substr(s.size() - max);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

// Milliseconds left until `deadline`, at least 0.
int MsLeft(Clock::time_point deadline) {
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

// A listening unix socket at `path` (made before QEMU starts, handed to it as a file descriptor,
// so that connecting right after the spawn never races QEMU's own start-up).
StatusOr<int> ListenUnix(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path) return InvalidArgument("socket path too long: " + path);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket");
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0 || listen(fd, 4) < 0) {
    Status s = ErrnoStatus("bind/listen " + path);
    close(fd);
    return s;
  }
  return fd;
}

StatusOr<int> ConnectUnix(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket");
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0) {
    Status s = ErrnoStatus("connect " + path);
    close(fd);
    return s;
  }
  return fd;
}

Status WriteAll(int fd, std::string_view data, Clock::time_point deadline, const char* what) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t w = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      off += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN) return ErrnoStatus(std::string("writing to ") + what);
    pollfd p{fd, POLLOUT, 0};
    int rc = poll(&p, 1, MsLeft(deadline));
    if (rc == 0) return Status(Code::kTimeout, std::string("timed out writing to ") + what);
  }
  return Status::Ok();
}

// Reads what is there (at least one byte, waiting until the deadline). Empty string: EOF.
StatusOr<std::string> ReadSome(int fd, Clock::time_point deadline, const char* what) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    int rc = poll(&p, 1, MsLeft(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return ErrnoStatus(std::string("poll on ") + what);
    if (rc == 0) return Status(Code::kTimeout, std::string("timed out waiting for ") + what);
    char buf[65536];
    ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) return ErrnoStatus(std::string("reading ") + what);
    return std::string(buf, static_cast<size_t>(r));
  }
}

}  // namespace sbx::microvm
