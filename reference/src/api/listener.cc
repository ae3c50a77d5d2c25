#include "api/listener.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <charconv>
#include <filesystem>

namespace sbx::api {

std::string ListenAddress::ToString() const {
  if (kind == Kind::kUnix) return "unix:" + path;
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

StatusOr<ListenAddress> ParseListenAddress(std::string_view text) {
  ListenAddress a;
  if (text.substr(0, 5) == "unix:") text.remove_prefix(5);
  if (!text.empty() && text[0] == '/') {
    if (text.size() >= sizeof(sockaddr_un{}.sun_path) - 16) {
      return InvalidArgument(fmt::format("socket path '{}' is too long", text));
    }
    a.kind = ListenAddress::Kind::kUnix;
    a.path = std::string(text);
    return a;
  }
  a.kind = ListenAddress::Kind::kTcp;
  std::string_view host, port;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return InvalidArgument(fmt::format("listen '{}': expected [IPv6]:PORT", text));
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return InvalidArgument(
          fmt::format("listen '{}': expected unix:/PATH, IPv4:PORT or [IPv6]:PORT", text));
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  int p = -1;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || p < 0 || p > 65535) {
    return InvalidArgument(fmt::format("listen '{}': bad port", text));
  }
  a.host = std::string(host);
  a.port = p;
  in_addr v4{};
  in6_addr v6{};
  if (inet_pton(AF_INET, a.host.c_str(), &v4) != 1 &&
      inet_pton(AF_INET6, a.host.c_str(), &v6) != 1) {
    return InvalidArgument(fmt::format("listen '{}': '{}' is not an IP address", text, a.host));
  }
  return a;
}

bool IsLoopback(const ListenAddress& a) {
  if (a.kind == ListenAddress::Kind::kUnix) return true;
  in_addr v4{};
  if (inet_pton(AF_INET, a.host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, a.host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

namespace {

sockaddr_un UnixAddr(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  path.copy(sa.sun_path, sizeof(sa.sun_path) - 1);
  return sa;
}

// Is something answering on this unix socket path?
bool UnixSocketLive(const std::string& path) {
  host::UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return false;
  sockaddr_un sa = UnixAddr(path);
  return connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
}

}  // namespace

StatusOr<Listener> Listener::Open(const ListenAddress& address, int backlog) {
  Listener l;
  l.address_ = address;
  if (address.kind == ListenAddress::Kind::kUnix) {
    struct stat st {};
    if (lstat(address.path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) {
        return InvalidArgument(
            fmt::format("{} exists and is not a socket: not replacing it", address.path));
      }
      if (UnixSocketLive(address.path)) {
        return Status(Code::kAlreadyExists,
                      fmt::format("socket busy: something already answers on {}", address.path));
      }
    }
    std::error_code ec;
    std::filesystem::path parent = std::filesystem::path(address.path).parent_path();
    std::filesystem::create_directories(parent, ec);
    if (ec)
      return Status(Code::kPermissionDenied,
                    fmt::format("creating {}: {}", parent.string(), ec.message()));
    l.fd_.Reset(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!l.fd_.valid()) return ErrnoStatus("socket(AF_UNIX)");
    l.tmp_path_ = fmt::format("{}.{}.tmp", address.path, getpid());
    unlink(l.tmp_path_.c_str());  // our own leftover from a crashed run with the same pid
    sockaddr_un sa = UnixAddr(l.tmp_path_);
    if (bind(l.fd_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      Status s = ErrnoStatus("bind " + l.tmp_path_);
      l.tmp_path_.clear();
      return s;
    }
    // SECURITY: 0660 before the socket gets its public name: callers need the owner's group
    // (and then still a token); nobody else can even connect.
    if (chmod(l.tmp_path_.c_str(), 0660) != 0) return ErrnoStatus("chmod " + l.tmp_path_);
    if (lstat(l.tmp_path_.c_str(), &st) != 0) return ErrnoStatus("stat " + l.tmp_path_);
    l.dev_ = st.st_dev;
    l.ino_ = st.st_ino;
  } else {
    in6_addr v6{};
    bool is_v6 = inet_pton(AF_INET6, address.host.c_str(), &v6) == 1;
    l.fd_.Reset(socket(is_v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!l.fd_.valid()) return ErrnoStatus("socket(AF_INET)");
    int one = 1;
    setsockopt(l.fd_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_storage ss{};
    socklen_t len;
    if (is_v6) {
      auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
      s6->sin6_family = AF_INET6;
      s6->sin6_port = htons(static_cast<uint16_t>(address.port));
      s6->sin6_addr = v6;
      len = sizeof *s6;
    } else {
      auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
      s4->sin_family = AF_INET;
      s4->sin_port = htons(static_cast<uint16_t>(address.port));
      inet_pton(AF_INET, address.host.c_str(), &s4->sin_addr);
      len = sizeof *s4;
    }
    if (bind(l.fd_.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
      if (errno == EADDRINUSE) {
        return Status(Code::kAlreadyExists, fmt::format("address busy: {}", address.ToString()));
      }
      return ErrnoStatus("bind " + address.ToString());
    }
    len = sizeof ss;
    if (getsockname(l.fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      l.address_.port = ntohs(is_v6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                    : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    }
  }
  if (listen(l.fd_.get(), backlog) != 0) return ErrnoStatus("listen " + address.ToString());
  return l;
}

Status Listener::Publish() {
  if (address_.kind != ListenAddress::Kind::kUnix || published_) return Status::Ok();
  if (rename(tmp_path_.c_str(), address_.path.c_str()) != 0)
    return ErrnoStatus("rename to " + address_.path);
  tmp_path_.clear();
  published_ = true;
  return Status::Ok();
}

Listener::Listener(Listener&& o) noexcept
    : fd_(std::move(o.fd_)),
      address_(std::move(o.address_)),
      tmp_path_(std::exchange(o.tmp_path_, "")),
      dev_(o.dev_),
      ino_(o.ino_),
      published_(std::exchange(o.published_, false)) {}

Listener& Listener::operator=(Listener&& o) noexcept {
  if (this != &o) {
    Cleanup();
    fd_ = std::move(o.fd_);
    address_ = std::move(o.address_);
    tmp_path_ = std::exchange(o.tmp_path_, "");
    dev_ = o.dev_;
    ino_ = o.ino_;
    published_ = std::exchange(o.published_, false);
  }
  return *this;
}

Listener::~Listener() { Cleanup(); }

void Listener::Cleanup() {
  if (!tmp_path_.empty()) unlink(tmp_path_.c_str());
  tmp_path_.clear();
  if (published_) {
    // Only our own socket: a successor may already have replaced it.
    struct stat st {};
    if (lstat(address_.path.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) {
      unlink(address_.path.c_str());
    }
    published_ = false;
  }
  fd_.Reset();
}

}  // namespace sbx::api
