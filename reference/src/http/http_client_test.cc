// The shared HTTP client (sbx/http_client.h) against loopback servers written in the test, and
// its response parser on whole, split and malformed answers.
#include "sbx/http_client.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace sbx::http {
namespace {

using Kind = ResponseOutcome::Kind;

TEST(HttpEndpoint, ParsesTheForms) {
  auto a = ParseEndpoint("http://127.0.0.1:8080");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 8080);
  EXPECT_EQ(a->ToString(), "http://127.0.0.1:8080");
  auto b = ParseEndpoint("http://example.internal/api/");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "example.internal");
  EXPECT_EQ(b->port, 80);
  EXPECT_EQ(b->base_path, "/api");
  auto c = ParseEndpoint("unix:/run/sandboxd.sock");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->unix_socket);
  EXPECT_EQ(c->socket_path, "/run/sandboxd.sock");
  EXPECT_EQ(ParseEndpoint("unix:///run/s.sock")->socket_path, "/run/s.sock");
  auto v6 = ParseEndpoint("http://[::1]:9000/");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->ToString(), "http://[::1]:9000");
  for (const char* bad : {"http://host:99999", "http://:80", "ftp://x", "unix:", "unix:rel.sock",
                          "http://[::1", "http://[::1]x", "http://h:", "http://a b:80",
                          "http://u@h:80", "127.0.0.1:80", ""}) {
    auto r = ParseEndpoint(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
    }
  }
}

TEST(HttpEndpoint, HttpsDefaultsTo443AndPinsAreNormalised) {
  auto a = ParseEndpoint("https://worker.internal/api");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->tls);
  EXPECT_EQ(a->port, 443);
  EXPECT_EQ(a->base_path, "/api");
  EXPECT_EQ(a->ToString(), "https://worker.internal:443/api");
  auto b = ParseEndpoint("https://[::1]:8443");
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->tls);
  EXPECT_EQ(b->ToString(), "https://[::1]:8443");
  EXPECT_FALSE(ParseEndpoint("http://h")->tls);
  EXPECT_FALSE(ParseEndpoint("https://").ok());
  EXPECT_FALSE(ParseEndpoint("https://h:0").ok());
  std::string hex(64, 'a');
  EXPECT_EQ(*NormalizePinSha256("AA:" + std::string(62, 'A')), hex);
  EXPECT_EQ(*NormalizePinSha256(hex), hex);
  for (std::string bad : {std::string(""), std::string(63, 'a'), std::string(65, 'a'),
                          std::string(63, 'a') + "g", std::string("sha256:") + hex}) {
    auto r = NormalizePinSha256(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  }
  // https never runs unverified; TLS options on a plain endpoint are a mistake, not ignored.
  auto none = Call(*a, Request{}, {.timeout_s = 5});
  EXPECT_EQ(none.status().code(), Code::kInvalidArgument);
  auto plain = Call(*ParseEndpoint("http://127.0.0.1:1"), Request{},
                    {.timeout_s = 5, .tls = {.ca_file = "/etc/ssl/certs/ca.pem"}});
  EXPECT_EQ(plain.status().code(), Code::kInvalidArgument);
}

TEST(HttpResponseParser, ReadsLengthChunkedAndCloseDelimitedBodies) {
  auto r = ParseResponse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A:  b \r\n\r\nhelloEXTRA", false,
                         1 << 20);
  ASSERT_EQ(r.kind, Kind::kComplete) << r.message;
  EXPECT_EQ(r.response.status, 200);
  EXPECT_EQ(r.response.reason, "OK");
  EXPECT_EQ(r.response.body, "hello");
  ASSERT_NE(r.response.Header("x-a"), nullptr);
  EXPECT_EQ(*r.response.Header("x-a"), "b");
  const std::string chunked =
      "HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n"
      "4\r\nabcd\r\n3;x=y\r\nefg\r\n0\r\nX-Trailer: 1\r\n\r\n";
  auto c = ParseResponse(chunked, false, 1 << 20);
  ASSERT_EQ(c.kind, Kind::kComplete) << c.message;
  EXPECT_EQ(c.response.status, 503);
  EXPECT_EQ(c.response.body, "abcdefg");
  // Every prefix is incomplete (or, at EOF, an error), never a wrong body.
  for (size_t n = 0; n < chunked.size(); ++n) {
    EXPECT_EQ(ParseResponse(chunked.substr(0, n), false, 1 << 20).kind, Kind::kIncomplete) << n;
    EXPECT_EQ(ParseResponse(chunked.substr(0, n), true, 1 << 20).kind, Kind::kError) << n;
  }
  auto eof = ParseResponse("HTTP/1.0 200 OK\r\n\r\nto the end", false, 1 << 20);
  EXPECT_EQ(eof.kind, Kind::kIncomplete);
  eof = ParseResponse("HTTP/1.0 200 OK\r\n\r\nto the end", true, 1 << 20);
  ASSERT_EQ(eof.kind, Kind::kComplete);
  EXPECT_EQ(eof.response.body, "to the end");
  EXPECT_FALSE(eof.response.keep_alive);
}

TEST(HttpResponseParser, RefusesMalformedAndOversizedAnswers) {
  for (const char* bad : {
           "garbage\r\n\r\n",
           "HTTP/1.1 20 OK\r\n\r\n",
           "HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
           "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
           "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
           "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
           "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
           "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
       }) {
    EXPECT_EQ(ParseResponse(bad, true, 1 << 20).kind, Kind::kError) << bad;
  }
  EXPECT_EQ(ParseResponse("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", true, 100).kind,
            Kind::kError);
  EXPECT_EQ(ParseResponse("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", false, 4).kind,
            Kind::kError);
  EXPECT_EQ(ParseResponse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                          "3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n",
                          false, 5)
                .kind,
            Kind::kError)
      << "the chunks add up past the limit";
  EXPECT_EQ(ParseResponse(std::string(70 * 1024, 'a'), false, 100).kind, Kind::kError);
}

// A one-shot TCP server: accepts one connection, reads the head (and `read_body` more bytes),
// sends `answer`. With `keep_open`, the connection stays open until Release() (or 60 s), so a
// client that returns while it is open provably did not wait for the server to close.
class OneShotServer {
 public:
  explicit OneShotServer(std::string answer, bool keep_open = false, size_t read_body = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(fd_, 1);
    thread_ = std::thread([this, answer, keep_open, read_body] {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buf[8192];
      size_t want = 0;
      while (true) {
        size_t head = request_.find("\r\n\r\n");
        if (head != std::string::npos && want == 0) want = head + 4 + read_body;
        if (want != 0 && request_.size() >= want) break;
        ssize_t n = ::read(c, buf, sizeof buf);
        if (n <= 0) break;
        request_.append(buf, static_cast<size_t>(n));
      }
      if (!answer.empty()) (void)!::write(c, answer.data(), answer.size());
      if (keep_open) {
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, std::chrono::seconds(60), [this] { return released_; });
      }
      closed_ = true;
      ::close(c);
    });
  }
  ~OneShotServer() {
    Release();
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  Endpoint endpoint(const std::string& host = "127.0.0.1") const {
    Endpoint ep;
    ep.host = host;
    ep.port = port_;
    return ep;
  }
  const std::string& request() const { return request_; }
  bool closed() const { return closed_; }
  void Release() {
    {
      std::lock_guard lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
  std::atomic<bool> closed_{false};
  std::thread thread_;
  std::string request_;
};

TEST(HttpCall, SendsTheRequestAndReadsAKnownLengthWithoutWaitingForClose) {
  OneShotServer server(
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
      "13\r\n\r\n{\"name\":\"x\"}\n",
      /*keep_open=*/true, /*read_body=*/2);
  Endpoint ep = server.endpoint();
  ep.base_path = "/api";
  Request req;
  req.method = "POST";
  req.path = "/v1/sandboxes";
  req.headers = {{"Authorization", "Bearer s3cret"}, {"Content-Type", "application/json"}};
  req.body = "{}";
  auto r = Call(ep, req, {.timeout_s = 30});
  // Content-Length known: no waiting for the server to close (it holds the connection open
  // until released, well past this call's timeout).
  EXPECT_FALSE(server.closed()) << "the client waited for the server to close";
  server.Release();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "{\"name\":\"x\"}\n");
  const std::string& got = server.request();
  EXPECT_EQ(got.rfind("POST /api/v1/sandboxes HTTP/1.1\r\n", 0), 0u) << got;
  EXPECT_NE(got.find(fmt::format("Host: 127.0.0.1:{}\r\n", ep.port)), std::string::npos) << got;
  EXPECT_NE(got.find("Connection: close\r\n"), std::string::npos);
  EXPECT_NE(got.find("Authorization: Bearer s3cret\r\n"), std::string::npos);
  EXPECT_NE(got.find("Content-Length: 2\r\n\r\n{}"), std::string::npos) << got;
}

TEST(HttpCall, ResolvesHostNames) {
  OneShotServer server("HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n");
  auto r = Call(server.endpoint("localhost"), Request{}, {.timeout_s = 30});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 204);
  auto none = Call(*ParseEndpoint("http://no-such-host.invalid:80"), Request{}, {.timeout_s = 5});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kSandboxUnavailable) << none.status().ToString();
}

TEST(HttpCall, ReadsAnAnswerSentBeforeTheBodyWasRead) {
  // sandboxd answers 401 from the head alone and closes: a client that finished writing first
  // would meet EPIPE (or SIGPIPE) on an 8 MiB body and lose the answer.
  OneShotServer server(
      "HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno");
  Request req;
  req.method = "POST";
  req.path = "/v1/run";
  req.body.assign(8 << 20, 'x');
  auto r = Call(server.endpoint(), req, {.timeout_s = 30});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->body, "no");
  EXPECT_FALSE(r->keep_alive);
}

TEST(HttpCall, OneDeadlineForTheWholeCall) {
  OneShotServer server("", /*keep_open=*/true);
  auto t0 = std::chrono::steady_clock::now();
  auto r = Call(server.endpoint(), Request{}, {.timeout_s = 0.3});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kTimeout);
  // Its own 0.3 s deadline ended the call: the server stays silent and open for 60 s.
  EXPECT_FALSE(server.closed());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
}

TEST(HttpCall, AnInterruptionEndsTheCall) {
  OneShotServer server("", /*keep_open=*/true);
  std::atomic<int> polls{0};
  auto r = Call(server.endpoint(), Request{},
                {.timeout_s = 60, .interrupted = [&] { return ++polls > 2; }});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInternal);
  EXPECT_NE(r.status().message().find("interrupted"), std::string::npos) << r.status().ToString();
  EXPECT_FALSE(server.closed()) << "ended by the interruption, not by the server";
}

TEST(HttpCall, NothingListeningIsUnavailable) {
  Endpoint ep;
  ep.host = "127.0.0.1";
  ep.port = 1;  // nothing listens there
  auto r = Call(ep, Request{}, {.timeout_s = 5});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kSandboxUnavailable) << r.status().ToString();
  auto u = Call(*ParseEndpoint("unix:/nonexistent/sandboxd.sock"), Request{}, {.timeout_s = 5});
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().code(), Code::kSandboxUnavailable) << u.status().ToString();
}

TEST(HttpCall, AServerThatClosesWithoutAnAnswerIsUnavailableAndGarbageIsMalformed) {
  {
    OneShotServer server("");  // reads the head, closes
    auto r = Call(server.endpoint(), Request{}, {.timeout_s = 30});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kSandboxUnavailable) << r.status().ToString();
  }
  {
    OneShotServer server("SSH-2.0-OpenSSH_9.2\r\n\r\n");
    auto r = Call(server.endpoint(), Request{}, {.timeout_s = 30, .who = "sandboxd"});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInternal);
    EXPECT_NE(r.status().message().find("malformed response"), std::string::npos);
    EXPECT_NE(r.status().message().find("(sandboxd)"), std::string::npos);
  }
}

}  // namespace
}  // namespace sbx::http
