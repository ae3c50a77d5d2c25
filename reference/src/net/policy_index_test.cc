// Policy lookups and the proxy's verdicts (EGR-1, EGR-3, EGR-4, EGR-5, SNAP-5), without the
// kernel: exact names only, ports checked, IP literals and unresolved destinations refused.
#include "net/policy_index.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include "net/gateway_decide.h"
#include "net/tls_hello_testing.h"

namespace sbx::net {
namespace {

const char kMirror[] = "pkg-mirror.demo-tools.svc.cluster.local";
const uint32_t kGw = inet_addr("10.200.0.1");

EgressPolicy DemoPolicy() {
  EgressPolicy p;
  p.rules.push_back({"http", {kMirror}, {80}});
  p.rules.push_back({"tls", {"pypi.example.org"}, {443}});
  return p;
}

HttpRequestHead Head(const std::string& text) {
  HttpRequestHead h;
  EXPECT_EQ(ParseHttpRequestHead(text, &h), HttpHeadStatus::kComplete) << text;
  return h;
}

TEST(PolicyIndexTest, ExactNamesOnly) {
  PolicyIndex idx(DemoPolicy(), {});
  EXPECT_TRUE(idx.NameAllowed(kMirror));
  EXPECT_TRUE(idx.NameAllowed("PKG-MIRROR.demo-tools.svc.cluster.local"));
  EXPECT_TRUE(idx.NameAllowed("pypi.example.org"));
  EXPECT_FALSE(idx.NameAllowed("x.pkg-mirror.demo-tools.svc.cluster.local"));
  EXPECT_FALSE(idx.NameAllowed("demo-tools.svc.cluster.local"));
  EXPECT_FALSE(idx.NameAllowed("kubernetes.default.svc.cluster.local"));
  EXPECT_FALSE(idx.NameAllowed(""));
}

TEST(PolicyIndexTest, KindAndPortMustMatch) {
  PolicyIndex idx(DemoPolicy(), {});
  EXPECT_EQ(idx.Match("http", kMirror, 80).value_or(""), std::string("http ") + kMirror + ":80");
  EXPECT_FALSE(idx.Match("http", kMirror, 8080));
  EXPECT_FALSE(idx.Match("tls", kMirror, 80));
  EXPECT_EQ(idx.Match("tls", "pypi.example.org", 443).value_or(""), "tls pypi.example.org:443");
  EXPECT_FALSE(idx.Match("http", "pypi.example.org", 443));
}

TEST(PolicyIndexTest, EmptyPolicyAllowsNothing) {
  PolicyIndex idx;
  EXPECT_TRUE(idx.empty());
  EXPECT_FALSE(idx.NameAllowed(kMirror));
  EXPECT_FALSE(idx.Match("http", kMirror, 80));
}

TEST(PolicyIndexTest, DirectoryReplacesAddressAndPort) {
  PolicyIndex idx(DemoPolicy(), {{kMirror, "127.0.0.1:34567"}});
  Upstream u = idx.UpstreamFor(kMirror, 80);
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, 34567);
  u = idx.UpstreamFor("pypi.example.org", 443);
  EXPECT_EQ(u.host, "pypi.example.org");
  EXPECT_EQ(u.port, 443);
}

TEST(PolicyIndexTest, ValidationRejectsLiteralsWildcardsAndBadDirectories) {
  EXPECT_TRUE(
      ValidatePolicy(DemoPolicy(), {{kMirror, "127.0.0.1:80"}, {"a.example", "[::1]:8080"}}).ok());
  auto with_host = [](std::string h) {
    EgressPolicy p;
    p.rules.push_back({"http", {std::move(h)}, {80}});
    return p;
  };
  for (const char* bad : {"203.0.113.7", "*.example.com", "Upper.example", "a..b", "-a.example",
                          "a-.example", "2130706433", "[::1]", "a_b.example", ""}) {
    EXPECT_EQ(ValidatePolicy(with_host(bad), {}).code(), Code::kInvalidArgument) << bad;
  }
  EgressPolicy bad_kind;
  bad_kind.rules.push_back({"https", {kMirror}, {443}});
  EXPECT_FALSE(ValidatePolicy(bad_kind, {}).ok());
  EgressPolicy bad_port;
  bad_port.rules.push_back({"http", {kMirror}, {0}});
  EXPECT_FALSE(ValidatePolicy(bad_port, {}).ok());
  EXPECT_FALSE(ValidatePolicy(DemoPolicy(), {{kMirror, "127.0.0.1"}}).ok());
  EXPECT_FALSE(ValidatePolicy(DemoPolicy(), {{kMirror, "127.0.0.1:0"}}).ok());
  EXPECT_FALSE(ValidatePolicy(DemoPolicy(), {{"1.2.3.4", "127.0.0.1:80"}}).ok());
}

TEST(GatewayDecideTest, AllowsTheMirrorOnlyThroughTheResolvedAddress) {
  PolicyIndex idx(DemoPolicy(), {});
  std::string req = std::string("GET /hello-1.0.txt HTTP/1.1\r\nHost: ") + kMirror + "\r\n\r\n";
  Verdict v = DecideHttp(Head(req), kGw, 80, kGw, &idx);
  EXPECT_TRUE(v.allow) << v.reason;
  EXPECT_EQ(v.rule, std::string("http ") + kMirror + ":80");
  EXPECT_EQ(v.destination, std::string(kMirror) + ":80");
  // Same Host, but to an address the gateway never gave out.
  EXPECT_FALSE(DecideHttp(Head(req), inet_addr("203.0.113.7"), 80, kGw, &idx).allow);
  // Same Host, another port.
  EXPECT_FALSE(DecideHttp(Head(req), kGw, 8080, kGw, &idx).allow);
  // Host port that disagrees with the connection.
  std::string port_req = std::string("GET / HTTP/1.1\r\nHost: ") + kMirror + ":8080\r\n\r\n";
  EXPECT_FALSE(DecideHttp(Head(port_req), kGw, 80, kGw, &idx).allow);
  // No sandbox attached at that address.
  EXPECT_FALSE(DecideHttp(Head(req), kGw, 80, kGw, nullptr).allow);
}

TEST(GatewayDecideTest, RefusesEverythingElse) {
  PolicyIndex idx(DemoPolicy(), {});
  std::string m = kMirror;
  const std::string refused[] = {
      "GET / HTTP/1.1\r\nHost: 203.0.113.7\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: 10.200.0.1\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: x." + m + "\r\n\r\n",
      "CONNECT " + m + ":80 HTTP/1.1\r\nHost: " + m + ":80\r\n\r\n",
      "GET http://" + m + "/hello-1.0.txt HTTP/1.1\r\nHost: " + m + "\r\n\r\n",
      "GET / HTTP/1.0\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: " + m + "\r\nTransfer-Encoding: chunked\r\n\r\n",
      "OPTIONS * HTTP/1.1\r\nHost: " + m + "\r\n\r\n",
  };
  for (const std::string& r : refused) {
    Verdict v = DecideHttp(Head(r), kGw, 80, kGw, &idx);
    EXPECT_FALSE(v.allow) << r;
    EXPECT_FALSE(v.reason.empty()) << r;
  }
}

TEST(GatewayDecideTest, TlsBySni) {
  using testing_tls::ClientHello;
  PolicyIndex idx(DemoPolicy(), {});
  auto decide = [&](const std::string& hello, uint32_t dst, int port) {
    ClientHelloInfo info;
    SniStatus s = ParseClientHello(hello, &info);
    return DecideTls(s, info, dst, port, kGw, &idx);
  };
  EXPECT_TRUE(decide(ClientHello({.sni = "pypi.example.org"}), kGw, 443).allow);
  EXPECT_TRUE(decide(ClientHello({.sni = "PyPI.Example.org"}), kGw, 443).allow);
  EXPECT_FALSE(decide(ClientHello({.sni = "pypi.example.org"}), kGw, 8443).allow);
  EXPECT_FALSE(
      decide(ClientHello({.sni = "pypi.example.org"}), inet_addr("203.0.113.7"), 443).allow);
  EXPECT_FALSE(decide(ClientHello({.sni = "example.com"}), kGw, 443).allow);
  EXPECT_FALSE(decide(ClientHello({.sni = ""}), kGw, 443).allow);
  EXPECT_FALSE(decide(ClientHello({.sni = "203.0.113.7"}), kGw, 443).allow);
  EXPECT_FALSE(decide(ClientHello({.sni = "pypi.example.org", .ech = true}), kGw, 443).allow);
  EXPECT_FALSE(decide(ClientHello({.sni = kMirror}), kGw, 80).allow);  // http rule, not tls
  EXPECT_FALSE(decide("\x16\x03\x01\x00\x05hello", kGw, 443).allow);
}

TEST(GatewayDecideTest, ForbiddenResponseIsWhatBusyboxReports) {
  const std::string& r = ForbiddenResponse();
  EXPECT_EQ(r.rfind("HTTP/1.1 403 Forbidden\r\n", 0), 0u);
  EXPECT_NE(r.find("\r\nX-Sandcheck-Gateway: denied\r\n"), std::string::npos);
  size_t body = r.find("\r\n\r\n") + 4;
  std::string cl = "Content-Length: " + std::to_string(r.size() - body) + "\r\n";
  EXPECT_NE(r.find(cl), std::string::npos);
}

}  // namespace
}  // namespace sbx::net
