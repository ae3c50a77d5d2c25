// sbx::http::Call and the endpoint syntax (sbx/http_client.h).
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>

#include "host/fd.h"
#include "sbx/ascii.h"
#include "sbx/http_client.h"

namespace sbx::http {
namespace {

using Clock = std::chrono::steady_clock;

// host::UniqueFd is header-only: this module still links nothing but sbx_common.
using Socket = host::UniqueFd;

struct Deadline {
  Clock::time_point at;
  const std::function<bool()>* interrupted;
};

// Waits for `events` on fd: OK, kTimeout at the deadline, kInternal when interrupted.
Status Wait(int fd, short events, const Deadline& d, std::string_view what) {
  while (true) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(d.at - Clock::now()).count();
    if (left <= 0) return Status(Code::kTimeout, fmt::format("{}: no answer in time", what));
    if (*d.interrupted && (*d.interrupted)()) return Internal(fmt::format("{}: interrupted", what));
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 250)));
    if (n > 0) return Status::Ok();
    if (n < 0 && errno != EINTR) return ErrnoStatus("poll");
  }
}

Status Unreachable(const Endpoint& ep, std::string_view why) {
  return Status(Code::kSandboxUnavailable,
                fmt::format("{} is not reachable: {}", ep.ToString(), why));
}

// A connected non-blocking socket to `addr`, or why not.
StatusOr<Socket> ConnectOne(const Endpoint& ep, int family, const sockaddr* addr, socklen_t len,
                            const Deadline& d) {
  Socket s(::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (s.get() < 0) return ErrnoStatus("socket");
  if (family != AF_UNIX) {
    int one = 1;
    ::setsockopt(s.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  if (::connect(s.get(), addr, len) == 0) return s;
  if (errno != EINPROGRESS && errno != EAGAIN) return Unreachable(ep, strerror(errno));
  RETURN_IF_ERROR(Wait(s.get(), POLLOUT, d, fmt::format("connecting to {}", ep.ToString())));
  int err = 0;
  socklen_t el = sizeof err;
  ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &el);
  if (err != 0) return Unreachable(ep, strerror(err));
  return s;
}

StatusOr<Socket> Connect(const Endpoint& ep, const Deadline& d) {
  if (ep.unix_socket) {
    sockaddr_un su{};
    su.sun_family = AF_UNIX;
    if (ep.socket_path.size() >= sizeof su.sun_path) {
      return InvalidArgument(fmt::format("unix socket path too long: {}", ep.socket_path));
    }
    std::memcpy(su.sun_path, ep.socket_path.c_str(), ep.socket_path.size() + 1);
    return ConnectOne(ep, AF_UNIX, reinterpret_cast<sockaddr*>(&su), sizeof su, d);
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port = std::to_string(ep.port);
  if (int rc = ::getaddrinfo(ep.host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return Unreachable(ep, gai_strerror(rc));
  }
  Status last = Unreachable(ep, "no address");
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    auto s = ConnectOne(ep, ai->ai_family, ai->ai_addr, ai->ai_addrlen, d);
    if (s.ok()) {
      ::freeaddrinfo(res);
      return s;
    }
    last = s.status();
    if (last.code() == Code::kTimeout || last.code() == Code::kInternal) break;
  }
  ::freeaddrinfo(res);
  return last;
}

std::string HostHeader(const Endpoint& ep) {
  if (ep.unix_socket) return "localhost";
  bool v6 = ep.host.find(':') != std::string::npos;
  std::string host = v6 ? "[" + ep.host + "]" : ep.host;
  return ep.port == 80 ? host : fmt::format("{}:{}", host, ep.port);
}

}  // namespace

std::string Endpoint::ToString() const {
  if (unix_socket) return "unix:" + socket_path;
  bool v6 = host.find(':') != std::string::npos;
  return fmt::format("http://{}:{}{}", v6 ? "[" + host + "]" : host, port, base_path);
}

StatusOr<Endpoint> ParseEndpoint(std::string_view url) {
  Endpoint ep;
  auto bad = [&](std::string_view why) {
    return InvalidArgument(fmt::format(
        "'{}': {} (expected unix:/PATH, http://HOST[:PORT][/base] or http://[IPv6]:PORT)", url,
        why));
  };
  if (url.substr(0, 5) == "unix:") {
    std::string_view path = url.substr(5);
    if (path.substr(0, 2) == "//") path.remove_prefix(2);
    if (path.empty() || path[0] != '/') return bad("a unix socket needs an absolute path");
    ep.unix_socket = true;
    ep.socket_path = std::string(path);
    return ep;
  }
  if (url.substr(0, 7) != "http://") return bad("not a unix: or http:// address");
  std::string_view rest = url.substr(7);
  size_t slash = rest.find('/');
  std::string_view hostport = rest.substr(0, slash);
  if (slash != std::string_view::npos) ep.base_path = std::string(rest.substr(slash));
  while (!ep.base_path.empty() && ep.base_path.back() == '/') ep.base_path.pop_back();
  std::string_view port_text;
  if (!hostport.empty() && hostport[0] == '[') {
    size_t close = hostport.find(']');
    if (close == std::string_view::npos) return bad("unterminated [");
    ep.host = std::string(hostport.substr(1, close - 1));
    std::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return bad("junk after ]");
      port_text = after.substr(1);
      if (port_text.empty()) return bad("empty port");
    }
  } else {
    size_t colon = hostport.rfind(':');
    ep.host = std::string(hostport.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = hostport.substr(colon + 1);
      if (port_text.empty()) return bad("empty port");
    }
  }
  if (ep.host.empty()) return bad("no host");
  for (char c : ep.host) {
    if (c <= ' ' || c == '@' || c == '/' || c == '?' || c == '#' || c == 0x7f)
      return bad("a host name holds no such character");
  }
  if (!port_text.empty()) {
    int port = 0;
    auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || p != port_text.data() + port_text.size() || port < 1 ||
        port > 65535) {
      return bad(fmt::format("bad port '{}'", port_text));
    }
    ep.port = port;
  }
  return ep;
}

StatusOr<Response> Call(const Endpoint& ep, const Request& req, const CallOptions& options) {
  Deadline d{Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(options.timeout_s)),
             &options.interrupted};
  const std::string what = fmt::format("{} {}{}{}", req.method, ep.ToString(), req.path,
                                       options.who.empty() ? "" : " (" + options.who + ")");
  ASSIGN_OR_RETURN(Socket sock, Connect(ep, d));
  std::string out = fmt::format("{} {}{} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
                                req.method, ep.base_path, req.path, HostHeader(ep));
  for (const auto& h : req.headers) out += fmt::format("{}: {}\r\n", h.name, h.value);
  if ((!req.body.empty() || req.method == "POST" || req.method == "PUT") &&
      !HasFieldNamed(req.headers, "content-length")) {
    out += fmt::format("Content-Length: {}\r\n", req.body.size());
  }
  out += "\r\n";
  out += req.body;
  std::string_view pending(out);
  std::string in;
  bool eof = false;
  // Write and read together: the server may answer (401, 413) before it has read the body;
  // once it stops reading, what it answered is still to be read.
  while (true) {
    if (!pending.empty()) {
      ssize_t n = ::send(sock.get(), pending.data(), pending.size(), MSG_NOSIGNAL);
      if (n > 0) {
        pending.remove_prefix(static_cast<size_t>(n));
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        pending = {};
      }
    }
    char buf[64 * 1024];
    ssize_t r = ::recv(sock.get(), buf, sizeof buf, 0);
    if (r > 0) {
      in.append(buf, static_cast<size_t>(r));
    } else if (r == 0) {
      eof = true;
    } else if (errno != EAGAIN && errno != EINTR) {
      if (in.empty()) return Unreachable(ep, fmt::format("connection lost: {}", strerror(errno)));
      eof = true;
    }
    if (r > 0 || eof) {
      ResponseOutcome o = ParseResponse(in, eof, options.max_body_bytes);
      if (o.kind == ResponseOutcome::Kind::kComplete) return std::move(o.response);
      if (o.kind == ResponseOutcome::Kind::kError) {
        if (eof && in.empty()) return Unreachable(ep, "the connection closed without an answer");
        return Internal(fmt::format("{}: malformed response: {}", what, o.message));
      }
      if (r > 0) continue;
    }
    RETURN_IF_ERROR(Wait(sock.get(),
                         static_cast<short>(pending.empty() ? POLLIN : POLLIN | POLLOUT), d, what));
  }
}

}  // namespace sbx::http
