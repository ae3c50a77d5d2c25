#include "net/dns_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <string>

#include "net/dns_message.h"
#include "net/sock_util.h"

namespace sbx::net {
namespace {

constexpr auto kTcpIdle = std::chrono::seconds(10);

std::string QtypeName(uint16_t t) {
  switch (t) {
    case 1:
      return "A";
    case 28:
      return "AAAA";
    case 5:
      return "CNAME";
    case 15:
      return "MX";
    case 16:
      return "TXT";
    case 33:
      return "SRV";
    case 255:
      return "ANY";
    default:
      return fmt::format("TYPE{}", t);
  }
}

// Answers one query from `src` and logs the decision.
DnsOutcome Answer(GatewayShared& shared, uint32_t src, std::string_view query, bool over_tcp) {
  auto ctx = shared.table.Find(src);
  // SECURITY: an address with no attached sandbox (a pooled or released namespace) has the
  // empty policy: every name is NXDOMAIN.
  DnsOutcome out = AnswerDnsQuery(
      query, [&](std::string_view name) { return ctx && ctx->policy.NameAllowed(name); },
      shared.gateway_addr, over_tcp);
  if (ctx) {
    std::string dest = out.verdict == DnsVerdict::kDrop
                           ? std::string("(malformed)")
                           : fmt::format("{} {}", out.name, QtypeName(out.qtype));
    shared.log.Record(
        ctx->sandbox_id, over_tcp ? "dns-tcp" : "dns", dest,
        out.verdict == DnsVerdict::kNxDomain || out.verdict == DnsVerdict::kDrop ? "" : out.name,
        DnsVerdictName(out.verdict),
        out.verdict == DnsVerdict::kNxDomain ? "name not in policy" : "");
  }
  return out;
}

void ServeTcpConnection(std::shared_ptr<GatewayShared> shared, host::UniqueFd fd, uint32_t peer,
                        std::shared_ptr<const SandboxContext> ctx) {
  // A connection carries any number of length-prefixed messages (RFC 7766) until idle, or
  // until the sandbox is released (cancel_fd) or the service stops (which cancels all).
  int stop_fd = ctx->cancel_fd.get();
  while (true) {
    std::string len_buf;
    auto deadline = Clock::now() + kTcpIdle;
    if (ReadExact(fd.get(), stop_fd, deadline, 2, &len_buf) != IoResult::kOk) break;
    size_t len = (static_cast<uint8_t>(len_buf[0]) << 8) | static_cast<uint8_t>(len_buf[1]);
    std::string msg;
    if (len == 0 || ReadExact(fd.get(), stop_fd, deadline, len, &msg) != IoResult::kOk) {
      break;
    }
    DnsOutcome out = Answer(*shared, peer, msg, /*over_tcp=*/true);
    if (out.verdict == DnsVerdict::kDrop) break;  // malformed: close, say nothing
    std::string reply;
    reply.push_back(static_cast<char>(out.reply.size() >> 8));
    reply.push_back(static_cast<char>(out.reply.size() & 0xff));
    reply.append(out.reply.begin(), out.reply.end());
    if (WriteAll(fd.get(), stop_fd, deadline, reply) != IoResult::kOk) break;
  }
  fd.Reset();
  shared->dns_tcp_slots.Release(peer);
}

}  // namespace

DnsServer::DnsServer(host::UniqueFd udp, host::UniqueFd tcp_listener,
                     std::shared_ptr<GatewayShared> shared)
    : udp_(std::move(udp)), tcp_(std::move(tcp_listener)), shared_(std::move(shared)) {
  udp_thread_ = std::thread([this] { ServeUdp(); });
  tcp_thread_ = std::thread([this] { AcceptTcp(); });
}

DnsServer::~DnsServer() {
  shared_->Stop();
  shared_->table.CancelAll();
  if (udp_thread_.joinable()) udp_thread_.join();
  if (tcp_thread_.joinable()) tcp_thread_.join();
  shared_->dns_tcp_slots.WaitIdle(std::chrono::seconds(5));
}

void DnsServer::ServeUdp() {
  std::string buf(65536, '\0');
  while (true) {
    pollfd p[2] = {{udp_.get(), POLLIN, 0}, {shared_->stop_fd.get(), POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;
    sockaddr_in src{};
    socklen_t slen = sizeof(src);
    ssize_t n = recvfrom(udp_.get(), buf.data(), buf.size(), MSG_DONTWAIT,
                         reinterpret_cast<sockaddr*>(&src), &slen);
    if (n <= 0 || src.sin_family != AF_INET) continue;
    DnsOutcome out = Answer(*shared_, src.sin_addr.s_addr,
                            std::string_view(buf.data(), static_cast<size_t>(n)), false);
    if (out.verdict == DnsVerdict::kDrop) continue;
    sendto(udp_.get(), out.reply.data(), out.reply.size(), MSG_DONTWAIT,
           reinterpret_cast<sockaddr*>(&src), slen);
  }
}

void DnsServer::AcceptTcp() {
  while (true) {
    pollfd p[2] = {{tcp_.get(), POLLIN, 0}, {shared_->stop_fd.get(), POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;
    sockaddr_in peer{};
    socklen_t plen = sizeof(peer);
    host::UniqueFd fd(accept4(tcp_.get(), reinterpret_cast<sockaddr*>(&peer), &plen, SOCK_CLOEXEC));
    if (!fd.valid()) continue;
    uint32_t addr = peer.sin_addr.s_addr;
    auto ctx = shared_->table.Find(addr);  // none: not an attached sandbox, nothing to answer
    if (!ctx || !shared_->dns_tcp_slots.TryAcquire(addr)) {
      ResetAndClose(std::move(fd));
      continue;
    }
    std::thread(ServeTcpConnection, shared_, std::move(fd), addr, std::move(ctx)).detach();
  }
}

}  // namespace sbx::net
