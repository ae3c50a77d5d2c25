#include "run/sink_fixture.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

namespace sandcheck {
namespace {

struct Endpoint {
  int fd = -1;
  bool tcp = true;
  std::string label;  // "127.0.0.1:P", "[::1]:Q"
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
};

std::string Printable(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return fmt::format("{}:{}", host, ntohs(in->sin_port));
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
  inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
  return fmt::format("[{}]:{}", host, ntohs(in6->sin6_port));
}

// Binds a socket of `type` to `ip`:`port` (0: any free port). -1 with errno on failure.
int BindOne(int family, int type, const std::string& ip, int port, Endpoint* out) {
  int fd = ::socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  if (family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  sockaddr_storage ss{};
  socklen_t len;
  if (family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    in->sin_family = AF_INET;
    in->sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, ip.c_str(), &in->sin_addr);
    len = sizeof *in;
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET6, ip.c_str(), &in6->sin6_addr);
    len = sizeof *in6;
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
      (type == SOCK_STREAM && ::listen(fd, 128) != 0) ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  out->fd = fd;
  out->tcp = type == SOCK_STREAM;
  out->addr = ss;
  out->addr_len = len;
  out->label = Printable(ss);
  return 0;
}

int PortOf(const Endpoint& e) {
  return e.addr.ss_family == AF_INET
             ? ntohs(reinterpret_cast<const sockaddr_in*>(&e.addr)->sin_port)
             : ntohs(reinterpret_cast<const sockaddr_in6*>(&e.addr)->sin6_port);
}

// A tcp and a udp socket on one port of `ip` (the port chosen by the kernel for the tcp one).
bool BindPair(int family, const std::string& ip, Endpoint* tcp, Endpoint* udp) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    if (BindOne(family, SOCK_STREAM, ip, 0, tcp) != 0) return false;
    if (BindOne(family, SOCK_DGRAM, ip, PortOf(*tcp), udp) == 0) return true;
    ::close(tcp->fd);
    tcp->fd = -1;
  }
  return false;
}

}  // namespace

struct SinkFixture::State {
  std::vector<Endpoint> endpoints;
  std::vector<std::string> missing;  // what could not be bound, and why
  mutable std::mutex mu;
  mutable std::vector<std::string> records;
  size_t control = 0;  // records of the positive control (not counted)
  nlohmann::json control_seen = nlohmann::json::array();
  int wake = -1;  // eventfd: stops the thread
  std::thread thread;

  ~State() {
    if (thread.joinable()) {
      uint64_t one = 1;
      if (::write(wake, &one, sizeof one) < 0) { /* the thread polls it; nothing else to do */ }
      thread.join();
    }
    if (wake >= 0) ::close(wake);
    for (auto& e : endpoints) {
      if (e.fd >= 0) ::close(e.fd);
    }
  }

  // Takes in what arrives as it arrives, so that a connection is recorded before its first
  // byte back: whoever gets the sink's banner knows the sink recorded it (a probe through a TLS
  // passthrough waits for it).
  void Run() {
    std::vector<pollfd> fds;
    for (const auto& e : endpoints) fds.push_back({e.fd, POLLIN, 0});
    fds.push_back({wake, POLLIN, 0});
    while (true) {
      int n = ::poll(fds.data(), fds.size(), -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 || fds.back().revents) return;
      std::lock_guard<std::mutex> lock(mu);
      TakeIn();
    }
  }

  // Takes in what the kernel holds for every endpoint, under mu.
  void TakeIn() const {
    for (const auto& e : endpoints) {
      while (true) {
        sockaddr_storage peer{};
        socklen_t len = sizeof peer;
        if (e.tcp) {
          int c = ::accept4(e.fd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
          if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            break;
          }
          records.push_back(fmt::format("tcp {} from {}", e.label, Printable(peer)));
          // Recorded first, then the banner (non-blocking: a full buffer loses it, not the
          // record), then closed.
          if (::send(c, "sandcheck-sink\n", 15, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
          }
          ::close(c);
        } else {
          char buf[2048];
          ssize_t n = ::recvfrom(e.fd, buf, sizeof buf, MSG_DONTWAIT,
                                 reinterpret_cast<sockaddr*>(&peer), &len);
          if (n < 0) {
            if (errno == EINTR) continue;
            break;
          }
          records.push_back(fmt::format("udp {} from {}, {} bytes", e.label, Printable(peer), n));
        }
      }
    }
  }
};

sbx::StatusOr<SinkFixture> SinkFixture::Start() {
  auto st = std::make_shared<State>();
  SinkFixture f;
  Endpoint t4, u4, t6, u6, tls, dns;
  if (!BindPair(AF_INET, "127.0.0.1", &t4, &u4)) {
    return sbx::Status(sbx::Code::kUnsupported,
                       fmt::format("egress sink: cannot bind tcp and udp on 127.0.0.1: {}",
                                   std::strerror(errno)));
  }
  st->endpoints.push_back(t4);
  st->endpoints.push_back(u4);
  if (BindPair(AF_INET6, "::1", &t6, &u6)) {
    st->endpoints.push_back(t6);
    st->endpoints.push_back(u6);
  } else {
    st->missing.push_back(fmt::format("[::1]: {} (IPv6 not tried)", std::strerror(errno)));
  }
  // The well-known ports on an address of their own, so that they are free on most hosts.
  std::string wk;
  for (int n = 1; n <= 64 && wk.empty(); ++n) {
    std::string ip = fmt::format("127.83.84.{}", n);
    if (BindOne(AF_INET, SOCK_STREAM, ip, 443, &tls) != 0) continue;
    if (BindOne(AF_INET, SOCK_DGRAM, ip, 53, &dns) != 0) {
      ::close(tls.fd);
      tls.fd = -1;
      continue;
    }
    wk = ip;
  }
  if (wk.empty()) {
    wk = "127.83.84.1";
    st->missing.push_back("ports 443/tcp and 53/udp are taken on 127.83.84.1..64: ephemeral ports");
    if (BindOne(AF_INET, SOCK_STREAM, wk, 0, &tls) != 0 ||
        BindOne(AF_INET, SOCK_DGRAM, wk, 0, &dns) != 0) {
      return sbx::Status(sbx::Code::kUnsupported,
                         fmt::format("egress sink: cannot bind on {}: {}", wk,
                                     std::strerror(errno)));
    }
  }
  st->endpoints.push_back(tls);
  st->endpoints.push_back(dns);

  // The positive control: every endpoint must hear the harness itself.
  std::vector<int> clients;
  for (const auto& e : st->endpoints) {
    int c = ::socket(e.addr.ss_family, (e.tcp ? SOCK_STREAM : SOCK_DGRAM) | SOCK_CLOEXEC, 0);
    bool sent = c >= 0 && ::connect(c, reinterpret_cast<const sockaddr*>(&e.addr), e.addr_len) == 0 &&
                (e.tcp || ::send(c, "sandcheck-control", 17, 0) == 17);
    if (c >= 0) clients.push_back(c);
    pollfd p{e.fd, POLLIN, 0};
    if (!sent || ::poll(&p, 1, 2000) != 1) {
      for (int x : clients) ::close(x);
      return sbx::Status(sbx::Code::kUnsupported,
                         fmt::format("egress sink: the positive control did not reach {} {} ({})",
                                     e.tcp ? "tcp" : "udp", e.label,
                                     sent ? "nothing arrived in 2 s" : std::strerror(errno)));
    }
  }
  st->TakeIn();
  for (int x : clients) ::close(x);
  if (st->records.size() != st->endpoints.size()) {
    return sbx::Status(sbx::Code::kUnsupported,
                       fmt::format("egress sink: the positive control made {} record(s) for {} "
                                   "endpoint(s)",
                                   st->records.size(), st->endpoints.size()));
  }
  st->control = st->records.size();
  st->control_seen = st->records;
  st->wake = ::eventfd(0, EFD_CLOEXEC);
  if (st->wake < 0) return sbx::ErrnoStatus("egress sink: eventfd");
  st->thread = std::thread([raw = st.get()] { raw->Run(); });

  const std::string name = kProbeName;
  for (const auto& e : st->endpoints) {
    std::string kind = e.tcp ? "tcp" : "udp";
    std::string suffix;
    if (&e == &st->endpoints[st->endpoints.size() - 2]) kind = "tls", suffix = ":" + name;
    if (&e == &st->endpoints.back()) kind = "dns", suffix = ":" + name;
    f.probe_args_ += fmt::format("{}--connect {}:{}{}", f.probe_args_.empty() ? "" : " ", kind,
                                 e.label, suffix);
  }
  f.nc_target_ = fmt::format("127.0.0.1 {}", PortOf(st->endpoints[0]));
  int dns_port = PortOf(st->endpoints.back());
  f.resolver_ = dns_port == 53 ? wk : fmt::format("{}:{}", wk, dns_port);
  f.state_ = std::move(st);
  return f;
}

std::string SinkFixture::tcp_address() const { return state_->endpoints.front().label; }

nlohmann::json SinkFixture::describe() const {
  nlohmann::json eps = nlohmann::json::array();
  for (const auto& e : state_->endpoints) eps.push_back((e.tcp ? "tcp " : "udp ") + e.label);
  return {{"endpoints", eps},
          {"positive_control", state_->control_seen},
          {"not_listening", state_->missing},
          {"probe_args", probe_args_}};
}

size_t SinkFixture::LogCount() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->TakeIn();
  return state_->records.size() - state_->control;
}

std::vector<std::string> SinkFixture::LogSince(size_t since) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->TakeIn();
  size_t from = state_->control + since;
  if (from >= state_->records.size()) return {};
  return {state_->records.begin() + static_cast<std::ptrdiff_t>(from), state_->records.end()};
}

}  // namespace sandcheck
