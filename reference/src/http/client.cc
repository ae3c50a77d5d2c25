// sbx::http::Call and the endpoint syntax (sbx/http_client.h).
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <dlfcn.h>
#include <limits.h>
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

#include <filesystem>
#include <memory>
#include <mutex>

#include "host/fd.h"
#include "http/tls_session.h"
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
  return ep.port == (ep.tls ? 443 : 80) ? host : fmt::format("{}:{}", host, ep.port);
}

// The TLS options against the endpoint: trust for https, nothing for the others.
Status CheckTls(const Endpoint& ep, const TlsOptions& t) {
  if (!ep.tls) {
    if (!t.empty())
      return InvalidArgument(fmt::format(
          "{}: TLS options given for an endpoint that is not https://", ep.ToString()));
    return Status::Ok();
  }
  if (t.ca_file.empty() && t.pin_sha256.empty()) {
    return InvalidArgument(fmt::format(
        "{}: no trust for the server's certificate: give a CA file or a SHA-256 pin (unverified "
        "TLS is refused)",
        ep.ToString()));
  }
  if (t.client_cert_file.empty() != t.client_key_file.empty())
    return InvalidArgument(fmt::format("{}: a client certificate needs both its file and its key",
                                       ep.ToString()));
  if (!t.pin_sha256.empty()) RETURN_IF_ERROR(NormalizePinSha256(t.pin_sha256).status());
  return Status::Ok();
}

// libsbx-tls.so's entry, loaded once (http/tls_session.h): from ../lib beside this binary, else
// by the loader's search path, into *out. kUnsupported when it is nowhere.
Status LoadTls(TlsOpenFn* out) {
  static std::mutex mu;
  static TlsOpenFn open = nullptr;
  static std::string error;
  std::lock_guard lock(mu);
  *out = open;
  if (open != nullptr) return Status::Ok();
  if (!error.empty()) return Unsupported(error);
  std::vector<std::string> tried;
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    tried.push_back(
        (std::filesystem::path(self).parent_path().parent_path() / "lib" / kTlsModuleFileName)
            .string());
  }
  tried.push_back(kTlsModuleFileName);
  std::string why;
  for (const std::string& path : tried) {
    // Never dlclose'd: sessions may be open in other threads.
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      why += fmt::format("{}{}", why.empty() ? "" : "; ", ::dlerror());
      continue;
    }
    open = reinterpret_cast<TlsOpenFn>(::dlsym(handle, kTlsOpenSymbol));
    *out = open;
    if (open != nullptr) return Status::Ok();
    why += fmt::format("{}{} has no {}", why.empty() ? "" : "; ", path, kTlsOpenSymbol);
  }
  error = fmt::format("https needs {} (built beside the binaries, in ../lib): {}",
                      kTlsModuleFileName, why);
  return Unsupported(error);
}

// One connection: a plain socket, or TLS over it. Send and Recv return >0 bytes moved, 0 at the
// peer's end of stream (Recv), -1 "try again when the socket is ready", -2 failed (error()).
class Transport {
 public:
  Transport(Socket sock, const Endpoint& ep) : sock_(std::move(sock)), ep_(&ep) {}

  // Makes this connection TLS: handshake within the deadline, then the pin.
  Status StartTls(const TlsOptions& t, const Deadline& d) {
    TlsOpenFn open = nullptr;
    RETURN_IF_ERROR(LoadTls(&open));
    TlsOptions normal = t;
    if (!t.pin_sha256.empty()) {
      ASSIGN_OR_RETURN(normal.pin_sha256, NormalizePinSha256(t.pin_sha256));
    }
    const std::string name = ep_->ToString();
    Status error;
    tls_.reset(open(sock_.get(), &ep_->host, &name, &normal, &error));
    if (!tls_) return error;
    const std::string what = fmt::format("TLS handshake with {}", name);
    while (true) {
      short wait_for = 0;
      RETURN_IF_ERROR(tls_->Handshake(&wait_for));
      if (wait_for == 0) return Status::Ok();
      RETURN_IF_ERROR(Wait(sock_.get(), wait_for, d, what));
    }
  }

  ssize_t Send(std::string_view data) {
    send_wants_read_ = false;
    if (tls_) return tls_->Send(data, &send_wants_read_);
    ssize_t n = ::send(sock_.get(), data.data(), data.size(), MSG_NOSIGNAL);
    if (n >= 0) return n;
    if (errno == EAGAIN || errno == EINTR) return -1;
    error_ = Unreachable(*ep_, fmt::format("connection lost: {}", strerror(errno)));
    return -2;
  }

  ssize_t Recv(char* buf, size_t len) {
    recv_wants_write_ = false;
    if (tls_) return tls_->Recv(buf, len, &recv_wants_write_);
    ssize_t n = ::recv(sock_.get(), buf, len, 0);
    if (n >= 0) return n;
    if (errno == EAGAIN || errno == EINTR) return -1;
    error_ = Unreachable(*ep_, fmt::format("connection lost: {}", strerror(errno)));
    return -2;
  }

  // The events to wait for: POLLIN always (an answer may come at any time), POLLOUT when
  // there is something to send (unless TLS must read before it can write) or a TLS read must
  // write first.
  short Events(bool pending) const {
    bool out = (pending && !send_wants_read_) || recv_wants_write_;
    return static_cast<short>(out ? POLLIN | POLLOUT : POLLIN);
  }

  bool tls() const { return tls_ != nullptr; }
  int fd() const { return sock_.get(); }
  const Status& error() const { return tls_ ? tls_->error() : error_; }

 private:
  Socket sock_;
  const Endpoint* ep_;
  std::unique_ptr<TlsSession> tls_;  // destroyed before the socket it uses
  bool send_wants_read_ = false, recv_wants_write_ = false;
  Status error_;
};

}  // namespace

std::string Endpoint::ToString() const {
  if (unix_socket) return "unix:" + socket_path;
  bool v6 = host.find(':') != std::string::npos;
  return fmt::format("{}://{}:{}{}", tls ? "https" : "http", v6 ? "[" + host + "]" : host, port,
                     base_path);
}

StatusOr<std::string> NormalizePinSha256(std::string_view pin) {
  std::string out;
  for (char c : pin) {
    if (c == ':') continue;
    char l = static_cast<char>(c >= 'A' && c <= 'F' ? c - 'A' + 'a' : c);
    if (!((l >= '0' && l <= '9') || (l >= 'a' && l <= 'f')))
      return InvalidArgument("pin_sha256: expected 64 hex digits (colons allowed)");
    out += l;
  }
  if (out.size() != 64)
    return InvalidArgument(
        fmt::format("pin_sha256: expected 64 hex digits (a SHA-256), got {}", out.size()));
  return out;
}

StatusOr<Endpoint> ParseEndpoint(std::string_view url) {
  Endpoint ep;
  auto bad = [&](std::string_view why) {
    return InvalidArgument(fmt::format(
        "'{}': {} (expected unix:/PATH, http[s]://HOST[:PORT][/base] or http[s]://[IPv6]:PORT)",
        url,
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
  std::string_view rest;
  if (url.substr(0, 7) == "http://") {
    rest = url.substr(7);
  } else if (url.substr(0, 8) == "https://") {
    rest = url.substr(8);
    ep.tls = true;
    ep.port = 443;
  } else {
    return bad("not a unix:, http:// or https:// address");
  }
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
  RETURN_IF_ERROR(CheckTls(ep, options.tls));
  ASSIGN_OR_RETURN(Socket sock, Connect(ep, d));
  Transport conn(std::move(sock), ep);
  if (ep.tls) RETURN_IF_ERROR(conn.StartTls(options.tls, d));
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
      ssize_t n = conn.Send(pending);
      if (n > 0) {
        pending.remove_prefix(static_cast<size_t>(n));
      } else if (n == -2) {
        // A TLS failure (a refused client certificate comes as an alert here) is the answer;
        // a plain socket may still hold what the server said before it stopped reading.
        if (conn.tls() && in.empty()) return conn.error();
        pending = {};
      }
    }
    char buf[64 * 1024];
    ssize_t r = conn.Recv(buf, sizeof buf);
    if (r > 0) {
      in.append(buf, static_cast<size_t>(r));
    } else if (r == 0) {
      eof = true;
    } else if (r == -2) {
      if (in.empty()) return conn.error();
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
    RETURN_IF_ERROR(Wait(conn.fd(), conn.Events(!pending.empty()), d, what));
  }
}

}  // namespace sbx::http
