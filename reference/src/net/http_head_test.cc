// The HTTP request-head parser of the egress gateway (EGR-1, EGR-3): what it accepts, what it
// refuses, and that every prefix of a valid head asks for more rather than deciding early.
#include "net/http_head.h"

#include <gtest/gtest.h>

#include <string>

namespace sbx::net {
namespace {

HttpHeadStatus Parse(const std::string& s, HttpRequestHead* h, std::string* err = nullptr) {
  return ParseHttpRequestHead(s, h, err);
}

TEST(HttpHeadTest, BusyboxWgetRequest) {
  std::string req =
      "GET /hello-1.0.txt HTTP/1.1\r\nHost: pkg-mirror.demo-tools.svc.cluster.local\r\n"
      "User-Agent: Wget\r\nConnection: close\r\n\r\n";
  HttpRequestHead h;
  ASSERT_EQ(Parse(req, &h), HttpHeadStatus::kComplete);
  EXPECT_EQ(h.method, "GET");
  EXPECT_EQ(h.target, "/hello-1.0.txt");
  EXPECT_EQ(h.version, "HTTP/1.1");
  EXPECT_EQ(h.host, "pkg-mirror.demo-tools.svc.cluster.local");
  EXPECT_EQ(h.host_port, 0);
  EXPECT_FALSE(h.host_is_ip_literal);
  EXPECT_TRUE(h.origin_form());
  EXPECT_EQ(h.head_bytes, req.size());
  EXPECT_EQ(h.fields.size(), 3u);
}

TEST(HttpHeadTest, EveryPrefixNeedsMore) {
  std::string req = "GET / HTTP/1.1\r\nHost: a.example:8080\r\n\r\n";
  for (size_t n = 0; n < req.size(); ++n) {
    HttpRequestHead h;
    EXPECT_EQ(Parse(req.substr(0, n), &h), HttpHeadStatus::kNeedMore) << "prefix " << n;
  }
  HttpRequestHead h;
  ASSERT_EQ(Parse(req, &h), HttpHeadStatus::kComplete);
  EXPECT_EQ(h.host, "a.example");
  EXPECT_EQ(h.host_port, 8080);
}

TEST(HttpHeadTest, BodyBytesAfterHeadAreNotPartOfIt) {
  std::string req = "POST /x HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5\r\n\r\nhello";
  HttpRequestHead h;
  ASSERT_EQ(Parse(req, &h), HttpHeadStatus::kComplete);
  EXPECT_EQ(h.head_bytes, req.size() - 5);
  ASSERT_TRUE(h.content_length.has_value());
  EXPECT_EQ(*h.content_length, 5u);
}

TEST(HttpHeadTest, HostIsLowerCasedAndIpLiteralsAreFlagged) {
  struct Case {
    const char* host;
    const char* want;
    bool literal;
  } cases[] = {
      {"PKG-Mirror.Example", "pkg-mirror.example", false},
      {"203.0.113.7", "203.0.113.7", true},
      {"203.0.113.7:80", "203.0.113.7", true},
      {"[2001:db8::1]:80", "2001:db8::1", true},
      {"[::ffff:203.0.113.7]", "::ffff:203.0.113.7", true},
      {"2130706433", "2130706433", true},
      {"0x7f.1", "0x7f.1", true},
      {"10.1", "10.1", true},
      {"169.254.169.254.", "169.254.169.254.", true},
      {"123.example", "123.example", false},
  };
  for (const Case& c : cases) {
    HttpRequestHead h;
    std::string req = std::string("GET / HTTP/1.1\r\nHost: ") + c.host + "\r\n\r\n";
    ASSERT_EQ(Parse(req, &h), HttpHeadStatus::kComplete) << c.host;
    EXPECT_EQ(h.host, c.want) << c.host;
    EXPECT_EQ(h.host_is_ip_literal, c.literal) << c.host;
  }
}

TEST(HttpHeadTest, NonHttpIsClassifiedFromTheFirstBytes) {
  HttpRequestHead h;
  EXPECT_EQ(Parse(std::string("\x16\x03\x01", 3), &h), HttpHeadStatus::kNotHttp);
  EXPECT_EQ(Parse("SSH-2.0-OpenSSH\r\n", &h), HttpHeadStatus::kNotHttp);
  EXPECT_EQ(Parse("get / HTTP/1.1\r\n\r\n", &h), HttpHeadStatus::kNotHttp);
  EXPECT_EQ(Parse(" GET", &h), HttpHeadStatus::kNotHttp);
  EXPECT_EQ(Parse("ABCDEFGHIJKLMNOPQRSTUVWXYZ", &h), HttpHeadStatus::kNotHttp);
  EXPECT_EQ(Parse("GE", &h), HttpHeadStatus::kNeedMore);
}

TEST(HttpHeadTest, AmbiguousHeadsAreMalformed) {
  const char* bad[] = {
      "GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n",  // two Host
      "GET / HTTP/1.1\r\nHost : a.example\r\n\r\n",                    // space before colon
      "GET / HTTP/1.1\r\nHost: a.example\r\n continued\r\n\r\n",       // obs-fold
      "GET / HTTP/1.1\nHost: a.example\r\n\r\n",                       // bare LF
      "GET / HTTP/2.0\r\nHost: a.example\r\n\r\n",                     // version
      "GET  / HTTP/1.1\r\nHost: a.example\r\n\r\n",                    // empty target
      "GET / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a.example\r\nContent-Length: -1\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a.example:0\r\n\r\n",  // port 0
      "GET / HTTP/1.1\r\nHost: a.example:99999\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: user@a.example\r\n\r\n",  // userinfo
      "GET / HTTP/1.1\r\nHost: a.example/x\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: \r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a.example\r\nX: a\x01b\r\n\r\n",
  };
  for (const char* b : bad) {
    HttpRequestHead h;
    std::string err;
    EXPECT_EQ(Parse(b, &h, &err), HttpHeadStatus::kMalformed) << b;
    EXPECT_FALSE(err.empty()) << b;
  }
}

TEST(HttpHeadTest, OversizedHeadIsMalformed) {
  std::string req = "GET / HTTP/1.1\r\nX: " + std::string(kMaxHttpHeadBytes, 'a');
  HttpRequestHead h;
  EXPECT_EQ(Parse(req, &h), HttpHeadStatus::kMalformed);
}

TEST(HttpHeadTest, RequestTargetForms) {
  HttpRequestHead h;
  ASSERT_EQ(Parse("GET http://a.example/x HTTP/1.1\r\nHost: a.example\r\n\r\n", &h),
            HttpHeadStatus::kComplete);
  EXPECT_FALSE(h.origin_form());
  ASSERT_EQ(Parse("CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n", &h),
            HttpHeadStatus::kComplete);
  EXPECT_FALSE(h.origin_form());
  EXPECT_EQ(h.method, "CONNECT");
}

TEST(HttpHeadTest, TransferEncodingIsReported) {
  HttpRequestHead h;
  ASSERT_EQ(Parse("POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n", &h),
            HttpHeadStatus::kComplete);
  EXPECT_TRUE(h.has_transfer_encoding);
}

TEST(HttpHeadTest, UpstreamHeadForcesOneRequestPerConnection) {
  HttpRequestHead h;
  ASSERT_EQ(Parse("GET /a HTTP/1.1\r\nHost: a.example\r\nConnection: keep-alive\r\n"
                  "Keep-Alive: 5\r\nProxy-Connection: x\r\nAccept: */*\r\n\r\n",
                  &h),
            HttpHeadStatus::kComplete);
  EXPECT_EQ(UpstreamHead(h),
            "GET /a HTTP/1.1\r\nHost: a.example\r\nAccept: */*\r\nConnection: close\r\n\r\n");
}

}  // namespace
}  // namespace sbx::net
