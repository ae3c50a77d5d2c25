// The strict HTTP request parser: what it accepts, a corpus of malformed requests it must
// refuse with the right status, and the incremental reader agreeing with the one-shot parser
// however the bytes are split.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "api/http_message.h"
#include "sbx/http_client.h"

namespace sbx::api {
namespace {

using Kind = ParseOutcome::Kind;

TEST(HttpRequestTest, ParsesAGetWithHeaders) {
  auto o =
      ParseRequest("GET /v1/info?x=1 HTTP/1.1\r\nHost: a\r\nX-Thing:   padded value \t\r\n\r\n");
  ASSERT_EQ(o.kind, Kind::kComplete) << o.message;
  EXPECT_EQ(o.request.method, "GET");
  EXPECT_EQ(o.request.target, "/v1/info?x=1");
  EXPECT_EQ(o.request.path, "/v1/info");
  EXPECT_EQ(o.request.query, "x=1");
  ASSERT_NE(o.request.Header("x-thing"), nullptr);
  EXPECT_EQ(*o.request.Header("x-thing"), "padded value");
  EXPECT_TRUE(o.request.keep_alive);
  EXPECT_TRUE(o.request.body.empty());
}

TEST(HttpRequestTest, ParsesAPostBodyAndCountsConsumedBytes) {
  std::string raw =
      "POST /v1/sandboxes HTTP/1.1\r\nHost: a\r\nContent-Length: 7\r\n\r\n{\"a\":1}NEXT";
  auto o = ParseRequest(raw);
  ASSERT_EQ(o.kind, Kind::kComplete) << o.message;
  EXPECT_EQ(o.request.body, "{\"a\":1}");
  EXPECT_EQ(o.consumed, raw.size() - 4);
}

TEST(HttpRequestTest, PostWithoutContentLengthHasNoBody) {
  // RFC 9112 6.3: neither Transfer-Encoding nor Content-Length means a zero-length body.
  auto o = ParseRequest("POST /v1/sandboxes/x/revert HTTP/1.1\r\nHost: a\r\n\r\n");
  ASSERT_EQ(o.kind, Kind::kComplete) << o.message;
  EXPECT_TRUE(o.request.body.empty());
}

TEST(HttpRequestTest, KeepAliveFollowsVersionAndConnection) {
  EXPECT_FALSE(
      ParseRequest("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").request.keep_alive);
  EXPECT_FALSE(ParseRequest("GET / HTTP/1.0\r\n\r\n").request.keep_alive);
  EXPECT_TRUE(ParseRequest("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").request.keep_alive);
  EXPECT_FALSE(ParseRequest("GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, CLOSE\r\n\r\n")
                   .request.keep_alive);
}

TEST(HttpRequestTest, TruncatedRequestsAreIncompleteNotErrors) {
  for (std::string raw : {"", "G", "GET", "GET /", "GET / HTTP/1.1", "GET / HTTP/1.1\r",
                          "GET / HTTP/1.1\r\nHost: a\r\n", "GET / HTTP/1.1\r\nHost: a\r\n\r",
                          "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n12345"}) {
    auto o = ParseRequest(raw);
    EXPECT_EQ(o.kind, Kind::kIncomplete) << "'" << raw << "': " << o.message;
  }
}

struct Bad {
  std::string name;
  std::string raw;
  int status;
};

// The malformed-request corpus. Each must be refused with `status`, whole or byte by byte.
std::vector<Bad> Corpus() {
  const std::string h = "Host: a\r\n";
  std::vector<Bad> c = {
      {"bare LF line endings", "GET / HTTP/1.1\nHost: a\n\n", 400},
      {"bare CR", "GET / HTTP/1.1\r\nHost: a\rX: y\r\n\r\n", 400},
      {"lower-case method", "get / HTTP/1.1\r\n" + h + "\r\n", 400},
      {"method with digits", "G3T / HTTP/1.1\r\n" + h + "\r\n", 400},
      {"method too long", std::string(30, 'A') + " / HTTP/1.1\r\n" + h + "\r\n", 400},
      {"double space", "GET  / HTTP/1.1\r\n" + h + "\r\n", 400},
      {"no version", "GET /\r\n" + h + "\r\n", 400},
      {"absolute-form target", "GET http://a/ HTTP/1.1\r\n" + h + "\r\n", 400},
      {"asterisk target", "OPTIONS * HTTP/1.1\r\n" + h + "\r\n", 400},
      {"fragment in target", "GET /a#b HTTP/1.1\r\n" + h + "\r\n", 400},
      {"non-ASCII target", "GET /\xc3\xa9 HTTP/1.1\r\n" + h + "\r\n", 400},
      {"tab in target", "GET /a\tb HTTP/1.1\r\n" + h + "\r\n", 400},
      {"HTTP/2.0", "GET / HTTP/2.0\r\n" + h + "\r\n", 505},
      {"HTTP/1.2", "GET / HTTP/1.2\r\n" + h + "\r\n", 505},
      {"HTTX", "GET / HTTX/1.1\r\n" + h + "\r\n", 400},
      {"version with trailer", "GET / HTTP/1.1 x\r\n" + h + "\r\n", 400},
      {"leading empty line", "\r\nGET / HTTP/1.1\r\n" + h + "\r\n", 400},
      {"missing Host in 1.1", "GET / HTTP/1.1\r\n\r\n", 400},
      {"two Host fields", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"obsolete folding", "GET / HTTP/1.1\r\n" + h + "X: a\r\n b\r\n\r\n", 400},
      {"space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400},
      {"space in name", "GET / HTTP/1.1\r\n" + h + "X Y: a\r\n\r\n", 400},
      {"empty name", "GET / HTTP/1.1\r\n" + h + ": a\r\n\r\n", 400},
      {"no colon", "GET / HTTP/1.1\r\n" + h + "Garbage\r\n\r\n", 400},
      {"control char in value", "GET / HTTP/1.1\r\n" + h + "X: a\x01b\r\n\r\n", 400},
      {"NUL in value", "GET / HTTP/1.1\r\n" + h + "X: a" + std::string(1, '\0') + "b\r\n\r\n", 400},
      {"DEL in value", "GET / HTTP/1.1\r\n" + h + "X: a\x7f\r\n\r\n", 400},
      {"negative length", "POST / HTTP/1.1\r\n" + h + "Content-Length: -1\r\n\r\n", 400},
      {"hex length", "POST / HTTP/1.1\r\n" + h + "Content-Length: 0x10\r\n\r\n", 400},
      {"float length", "POST / HTTP/1.1\r\n" + h + "Content-Length: 1e3\r\n\r\n", 400},
      {"empty length", "POST / HTTP/1.1\r\n" + h + "Content-Length:\r\n\r\n", 400},
      {"list length", "POST / HTTP/1.1\r\n" + h + "Content-Length: 5, 5\r\n\r\n", 400},
      {"overflowing length",
       "POST / HTTP/1.1\r\n" + h + "Content-Length: 99999999999999999999999\r\n\r\n", 400},
      {"two lengths", "POST / HTTP/1.1\r\n" + h + "Content-Length: 1\r\nContent-Length: 1\r\n\r\nx",
       400},
      {"body too large", "POST / HTTP/1.1\r\n" + h + "Content-Length: 8388609\r\n\r\n", 413},
      {"chunked",
       "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
       411},
      {"chunked with length",
       "POST / HTTP/1.1\r\n" + h + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc",
       411},
      {"unknown expectation",
       "POST / HTTP/1.1\r\n" + h + "Expect: 200-ok\r\nContent-Length: 1\r\n\r\nx", 417},
      {"two Authorization fields",
       "GET / HTTP/1.1\r\n" + h + "Authorization: a\r\nAuthorization: b\r\n\r\n", 400},
      {"TLS ClientHello", std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11), 400},
      {"binary zeros", std::string(64, '\0'), 400},
      {"JSON instead of HTTP", "{\"cmd\": \"ls\"}\r\n\r\n", 400},
      {"head larger than 16 KiB",
       "GET / HTTP/1.1\r\n" + h + "X: " + std::string(17000, 'a') + "\r\n\r\n", 431},
      {"endless head", "GET / HTTP/1.1\r\n" + h + "X: " + std::string(20000, 'a'), 431},
  };
  std::string many = "GET / HTTP/1.1\r\n" + h;
  for (int i = 0; i < 101; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  c.push_back({"101 header fields", many + "\r\n", 431});
  return c;
}

TEST(HttpRequestTest, MalformedCorpusIsRefusedWithTheRightStatus) {
  for (const Bad& b : Corpus()) {
    auto o = ParseRequest(b.raw);
    EXPECT_EQ(o.kind, Kind::kError) << b.name;
    EXPECT_EQ(o.status, b.status) << b.name << ": " << o.message;
    EXPECT_FALSE(o.message.empty()) << b.name;
  }
}

ParseOutcome FeedInPieces(const std::string& raw, std::mt19937& rng, size_t max_piece) {
  RequestReader r;
  size_t pos = 0;
  while (pos < raw.size()) {
    size_t n = std::min(raw.size() - pos, std::uniform_int_distribution<size_t>(1, max_piece)(rng));
    r.Append(std::string_view(raw).substr(pos, n));
    pos += n;
    auto o = r.Next();
    if (o.kind != Kind::kIncomplete) return o;
  }
  return r.Next();
}

TEST(HttpRequestTest, ReaderRefusesTheCorpusHoweverTheBytesArrive) {
  std::mt19937 rng(42);
  for (const Bad& b : Corpus()) {
    for (size_t piece : {size_t{1}, size_t{3}, size_t{64}, size_t{1} << 20}) {
      auto o = FeedInPieces(b.raw, rng, piece);
      EXPECT_EQ(o.kind, Kind::kError) << b.name << " piece " << piece;
    }
  }
}

TEST(HttpRequestTest, GarbageIsRefusedBeforeTheHeadEnds) {
  // A peer speaking TLS or sending junk is answered at once, not after 16 KiB or a timeout.
  RequestReader r;
  r.Append(std::string("\x16\x03\x01", 3));
  EXPECT_EQ(r.Next().kind, Kind::kError);
  RequestReader r2;
  r2.Append("GET / HTTP/3.0\r\n");
  auto o = r2.Next();
  EXPECT_EQ(o.kind, Kind::kError);
  EXPECT_EQ(o.status, 505);
  RequestReader r3;
  r3.Append("GET / HTTP/1.1\r\nHost: a\n");
  EXPECT_EQ(r3.Next().kind, Kind::kError);
}

TEST(HttpRequestTest, ReaderAgreesWithOneShotParserAndHandlesPipelining) {
  std::string a = "POST /v1/sandboxes HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}";
  std::string b = "GET /v1/info HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
  std::mt19937 rng(7);
  for (size_t piece : {size_t{1}, size_t{2}, size_t{5}, size_t{1000}}) {
    RequestReader r;
    std::string all = a + b;
    std::vector<HttpRequest> got;
    size_t pos = 0;
    while (pos < all.size() || got.size() < 2) {
      if (pos < all.size()) {
        size_t n = std::min(all.size() - pos, std::uniform_int_distribution<size_t>(1, piece)(rng));
        r.Append(std::string_view(all).substr(pos, n));
        pos += n;
      }
      auto o = r.Next();
      ASSERT_NE(o.kind, Kind::kError) << o.message;
      if (o.kind == Kind::kComplete) got.push_back(o.request);
      if (pos >= all.size() && o.kind == Kind::kIncomplete) break;
    }
    ASSERT_EQ(got.size(), 2u) << "piece " << piece;
    EXPECT_EQ(got[0].body, "{}");
    EXPECT_EQ(got[1].path, "/v1/info");
    EXPECT_FALSE(got[1].keep_alive);
    EXPECT_EQ(r.buffered(), 0u);
  }
}

TEST(HttpRequestTest, PendingHeadAndExpectContinue) {
  RequestReader r;
  r.Append(
      "POST /x HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer t\r\nExpect: 100-continue\r\n"
      "Content-Length: 4\r\n\r\n");
  EXPECT_EQ(r.Next().kind, Kind::kIncomplete);
  ASSERT_NE(r.PendingHead(), nullptr);
  EXPECT_EQ(*r.PendingHead()->Header("authorization"), "Bearer t");
  EXPECT_TRUE(r.WantsContinue());
  r.MarkContinueSent();
  EXPECT_FALSE(r.WantsContinue());
  r.Append("abcd");
  auto o = r.Next();
  ASSERT_EQ(o.kind, Kind::kComplete);
  EXPECT_EQ(o.request.body, "abcd");
  EXPECT_EQ(r.PendingHead(), nullptr);
}

TEST(HttpRequestTest, ErrorsKeepTheRequestLineForTheLog) {
  auto o = ParseRequest("POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
  ASSERT_EQ(o.kind, Kind::kError);
  EXPECT_EQ(o.request.method, "POST");
  EXPECT_EQ(o.request.path, "/v1/x");
}

TEST(HttpResponseTest, RoundTripAndInterimResponses) {
  HttpResponse r;
  r.status = 404;
  r.body = "{\"error\":{}}";
  r.headers.push_back({"WWW-Authenticate", "Bearer"});
  std::string wire = "HTTP/1.1 100 Continue\r\n\r\n" + SerializeResponse(r, false);
  auto o = http::ParseResponse(wire, false, 1 << 20);
  ASSERT_EQ(o.kind, http::ResponseOutcome::Kind::kComplete) << o.message;
  EXPECT_EQ(o.response.status, 404);
  EXPECT_EQ(o.response.body, r.body);
  EXPECT_FALSE(o.response.keep_alive);
  ASSERT_NE(o.response.Header("www-authenticate"), nullptr);
  EXPECT_EQ(http::ParseResponse(wire.substr(0, wire.size() - 2), false, 1 << 20).kind,
            http::ResponseOutcome::Kind::kIncomplete);
  EXPECT_EQ(http::ParseResponse(wire.substr(0, wire.size() - 2), true, 1 << 20).kind,
            http::ResponseOutcome::Kind::kError);
  EXPECT_EQ(http::ParseResponse(wire, false, 4).kind,
            http::ResponseOutcome::Kind::kError);  // body over the limit
  EXPECT_EQ(http::ParseResponse("SSH-2.0-OpenSSH\r\n\r\n", false, 100).kind,
            http::ResponseOutcome::Kind::kError);
}

}  // namespace
}  // namespace sbx::api
