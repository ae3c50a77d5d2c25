// The Execution API client against a loopback server written in the test.
#include "drivers/http_client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace sandcheck {
namespace {

TEST(HttpClient, ParsesEndpoints) {
  auto a = ParseEndpoint("http://127.0.0.1:8080");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 8080);
  auto b = ParseEndpoint("http://example.internal/api/");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->port, 80);
  EXPECT_EQ(b->base_path, "/api");
  auto c = ParseEndpoint("unix:/run/sandboxd.sock");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->unix_socket);
  EXPECT_EQ(c->socket_path, "/run/sandboxd.sock");
  auto v6 = ParseEndpoint("http://[::1]:9000");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_FALSE(ParseEndpoint("http://host:99999").ok());
  EXPECT_FALSE(ParseEndpoint("http://:80").ok());
  EXPECT_FALSE(ParseEndpoint("ftp://x").ok());
  EXPECT_FALSE(ParseEndpoint("unix:").ok());
}

TEST(HttpClient, ParsesResponses) {
  auto r = ParseHttpResponse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhelloEXTRA");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello");
  EXPECT_EQ(r->headers["x-a"], "b");
  auto c = ParseHttpResponse(
      "HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: "
      "chunked\r\n\r\n4\r\nabcd\r\n3;x=y\r\nefg\r\n0\r\n\r\n");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->status, 503);
  EXPECT_EQ(c->body, "abcdefg");
  EXPECT_FALSE(ParseHttpResponse("garbage\r\n\r\n").ok());
  EXPECT_FALSE(ParseHttpResponse("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort").ok());
}

// A one-shot server: accepts one connection, records the request, sends `answer` (or nothing).
// With `keep_open`, the connection stays open until Release() (or 60 s), so a client that
// returns while it is open provably did not wait for the server to close.
class OneShotServer {
 public:
  explicit OneShotServer(std::string answer, bool keep_open = false) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(fd_, 1);
    thread_ = std::thread([this, answer, keep_open] {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buf[8192];
      while (request_.find("\r\n\r\n") == std::string::npos) {
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
  int port() const { return port_; }
  const std::string& request() const { return request_; }
  bool closed() const { return closed_; }  // the server closed the connection
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

TEST(HttpClient, SendsTokenAndReadsBody) {
  OneShotServer server(
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
      "13\r\n\r\n{\"name\":\"x\"}\n",
      /*keep_open=*/true);
  HttpEndpoint ep;
  ep.host = "127.0.0.1";
  ep.port = server.port();
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/sandboxes";
  req.headers["Authorization"] = "Bearer s3cret";
  req.body = "{}";
  auto r = HttpCall(ep, req, 30);
  // Content-Length known: no waiting for the server to close (it holds the connection open
  // until released, well past this call's timeout).
  EXPECT_FALSE(server.closed()) << "the client waited for the server to close";
  server.Release();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "{\"name\":\"x\"}\n");
  EXPECT_NE(server.request().find("POST /v1/sandboxes HTTP/1.1\r\n"), std::string::npos);
  EXPECT_NE(server.request().find("Authorization: Bearer s3cret\r\n"), std::string::npos);
  EXPECT_NE(server.request().find("Content-Length: 2\r\n"), std::string::npos);
}

TEST(HttpClient, SilentServerTimesOut) {
  OneShotServer server("", /*keep_open=*/true);
  HttpEndpoint ep;
  ep.host = "127.0.0.1";
  ep.port = server.port();
  auto t0 = std::chrono::steady_clock::now();
  auto r = HttpCall(ep, HttpRequest{}, 0.3);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), sbx::Code::kTimeout);
  // Its own 0.3 s deadline ended the call: the server stays silent and open for 60 s.
  EXPECT_FALSE(server.closed());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
}

TEST(HttpClient, RefusedConnectionIsAnError) {
  HttpEndpoint ep;
  ep.host = "127.0.0.1";
  ep.port = 1;  // nothing listens there
  auto r = HttpCall(ep, HttpRequest{}, 2);
  EXPECT_FALSE(r.ok());
  ep.unix_socket = true;
  ep.socket_path = "/nonexistent/sandboxd.sock";
  EXPECT_FALSE(HttpCall(ep, HttpRequest{}, 2).ok());
}

}  // namespace
}  // namespace sandcheck
