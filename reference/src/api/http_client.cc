#include "api/http_client.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>

#include "host/fd.h"

namespace sbx::api {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxResponseBody = 64 * 1024 * 1024;

int MsLeft(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms <= 0 ? 0 : static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

// Waits for `events` on fd until the deadline: OK, kTimeout or an errno status.
Status Wait(int fd, short events, Clock::time_point deadline, std::string_view what) {
  while (true) {
    int left = MsLeft(deadline);
    if (left == 0)
      return Status(Code::kTimeout, fmt::format("sandboxd did not answer in time ({})", what));
    pollfd p{fd, events, 0};
    int n = poll(&p, 1, left);
    if (n > 0) return Status::Ok();
    if (n < 0 && errno != EINTR) return ErrnoStatus("poll");
  }
}

StatusOr<host::UniqueFd> Connect(const ListenAddress& a, Clock::time_point deadline) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family;
  if (a.kind == ListenAddress::Kind::kUnix) {
    auto* su = reinterpret_cast<sockaddr_un*>(&ss);
    su->sun_family = AF_UNIX;
    a.path.copy(su->sun_path, sizeof(su->sun_path) - 1);
    len = sizeof *su;
    family = AF_UNIX;
  } else if (in6_addr v6{}; inet_pton(AF_INET6, a.host.c_str(), &v6) == 1) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
    s6->sin6_family = AF_INET6;
    s6->sin6_addr = v6;
    s6->sin6_port = htons(static_cast<uint16_t>(a.port));
    len = sizeof *s6;
    family = AF_INET6;
  } else {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
    s4->sin_family = AF_INET;
    inet_pton(AF_INET, a.host.c_str(), &s4->sin_addr);
    s4->sin_port = htons(static_cast<uint16_t>(a.port));
    len = sizeof *s4;
    family = AF_INET;
  }
  host::UniqueFd fd(socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return ErrnoStatus("socket");
  if (family != AF_UNIX) {
    int one = 1;
    setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    if (errno != EINPROGRESS && errno != EAGAIN) {
      return Status(Code::kSandboxUnavailable, fmt::format("sandboxd at {} is not reachable: {}",
                                                           a.ToString(), strerror(errno)));
    }
    RETURN_IF_ERROR(Wait(fd.get(), POLLOUT, deadline, "connect"));
    int err = 0;
    socklen_t el = sizeof err;
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &el);
    if (err != 0) {
      return Status(Code::kSandboxUnavailable, fmt::format("sandboxd at {} is not reachable: {}",
                                                           a.ToString(), strerror(err)));
    }
  }
  return fd;
}

}  // namespace

StatusOr<HttpClient> HttpClient::Create(std::string_view url) {
  HttpClient c;
  c.url_ = std::string(url);
  if (url.substr(0, 5) == "unix:") {
    ASSIGN_OR_RETURN(c.address_, ParseListenAddress(url));
    c.host_header_ = "localhost";
    return c;
  }
  if (url.substr(0, 7) != "http://") {
    return InvalidArgument(
        fmt::format("server URL '{}': expected unix:/PATH or http://HOST:PORT", url));
  }
  std::string_view rest = url.substr(7);
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find('/') != std::string_view::npos) {
    return InvalidArgument(fmt::format("server URL '{}': no path after HOST:PORT", url));
  }
  std::string hostport(rest);
  if (hostport.substr(0, 10) == "localhost:") hostport = "127.0.0.1" + hostport.substr(9);
  auto a = ParseListenAddress(hostport);
  if (!a.ok() || a->kind != ListenAddress::Kind::kTcp) {
    return InvalidArgument(fmt::format("server URL '{}': expected http://IP:PORT", url));
  }
  c.address_ = *a;
  c.host_header_ = std::string(rest);
  return c;
}

StatusOr<ParsedResponse> HttpClient::Do(std::string_view method, std::string_view path,
                                        const std::vector<HttpHeader>& headers,
                                        std::string_view body, double timeout_s) const {
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout_s));
  ASSIGN_OR_RETURN(host::UniqueFd fd, Connect(address_, deadline));
  std::string out = fmt::format("{} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n", method, path,
                                host_header_);
  for (const auto& h : headers) out += fmt::format("{}: {}\r\n", h.name, h.value);
  if (!body.empty() || method == "POST" || method == "PUT") {
    out += fmt::format("Content-Type: application/json\r\nContent-Length: {}\r\n", body.size());
  }
  out += "\r\n";
  out.append(body);
  std::string_view pending(out);
  std::string in;
  bool eof = false;
  // Write and read together: the server may answer (e.g. 401 or 413) before the body is sent.
  while (true) {
    if (!pending.empty()) {
      ssize_t n = send(fd.get(), pending.data(), pending.size(), MSG_NOSIGNAL);
      if (n > 0) {
        pending.remove_prefix(static_cast<size_t>(n));
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        pending = {};  // the server stopped reading; its answer may still be there
      }
    }
    char buf[64 * 1024];
    ssize_t r = recv(fd.get(), buf, sizeof buf, 0);
    if (r > 0) {
      in.append(buf, static_cast<size_t>(r));
    } else if (r == 0) {
      eof = true;
    } else if (errno != EAGAIN && errno != EINTR) {
      if (in.empty()) {
        return Status(Code::kSandboxUnavailable, fmt::format("sandboxd at {}: connection lost: {}",
                                                             address_.ToString(), strerror(errno)));
      }
      eof = true;
    }
    if (r > 0 || eof) {
      ResponseOutcome o = ParseResponse(in, eof, kMaxResponseBody);
      if (o.kind == ResponseOutcome::Kind::kComplete) return std::move(o.response);
      if (o.kind == ResponseOutcome::Kind::kError) {
        return Status(Code::kInternal,
                      fmt::format("sandboxd at {}: {}", address_.ToString(), o.message));
      }
      if (r > 0) continue;
    }
    RETURN_IF_ERROR(Wait(fd.get(), static_cast<short>(pending.empty() ? POLLIN : POLLIN | POLLOUT),
                         deadline, fmt::format("{} {}", method, path)));
  }
}

}  // namespace sbx::api
