// The egress sink (sink_fixture.h, EGR-1, issue 32): it hears what reaches it, and only that;
// the positive control is not counted; every endpoint is in the probe's arguments.
#include "run/sink_fixture.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>

namespace sandcheck {
namespace {

// Connects (tcp) or sends one datagram (udp) to 127.x.y.z:port from this process.
void Reach(bool tcp, const std::string& ip, int port) {
  int c = ::socket(AF_INET, tcp ? SOCK_STREAM : SOCK_DGRAM, 0);
  ASSERT_GE(c, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  ASSERT_EQ(::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  if (!tcp) {
    ASSERT_EQ(::send(c, "x", 1, 0), 1);
  }
  ::close(c);
}

TEST(SinkFixture, RecordsWhatReachesItAndNotTheControl) {
  auto sink = SinkFixture::Start();
  ASSERT_TRUE(sink.ok()) << sink.status().ToString();
  EXPECT_EQ(sink->LogCount(), 0u);
  EXPECT_TRUE(sink->LogSince(0).empty());
  // Every way out is in the probe's arguments: tcp, udp, tls and dns at least.
  for (const char* kind : {"--connect tcp:127.0.0.1:", "--connect udp:127.0.0.1:",
                           "--connect tls:127.83.84.", "--connect dns:127.83.84."}) {
    EXPECT_NE(sink->probe_args().find(kind), std::string::npos) << sink->probe_args();
  }
  const auto control = sink->describe()["positive_control"];
  EXPECT_GE(control.size(), 4u);

  std::smatch m;
  const std::string nc = sink->nc_target();
  ASSERT_TRUE(std::regex_match(nc, m, std::regex(R"(127\.0\.0\.1 (\d+))"))) << nc;
  const int port = std::stoi(m[1]);
  Reach(true, "127.0.0.1", port);
  Reach(false, "127.0.0.1", port);
  auto log = sink->LogSince(0);
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].rfind("tcp 127.0.0.1:" + std::to_string(port) + " from 127.0.0.1:", 0), 0u)
      << log[0];
  EXPECT_NE(log[1].find("udp 127.0.0.1:"), std::string::npos) << log[1];
  EXPECT_EQ(sink->LogCount(), 2u);

  // The explicit resolver is an address of its own (port 53 where free).
  std::string res = sink->resolver();
  ASSERT_TRUE(std::regex_match(res, m, std::regex(R"((127\.83\.84\.\d+)(:(\d+))?)"))) << res;
  Reach(false, m[1], m[3].matched ? std::stoi(m[3]) : 53);
  log = sink->LogSince(2);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("udp " + m[1].str()), std::string::npos) << log[0];
  EXPECT_TRUE(sink->LogSince(3).empty());
}

TEST(SinkFixture, TwoSinksLiveSideBySide) {
  auto a = SinkFixture::Start();
  auto b = SinkFixture::Start();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE(a->resolver(), b->resolver());
  EXPECT_NE(a->nc_target(), b->nc_target());
}

}  // namespace
}  // namespace sandcheck
