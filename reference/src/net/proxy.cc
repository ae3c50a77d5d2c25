#include "net/proxy.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>

#include <cerrno>
#include <string>

#include "net/gateway_decide.h"
#include "net/http_head.h"
#include "net/sock_util.h"
#include "net/tls_sni.h"

namespace sbx::net {
namespace {

// SO_ORIGINAL_DST from <linux/netfilter_ipv4.h> (whose linux/in.h clashes with netinet/in.h).
constexpr int kSoOriginalDst = 80;
constexpr auto kFirstBytesTimeout = std::chrono::seconds(10);
constexpr auto kUpstreamConnectTimeout = std::chrono::seconds(5);
constexpr auto kRelayIdleTimeout = std::chrono::seconds(120);
// HTTP after the client's side has closed (the process may be gone: a full close and a
// half-close look alike here): the answer may still flow, but an upstream silent this long is
// let go, so a dead or never-answering upstream does not hold the relay for kRelayIdleTimeout.
constexpr auto kClosedClientIdleTimeout = std::chrono::seconds(5);
constexpr size_t kRelayBuf = 64 * 1024;

enum class Kind { kHttp, kTls };

// Copies bytes both ways until done. For HTTP only `client_budget` more bytes (the rest of the
// request body) go upstream and anything after is discarded: one request per connection.
// For TLS the relay is a plain full-duplex pipe with half-close passed on.
void Relay(int client, int upstream, int stop_fd, Kind kind, uint64_t client_budget) {
  std::string buf(kRelayBuf, '\0');
  bool client_open = true, upstream_open = true;
  while (upstream_open && (client_open || kind == Kind::kHttp)) {
    pollfd p[3] = {
        {client_open ? client : -1, POLLIN, 0}, {upstream, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    auto idle = client_open ? kRelayIdleTimeout : kClosedClientIdleTimeout;
    int n = poll(p, 3, static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(idle).count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || p[2].revents) return;  // idle timeout, error or shutdown
    if (client_open && p[0].revents) {
      ssize_t r = recv(client, buf.data(), buf.size(), MSG_DONTWAIT);
      if (r < 0 && errno != EAGAIN && errno != EINTR) return;
      if (r == 0) {
        client_open = false;
        if (kind == Kind::kTls) shutdown(upstream, SHUT_WR);
      } else if (r > 0) {
        size_t pass = static_cast<size_t>(r);
        if (kind == Kind::kHttp) {
          pass = static_cast<size_t>(std::min<uint64_t>(client_budget, pass));
          client_budget -= pass;
        }
        auto deadline = Clock::now() + kRelayIdleTimeout;
        if (pass > 0 && WriteAll(upstream, stop_fd, deadline, std::string_view(buf.data(), pass)) !=
                            IoResult::kOk) {
          return;
        }
      }
    }
    if (p[1].revents) {
      ssize_t r = recv(upstream, buf.data(), buf.size(), MSG_DONTWAIT);
      if (r < 0 && errno != EAGAIN && errno != EINTR) return;
      if (r == 0) {
        upstream_open = false;
        shutdown(client, SHUT_WR);
      } else if (r > 0) {
        auto deadline = Clock::now() + kRelayIdleTimeout;
        if (WriteAll(client, stop_fd, deadline,
                     std::string_view(buf.data(), static_cast<size_t>(r))) != IoResult::kOk) {
          return;
        }
      }
    }
  }
  // TLS: wait for the client's side to finish too (it may still be sending close_notify).
  while (kind == Kind::kTls && client_open) {
    pollfd p[2] = {{client, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (poll(p, 2, 5000) <= 0 || p[1].revents) return;
    ssize_t r = recv(client, buf.data(), buf.size(), MSG_DONTWAIT);
    if (r <= 0) return;
    if (WriteAll(upstream, stop_fd, Clock::now() + kRelayIdleTimeout,
                 std::string_view(buf.data(), static_cast<size_t>(r))) != IoResult::kOk) {
      return;
    }
  }
}

// Holds a connection slot; declared first in Connection so that it is released last, after
// every fd of the connection is closed.
struct SlotGuard {
  std::shared_ptr<GatewayShared> shared;
  uint32_t peer;
  ~SlotGuard() { shared->proxy_slots.Release(peer); }
};

class Connection {
 public:
  // `ctx` is the sandbox at the peer's address, looked up when the connection was accepted.
  Connection(std::shared_ptr<GatewayShared> shared, host::UniqueFd client, uint32_t peer,
             std::shared_ptr<const SandboxContext> ctx)
      : slot_{shared, peer},
        shared_(std::move(shared)),
        client_(std::move(client)),
        peer_(peer),
        // Connections of a sandbox end when it is released (cancel_fd is sticky, so a release
        // that came first is seen at the first poll) or at shutdown, which cancels all.
        stop_fd_(ctx->cancel_fd.get()),
        ctx_(std::move(ctx)) {}

  void Run() {
    sockaddr_in orig{};
    socklen_t olen = sizeof(orig);
    if (getsockopt(client_.get(), SOL_IP, kSoOriginalDst, &orig, &olen) != 0) {
      // Not DNATed (no conntrack entry): cannot know where it was headed. Refuse.
      ResetAndClose(std::move(client_));
      return;
    }
    dst_addr_ = orig.sin_addr.s_addr;
    dst_port_ = ntohs(orig.sin_port);
    int one = 1;
    setsockopt(client_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    std::string buf;
    auto deadline = Clock::now() + kFirstBytesTimeout;
    while (true) {
      IoResult r = ReadSome(client_.get(), stop_fd_, deadline, &buf, 16384);
      if (r == IoResult::kStopped) return;
      bool more = r == IoResult::kOk;
      if (buf.empty()) {
        Refuse("tcp", Literal(), more ? "" : "no data before timeout or close");
        return;
      }
      if (static_cast<uint8_t>(buf[0]) == 0x16) {
        ClientHelloInfo hello;
        SniStatus s = ParseClientHello(buf, &hello);
        if (s == SniStatus::kNeedMore && more) continue;
        HandleTls(s, hello, buf);
        return;
      }
      HttpRequestHead head;
      std::string error;
      HttpHeadStatus s = ParseHttpRequestHead(buf, &head, &error);
      if (s == HttpHeadStatus::kNeedMore && more) continue;
      if (s == HttpHeadStatus::kNotHttp || s == HttpHeadStatus::kNeedMore) {
        Refuse("tcp", Literal(),
               s == HttpHeadStatus::kNotHttp ? "not HTTP or TLS" : "incomplete request");
        return;
      }
      if (s == HttpHeadStatus::kMalformed) {
        Forbid(Literal(), "malformed HTTP request: " + error);
        return;
      }
      HandleHttp(head, buf);
      return;
    }
  }

 private:
  std::string Literal() const { return fmt::format("{}:{}", Ipv4String(dst_addr_), dst_port_); }
  const PolicyIndex* Policy() const { return &ctx_->policy; }

  void Log(const char* protocol, const std::string& dest, const std::string& rule,
           const char* verdict, const std::string& reason) {
    shared_->log.Record(ctx_->sandbox_id, protocol, dest, rule, verdict, reason);
  }

  // Non-HTTP traffic that is not allowed: an immediate reset.
  void Refuse(const char* protocol, const std::string& dest, const std::string& reason) {
    Log(protocol, dest, "", "deny", reason);
    ResetAndClose(std::move(client_));
  }

  // HTTP that is not allowed: the one 403, whatever the reason or the address.
  void Forbid(const std::string& dest, const std::string& reason) {
    Log("http", dest, "", "deny", reason);
    WriteAll(client_.get(), stop_fd_, Clock::now() + std::chrono::seconds(5), ForbiddenResponse());
    GracefulClose(std::move(client_), stop_fd_);
  }

  void HandleHttp(const HttpRequestHead& head, const std::string& buf) {
    Verdict v = DecideHttp(head, dst_addr_, dst_port_, shared_->gateway_addr, Policy());
    if (!v.allow) {
      Forbid(v.destination, v.reason);
      return;
    }
    Upstream up = ctx_->policy.UpstreamFor(v.host, v.port);
    auto upstream = ConnectTcp(up.host, up.port, kUpstreamConnectTimeout, stop_fd_);
    if (!upstream.ok()) {
      Log("http", v.destination, v.rule, "allow",
          "upstream unreachable: " + upstream.status().message());
      WriteAll(client_.get(), stop_fd_, Clock::now() + std::chrono::seconds(5),
               BadGatewayResponse());
      GracefulClose(std::move(client_), stop_fd_);
      return;
    }
    Log("http", v.destination, v.rule, "allow", "");
    int one = 1;
    setsockopt(upstream->get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint64_t body = head.content_length.value_or(0);
    std::string first = UpstreamHead(head);
    size_t have = buf.size() - head.head_bytes;
    size_t pass = static_cast<size_t>(std::min<uint64_t>(body, have));
    first.append(buf, head.head_bytes, pass);
    auto deadline = Clock::now() + kRelayIdleTimeout;
    if (WriteAll(upstream->get(), stop_fd_, deadline, first) != IoResult::kOk) {
      ResetAndClose(std::move(client_));
      return;
    }
    Relay(client_.get(), upstream->get(), stop_fd_, Kind::kHttp, body - pass);
    upstream->Reset();
    GracefulClose(std::move(client_), stop_fd_);
  }

  void HandleTls(SniStatus s, const ClientHelloInfo& hello, const std::string& buf) {
    Verdict v = DecideTls(s, hello, dst_addr_, dst_port_, shared_->gateway_addr, Policy());
    if (!v.allow) {
      Refuse("tls", v.destination, v.reason);
      return;
    }
    Upstream up = ctx_->policy.UpstreamFor(v.host, v.port);
    auto upstream = ConnectTcp(up.host, up.port, kUpstreamConnectTimeout, stop_fd_);
    if (!upstream.ok()) {
      Log("tls", v.destination, v.rule, "allow",
          "upstream unreachable: " + upstream.status().message());
      ResetAndClose(std::move(client_));
      return;
    }
    Log("tls", v.destination, v.rule, "allow", "");
    int one = 1;
    setsockopt(upstream->get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    // Passthrough: the ClientHello and whatever followed it, unchanged.
    if (WriteAll(upstream->get(), stop_fd_, Clock::now() + kRelayIdleTimeout, buf) !=
        IoResult::kOk) {
      ResetAndClose(std::move(client_));
      return;
    }
    Relay(client_.get(), upstream->get(), stop_fd_, Kind::kTls, 0);
    upstream->Reset();
    client_.Reset();
  }

  SlotGuard slot_;
  std::shared_ptr<GatewayShared> shared_;
  host::UniqueFd client_;
  uint32_t peer_;
  int stop_fd_;
  uint32_t dst_addr_ = 0;
  int dst_port_ = 0;
  std::shared_ptr<const SandboxContext> ctx_;
};

}  // namespace

EgressProxy::EgressProxy(host::UniqueFd listener, host::UniqueFd upstream_netns,
                         std::shared_ptr<GatewayShared> shared)
    : listener_(std::move(listener)),
      upstream_netns_(std::move(upstream_netns)),
      shared_(std::move(shared)) {
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

EgressProxy::~EgressProxy() {
  shared_->Stop();
  shared_->table.CancelAll();
  if (accept_thread_.joinable()) accept_thread_.join();
  shared_->proxy_slots.WaitIdle(std::chrono::seconds(5));
}

void EgressProxy::AcceptLoop() {
  // SECURITY: connection threads inherit this thread's namespace; upstream sockets must be
  // made in the runtime's own namespace, never in the gateway's (which has no way out anyway)
  // nor in a sandbox's.
  if (setns(upstream_netns_.get(), CLONE_NEWNET) != 0) return;
  while (true) {
    pollfd p[2] = {{listener_.get(), POLLIN, 0}, {shared_->stop_fd.get(), POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;
    sockaddr_in peer{};
    socklen_t plen = sizeof(peer);
    host::UniqueFd fd(
        accept4(listener_.get(), reinterpret_cast<sockaddr*>(&peer), &plen, SOCK_CLOEXEC));
    if (!fd.valid()) continue;
    uint32_t addr = peer.sin_addr.s_addr;
    // SECURITY: an address with no attached sandbox (released, or never attached) has nothing
    // to be allowed: reset at once rather than hold a slot for its first bytes.
    auto ctx = shared_->table.Find(addr);
    if (!ctx || !shared_->proxy_slots.TryAcquire(addr)) {
      ResetAndClose(std::move(fd));
      continue;
    }
    auto conn = std::make_shared<Connection>(shared_, std::move(fd), addr, std::move(ctx));
    std::thread([conn] { conn->Run(); }).detach();
  }
}

}  // namespace sbx::net
