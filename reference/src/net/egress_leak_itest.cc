// Nothing leaks (RES-7, LC-1 cleanup): 200 sandboxes attached, used and released leave the same
// number of veths in the gateway (each sandbox namespace holds exactly one veth pair, which the
// kernel deletes only with the namespace, so this counts live sandbox namespaces), fds and threads
// in the runtime, links and nftables tables in the root namespace; every sandbox got a namespace of
// its own (never a recycled one); and a service that is started and stopped leaves no fd or thread
// behind.
#include <gtest/gtest.h>
#include <net/if.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <string>

#include "net/egress.h"
#include "net/egress_testing.h"
#include "net/gateway_nft.h"
#include "net/netns.h"

namespace sbx::net {
namespace {

using namespace testing_egress;  // NOLINT

constexpr char kMirrorName[] = "pkg-mirror.demo-tools.svc.cluster.local";

std::set<std::string> RootLinks() {
  std::set<std::string> names;
  if (struct if_nameindex* ifs = if_nameindex()) {
    for (struct if_nameindex* i = ifs; i->if_index != 0; ++i) names.insert(i->if_name);
    if_freenameindex(ifs);
  }
  return names;
}

// Waits until the gateway holds exactly the pool's veths (released namespaces are deleted by
// the kernel asynchronously) and no connection is open.
EgressStats Settle(EgressService& s, int timeout_ms = 15000) {
  EgressStats st;
  for (int waited = 0; waited <= timeout_ms; waited += 20) {
    auto r = s.Stats();
    if (r.ok()) st = *r;
    if (r.ok() && st.attached == 0 && st.active_connections == 0 &&
        st.gateway_links == st.pool_ready) {
      break;
    }
    usleep(20000);
  }
  return st;
}

// A detached connection thread finishes unwinding a moment after its connection is counted
// closed: waits (up to 30 s; a leak never ends) until the runtime's fds and threads are back
// to `fds` and `threads`.
void WaitForFdsAndThreads(int fds, int threads) {
  for (auto deadline = Clock::now() + std::chrono::seconds(30);
       (CountOpenFds() != fds || CountThreads() != threads) && Clock::now() < deadline;) {
    usleep(10000);
  }
}

TEST(EgressLeakTest, TwoHundredSandboxesLeaveNothingBehind) {
  auto root_tables = ListNftTables();
  ASSERT_TRUE(root_tables.ok()) << root_tables.status().ToString();
  auto root_links = RootLinks();

  auto svc = EgressService::Start({.runtime_id = "leak", .pool_floor = 4});
  ASSERT_TRUE(svc.ok()) << svc.status().ToString();
  EgressService& s = **svc;
  EgressPolicy policy;
  policy.rules.push_back({"http", {kMirrorName}, {80}});
  std::map<std::string, std::string> hosts = {{kMirrorName, "127.0.0.1:9"}};

  // Warm up (thread-local buffers, the pool reaching its floor), then take the baseline.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s.Attach("warm" + std::to_string(i), policy, hosts).ok());
  EgressStats before = Settle(s);
  ASSERT_EQ(before.gateway_links, before.pool_ready);
  int fds_before = CountOpenFds();
  int threads_before = CountThreads();

  constexpr int kCycles = 200;
  for (int i = 0; i < kCycles; ++i) {
    auto a = s.Attach("leak-" + std::to_string(i), policy, hosts);
    ASSERT_TRUE(a.ok()) << i << ": " << a.status().ToString();
    // SECURITY: no end of any veth ever appears in the root namespace, at any moment.
    ASSERT_EQ(RootLinks(), root_links) << "cycle " << i;
    if (i % 10 == 0) {
      // Use it: a DNS answer and a refused HTTP request (a socket and a proxy connection each).
      Status st = RunInNetns((*a)->netns_fd(), [&]() -> Status {
        UdpProbe dns = UdpExchange("10.200.0.1", 53, testing_dns::Query(1, kMirrorName, 1));
        EXPECT_EQ(testing_dns::LastA(dns.reply), "10.200.0.1") << i;
        TcpProbe http = TcpExchange("203.0.113.7", 80, HttpGet("203.0.113.7", "/"));
        EXPECT_EQ(StatusLine(http.received), "HTTP/1.1 403 Forbidden") << i;
        return Status::Ok();
      });
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
  }

  EgressStats after = Settle(s);
  EXPECT_EQ(after.attached, 0);
  EXPECT_EQ(after.active_connections, 0);
  EXPECT_EQ(after.gateway_links, after.pool_ready) << "veths of released sandboxes remain";
  EXPECT_LE(after.gateway_links, 4 + 1);
  // A fresh namespace for every sandbox: the pool created (at least) one per Attach.
  EXPECT_GE(after.created - before.created, kCycles);
  WaitForFdsAndThreads(fds_before, threads_before);
  EXPECT_EQ(CountOpenFds(), fds_before);
  EXPECT_EQ(CountThreads(), threads_before);
  EXPECT_EQ(RootLinks(), root_links);
  EXPECT_EQ(*ListNftTables(), *root_tables);
}

// Regression: the pool's creator thread stayed inside the namespace it made last, so with no
// pool a released sandbox's namespace (and its veth) lived on until the next Attach.
TEST(EgressLeakTest, WithoutAPoolAReleasedNetworkIsDeleted) {
  auto svc = EgressService::Start({.runtime_id = "nopool", .pool_floor = 0});
  ASSERT_TRUE(svc.ok()) << svc.status().ToString();
  for (int i = 0; i < 3; ++i) {
    auto a = (*svc)->Attach("nopool" + std::to_string(i), EgressPolicy{}, {});
    ASSERT_TRUE(a.ok());
    EXPECT_EQ((*svc)->Stats()->gateway_links, 1);
    a->reset();
    EgressStats st = Settle(**svc);
    EXPECT_EQ(st.pool_ready, 0);
    EXPECT_EQ(st.gateway_links, 0) << "round " << i;
  }
}

TEST(EgressLeakTest, StartingAndStoppingTheServiceLeavesNothing) {
  auto root_links = RootLinks();
  auto root_tables = ListNftTables();
  // One round first, so lazily created process-wide state (e.g. libnftables caches) exists.
  {
    auto warm = EgressService::Start({.runtime_id = "warm", .pool_floor = 2});
    ASSERT_TRUE(warm.ok());
  }
  int fds_before = CountOpenFds();
  int threads_before = CountThreads();
  for (int round = 0; round < 3; ++round) {
    auto svc = EgressService::Start({.runtime_id = "round", .pool_floor = 2});
    ASSERT_TRUE(svc.ok()) << svc.status().ToString();
    auto a = (*svc)->Attach("s", EgressPolicy{}, {});
    ASSERT_TRUE(a.ok());
    // An Attachment may outlive its service: release it after the service is gone.
    svc->reset();
    a->reset();
  }
  // Detached connection threads may take a moment to finish unwinding.
  WaitForFdsAndThreads(fds_before, threads_before);
  EXPECT_EQ(CountOpenFds(), fds_before);
  EXPECT_EQ(CountThreads(), threads_before);
  EXPECT_EQ(RootLinks(), root_links);
  EXPECT_EQ(*ListNftTables(), *root_tables);
}

// Regression: Stats() (a link dump on the gateway's netlink socket) while the pool refills
// (link lookups on the same socket) once made the next lookup fail with EPROTO, a reply to
// another request. Every Attach and every Stats() must succeed while both run at once.
TEST(EgressLeakTest, StatsWhileThePoolRefillsNeverFails) {
  auto svc = EgressService::Start({.runtime_id = "stats", .pool_floor = 4});
  ASSERT_TRUE(svc.ok()) << svc.status().ToString();
  EgressService& s = **svc;
  std::atomic<bool> stop{false};
  std::atomic<int> stats_calls{0}, stats_errors{0};
  std::string first_error;
  std::thread poller([&] {
    while (!stop.load()) {
      auto r = s.Stats();
      ++stats_calls;
      if (!r.ok() && stats_errors++ == 0) first_error = r.status().ToString();
    }
  });
  int attach_errors = 0;
  std::string attach_error;
  for (int i = 0; i < 60; ++i) {
    auto a = s.Attach("refill-" + std::to_string(i), EgressPolicy{}, {});
    if (!a.ok() && attach_errors++ == 0) attach_error = a.status().ToString();
  }
  Settle(s);
  stop = true;
  poller.join();
  EXPECT_GT(stats_calls.load(), 0);
  EXPECT_EQ(stats_errors.load(), 0) << first_error;
  EXPECT_EQ(attach_errors, 0) << attach_error;
}

}  // namespace
}  // namespace sbx::net
