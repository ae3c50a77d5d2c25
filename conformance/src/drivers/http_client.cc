#include "drivers/http_client.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>

#include "common/subprocess.h"

namespace sandcheck {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxResponse = 64 << 20;

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return std::string(s);
}

// Waits for `events` on fd until the deadline.
sbx::Status WaitFor(int fd, short events, Clock::time_point deadline, const std::string& what) {
  while (true) {
    double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (left <= 0) return sbx::Status(sbx::Code::kTimeout, fmt::format("{}: timed out", what));
    if (Interrupted()) return sbx::Internal("interrupted");
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, static_cast<int>(std::min(left, 0.25) * 1000) + 1);
    if (rc > 0) return sbx::Status::Ok();
    if (rc < 0 && errno != EINTR) return sbx::ErrnoStatus(what);
  }
}

sbx::StatusOr<int> Connect(const HttpEndpoint& ep, Clock::time_point deadline) {
  std::string what = fmt::format("connecting to {}", ep.ToString());
  if (ep.unix_socket) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (ep.socket_path.size() >= sizeof addr.sun_path)
      return sbx::InvalidArgument("unix socket path too long");
    std::memcpy(addr.sun_path, ep.socket_path.c_str(), ep.socket_path.size() + 1);
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return sbx::ErrnoStatus("socket");
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 &&
        errno != EINPROGRESS && errno != EAGAIN) {
      int err = errno;
      ::close(fd);
      return sbx::ErrnoStatus(what, err);
    }
    return fd;
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port = std::to_string(ep.port);
  if (int rc = ::getaddrinfo(ep.host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return sbx::Internal(fmt::format("{}: {}", what, gai_strerror(rc)));
  }
  sbx::Status last = sbx::Internal(what + ": no address");
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      ::freeaddrinfo(res);
      return fd;
    }
    if (errno == EINPROGRESS) {
      sbx::Status st = WaitFor(fd, POLLOUT, deadline, what);
      int soerr = 0;
      socklen_t len = sizeof soerr;
      if (st.ok()) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
      if (st.ok() && soerr == 0) {
        ::freeaddrinfo(res);
        return fd;
      }
      last = st.ok() ? sbx::ErrnoStatus(what, soerr) : st;
    } else {
      last = sbx::ErrnoStatus(what);
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return last;
}

sbx::StatusOr<std::string> DecodeChunked(std::string_view in) {
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t eol = in.find("\r\n", pos);
    if (eol == std::string_view::npos) return sbx::InvalidArgument("truncated chunked body");
    std::string_view size_text = in.substr(pos, eol - pos);
    if (auto semi = size_text.find(';'); semi != std::string_view::npos)
      size_text = size_text.substr(0, semi);
    size_t size = 0;
    auto [p, ec] = std::from_chars(size_text.data(), size_text.data() + size_text.size(), size, 16);
    if (ec != std::errc() || p == size_text.data()) return sbx::InvalidArgument("bad chunk size");
    pos = eol + 2;
    if (size == 0) return out;
    if (pos + size + 2 > in.size()) return sbx::InvalidArgument("truncated chunk");
    out.append(in.substr(pos, size));
    pos += size + 2;
  }
}

// True when `raw` holds a whole response with a known length (Content-Length or chunked).
bool Complete(const std::string& raw) {
  size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) return false;
  std::string head = Lower(raw.substr(0, head_end));
  size_t body = raw.size() - head_end - 4;
  if (head.find("\r\ntransfer-encoding:") != std::string::npos &&
      head.find("chunked") != std::string::npos) {
    return raw.size() >= 5 && raw.compare(raw.size() - 5, 5, "0\r\n\r\n") == 0 &&
           DecodeChunked(std::string_view(raw).substr(head_end + 4)).ok();
  }
  size_t cl = head.find("\r\ncontent-length:");
  if (cl == std::string::npos) return false;
  size_t len = std::strtoull(head.c_str() + cl + 17, nullptr, 10);
  return body >= len;
}

}  // namespace

std::string HttpEndpoint::ToString() const {
  return unix_socket ? "unix:" + socket_path : fmt::format("http://{}:{}{}", host, port, base_path);
}

sbx::StatusOr<HttpEndpoint> ParseEndpoint(const std::string& spec) {
  HttpEndpoint ep;
  if (spec.rfind("unix:", 0) == 0) {
    ep.unix_socket = true;
    ep.socket_path = spec.substr(5);
    if (ep.socket_path.rfind("//", 0) == 0) ep.socket_path = ep.socket_path.substr(2);
    if (ep.socket_path.empty()) return sbx::InvalidArgument("unix:PATH needs a path");
    return ep;
  }
  if (spec.rfind("http://", 0) != 0)
    return sbx::InvalidArgument(fmt::format("'{}' is not http://HOST:PORT", spec));
  std::string rest = spec.substr(7);
  size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  if (slash != std::string::npos) ep.base_path = rest.substr(slash);
  while (!ep.base_path.empty() && ep.base_path.back() == '/') ep.base_path.pop_back();
  std::string port_text;
  if (!hostport.empty() && hostport[0] == '[') {
    size_t close = hostport.find(']');
    if (close == std::string::npos)
      return sbx::InvalidArgument(fmt::format("'{}': unterminated [", spec));
    ep.host = hostport.substr(1, close - 1);
    if (close + 1 < hostport.size() && hostport[close + 1] == ':')
      port_text = hostport.substr(close + 2);
  } else {
    size_t colon = hostport.rfind(':');
    ep.host = hostport.substr(0, colon);
    if (colon != std::string::npos) port_text = hostport.substr(colon + 1);
  }
  if (ep.host.empty()) return sbx::InvalidArgument(fmt::format("'{}': no host", spec));
  if (!port_text.empty()) {
    int port = 0;
    auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || p != port_text.data() + port_text.size() || port < 1 || port > 65535) {
      return sbx::InvalidArgument(fmt::format("'{}': bad port '{}'", spec, port_text));
    }
    ep.port = port;
  }
  return ep;
}

sbx::StatusOr<HttpResponse> ParseHttpResponse(const std::string& raw) {
  size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) return sbx::InvalidArgument("no complete response head");
  std::string_view head(raw.data(), head_end);
  size_t eol = head.find("\r\n");
  std::string_view status_line = head.substr(0, eol);
  HttpResponse r;
  if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12) {
    return sbx::InvalidArgument(fmt::format("bad status line \"{}\"", status_line.substr(0, 80)));
  }
  auto [p, ec] = std::from_chars(status_line.data() + 9, status_line.data() + 12, r.status);
  if (ec != std::errc() || r.status < 100 || r.status > 599)
    return sbx::InvalidArgument("bad status code");
  r.reason = Trim(status_line.substr(12));
  size_t pos = eol == std::string_view::npos ? head.size() : eol + 2;
  while (pos < head.size()) {
    size_t e = head.find("\r\n", pos);
    std::string_view line =
        head.substr(pos, e == std::string_view::npos ? std::string_view::npos : e - pos);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) return sbx::InvalidArgument("bad header line");
    r.headers[Lower(std::string(line.substr(0, colon)))] = Trim(line.substr(colon + 1));
    if (e == std::string_view::npos) break;
    pos = e + 2;
  }
  std::string_view body(raw.data() + head_end + 4, raw.size() - head_end - 4);
  auto te = r.headers.find("transfer-encoding");
  if (te != r.headers.end() && Lower(te->second).find("chunked") != std::string::npos) {
    ASSIGN_OR_RETURN(r.body, DecodeChunked(body));
  } else if (r.headers.count("content-length")) {
    size_t len = 0;
    const std::string& cl = r.headers.at("content-length");
    auto [q, ec2] = std::from_chars(cl.data(), cl.data() + cl.size(), len);
    if (ec2 != std::errc()) return sbx::InvalidArgument("bad Content-Length");
    if (body.size() < len) return sbx::InvalidArgument("body shorter than Content-Length");
    r.body = std::string(body.substr(0, len));
  } else {
    r.body = std::string(body);
  }
  return r;
}

sbx::StatusOr<HttpResponse> HttpCall(const HttpEndpoint& ep, const HttpRequest& req,
                                     double timeout_s) {
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout_s));
  ASSIGN_OR_RETURN(int fd, Connect(ep, deadline));
  Socket sock(fd);
  std::string host = ep.unix_socket
                         ? "localhost"
                         : (ep.port == 80 ? ep.host : fmt::format("{}:{}", ep.host, ep.port));
  std::string msg =
      fmt::format("{} {}{} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nUser-Agent: sandcheck\r\n",
                  req.method, ep.base_path, req.path, host);
  for (const auto& [k, v] : req.headers) msg += fmt::format("{}: {}\r\n", k, v);
  if (!req.body.empty() || req.method == "POST" || req.method == "PUT") {
    msg += fmt::format("Content-Length: {}\r\n", req.body.size());
  }
  msg += "\r\n";
  msg += req.body;
  std::string what = fmt::format("{} {}{}", req.method, ep.ToString(), req.path);
  size_t off = 0;
  while (off < msg.size()) {
    RETURN_IF_ERROR(WaitFor(fd, POLLOUT, deadline, what));
    ssize_t n = ::send(fd, msg.data() + off, msg.size() - off, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) return sbx::ErrnoStatus(what);
    off += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[65536];
  while (true) {
    RETURN_IF_ERROR(WaitFor(fd, POLLIN, deadline, what));
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) return sbx::ErrnoStatus(what);
    if (n == 0) break;
    raw.append(buf, static_cast<size_t>(n));
    if (raw.size() > kMaxResponse) return sbx::Internal(what + ": response larger than 64 MiB");
    if (Complete(raw)) break;  // a server that keeps the connection open despite "close"
  }
  auto r = ParseHttpResponse(raw);
  if (!r.ok())
    return sbx::Internal(fmt::format("{}: malformed response: {}", what, r.status().message()));
  return r;
}

}  // namespace sandcheck
