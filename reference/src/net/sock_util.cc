#include "net/sock_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

namespace sbx::net {
namespace {

// Waits for `events` on fd; kOk when ready.
IoResult WaitFor(int fd, short events, int stop_fd, Clock::time_point deadline) {
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return IoResult::kTimeout;
    pollfd p[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
    int n = poll(p, 2, static_cast<int>(std::min<int64_t>(left.count() + 1, 60000)));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoResult::kError;
    }
    if (p[1].revents) return IoResult::kStopped;
    if (p[0].revents) return IoResult::kOk;
  }
}

}  // namespace

IoResult ReadSome(int fd, int stop_fd, Clock::time_point deadline, std::string* buf, size_t cap) {
  while (true) {
    IoResult w = WaitFor(fd, POLLIN, stop_fd, deadline);
    if (w != IoResult::kOk) return w;
    size_t old = buf->size();
    buf->resize(old + cap);
    ssize_t n = recv(fd, buf->data() + old, cap, MSG_DONTWAIT);
    if (n < 0) {
      buf->resize(old);
      if (errno == EAGAIN || errno == EINTR) continue;
      return IoResult::kError;
    }
    buf->resize(old + static_cast<size_t>(n));
    return n == 0 ? IoResult::kEof : IoResult::kOk;
  }
}

IoResult ReadExact(int fd, int stop_fd, Clock::time_point deadline, size_t n, std::string* buf) {
  size_t want = buf->size() + n;
  while (buf->size() < want) {
    IoResult r = ReadSome(fd, stop_fd, deadline, buf, want - buf->size());
    if (r != IoResult::kOk) return r;
  }
  return IoResult::kOk;
}

IoResult WriteAll(int fd, int stop_fd, Clock::time_point deadline, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) {
        IoResult w = WaitFor(fd, POLLOUT, stop_fd, deadline);
        if (w != IoResult::kOk) return w;
        continue;
      }
      return IoResult::kError;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return IoResult::kOk;
}

void ResetAndClose(host::UniqueFd fd) {
  if (!fd.valid()) return;
  linger l{1, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  fd.Reset();
}

void GracefulClose(host::UniqueFd fd, int stop_fd) {
  if (!fd.valid()) return;
  shutdown(fd.get(), SHUT_WR);
  auto deadline = Clock::now() + std::chrono::milliseconds(500);
  std::string sink;
  size_t drained = 0;
  while (drained < 256 * 1024) {
    sink.clear();
    if (ReadSome(fd.get(), stop_fd, deadline, &sink, 16384) != IoResult::kOk) break;
    drained += sink.size();
  }
  fd.Reset();
}

std::string Ipv4String(uint32_t addr_be) {
  char s[INET_ADDRSTRLEN] = {0};
  in_addr a{addr_be};
  inet_ntop(AF_INET, &a, s, sizeof(s));
  return s;
}

std::string SockaddrString(const sockaddr_in& sa) {
  return fmt::format("{}:{}", Ipv4String(sa.sin_addr.s_addr), ntohs(sa.sin_port));
}

StatusOr<host::UniqueFd> ListenTcp(uint32_t addr_be, uint16_t port, int backlog) {
  host::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus("socket(tcp)");
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = addr_be;
  sa.sin_port = htons(port);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    return ErrnoStatus(fmt::format("bind tcp {}:{}", Ipv4String(addr_be), port));
  }
  if (listen(fd.get(), backlog) != 0) return ErrnoStatus("listen");
  return fd;
}

StatusOr<host::UniqueFd> BindUdp(uint32_t addr_be, uint16_t port) {
  host::UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus("socket(udp)");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = addr_be;
  sa.sin_port = htons(port);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    return ErrnoStatus(fmt::format("bind udp {}:{}", Ipv4String(addr_be), port));
  }
  return fd;
}

StatusOr<host::UniqueFd> ConnectTcp(const std::string& host, int port,
                                    std::chrono::milliseconds timeout, int stop_fd) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) return NotFound(fmt::format("resolving {}: {}", host, gai_strerror(rc)));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(res, freeaddrinfo);
  Status last = NotFound(fmt::format("no address for {}", host));
  auto deadline = Clock::now() + timeout;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    host::UniqueFd fd(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) {
      last = ErrnoStatus("socket(upstream)");
      continue;
    }
    if (connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = ErrnoStatus(fmt::format("connect {}:{}", host, port));
      continue;
    }
    IoResult w = WaitFor(fd.get(), POLLOUT, stop_fd, deadline);
    if (w != IoResult::kOk) {
      last = Status(Code::kTimeout, fmt::format("connect {}:{}: timed out", host, port));
      continue;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      last = ErrnoStatus(fmt::format("connect {}:{}", host, port), err);
      continue;
    }
    int flags = fcntl(fd.get(), F_GETFL);
    fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
    return fd;
  }
  return last;
}

}  // namespace sbx::net
