// The ClientHello SNI parser of the egress gateway (EGR-4): well-formed hellos, hellos split over
// records, and the malformed ones the gateway must refuse.
#include "net/tls_sni.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "net/tls_hello_testing.h"

namespace sbx::net {
namespace {

using testing_tls::ClientHello;
using testing_tls::HelloOptions;

TEST(TlsSniTest, ReadsServerName) {
  std::string hello = ClientHello({.sni = "pypi.example.org"});
  ClientHelloInfo info;
  ASSERT_EQ(ParseClientHello(hello, &info), SniStatus::kComplete);
  EXPECT_TRUE(info.has_sni);
  EXPECT_EQ(info.sni, "pypi.example.org");
  EXPECT_FALSE(info.has_ech);
  EXPECT_EQ(info.bytes, hello.size());
}

TEST(TlsSniTest, EveryPrefixNeedsMore) {
  std::string hello = ClientHello({.sni = "a.example"});
  for (size_t n = 0; n < hello.size(); ++n) {
    ClientHelloInfo info;
    EXPECT_EQ(ParseClientHello(hello.substr(0, n), &info), SniStatus::kNeedMore) << n;
  }
}

TEST(TlsSniTest, HelloSplitAcrossRecords) {
  std::string hello = ClientHello({.sni = "split.example", .record_split = 40});
  ClientHelloInfo info;
  ASSERT_EQ(ParseClientHello(hello, &info), SniStatus::kComplete);
  EXPECT_EQ(info.sni, "split.example");
}

TEST(TlsSniTest, TrailingBytesAfterTheHelloAreIgnored) {
  std::string hello = ClientHello({.sni = "a.example"});
  ClientHelloInfo info;
  ASSERT_EQ(ParseClientHello(hello + "more", &info), SniStatus::kComplete);
  EXPECT_EQ(info.bytes, hello.size());
}

TEST(TlsSniTest, NoSniAndEch) {
  ClientHelloInfo info;
  ASSERT_EQ(ParseClientHello(ClientHello({.sni = ""}), &info), SniStatus::kComplete);
  EXPECT_FALSE(info.has_sni);
  ASSERT_EQ(ParseClientHello(ClientHello({.sni = "public.example", .ech = true}), &info),
            SniStatus::kComplete);
  EXPECT_TRUE(info.has_ech);
}

TEST(TlsSniTest, NotTls) {
  ClientHelloInfo info;
  EXPECT_EQ(ParseClientHello("GET / HTTP/1.1\r\n", &info), SniStatus::kNotTls);
  EXPECT_EQ(ParseClientHello(std::string("\x16\x02", 2), &info), SniStatus::kNotTls);
}

TEST(TlsSniTest, MalformedHellos) {
  ClientHelloInfo info;
  // A handshake record holding a ServerHello (type 2), not a ClientHello.
  std::string server_hello = ClientHello({.sni = "a.example"});
  server_hello[5] = 2;
  EXPECT_EQ(ParseClientHello(server_hello, &info), SniStatus::kMalformed);
  // Two server_name extensions.
  EXPECT_EQ(ParseClientHello(ClientHello({.sni = "a.example", .duplicate_sni = true}), &info),
            SniStatus::kMalformed);
  // Extension length pointing past the end of the hello.
  std::string bad = ClientHello({.sni = "a.example"});
  bad[bad.size() - 1 - std::string("a.example").size() - 3] = static_cast<char>(0x7f);
  EXPECT_EQ(ParseClientHello(bad, &info), SniStatus::kMalformed);
  // Zero-length record.
  EXPECT_EQ(ParseClientHello(std::string("\x16\x03\x01\x00\x00", 5), &info), SniStatus::kMalformed);
  // Oversized record length.
  EXPECT_EQ(ParseClientHello(std::string("\x16\x03\x01\xff\xff", 5), &info), SniStatus::kMalformed);
}

}  // namespace
}  // namespace sbx::net
