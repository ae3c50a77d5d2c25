// TLS end to end over loopback with real certificates made by the `openssl` CLI at test time
// (a CA, a server certificate for IP 127.0.0.1 signed by it, a client certificate, and a
// self-signed "other"): sandboxd's server with its TLS terminator, the shared HTTP client and
// the remote runtime. Trust by CA and by pin, every refusal with its code (no trust, wrong pin,
// wrong CA, wrong host, missing or untrusted client certificate), and a terminator that keeps
// serving whatever the peers send (plain HTTP, garbage, silence past the handshake deadline,
// too many connections), leaking neither descriptors nor threads.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "api/api_service.h"
#include "api/fake_runtime.h"
#include "api/http_server.h"
#include "api/tls_terminator.h"
#include "client/remote_runtime.h"
#include "host/fd.h"
#include "sbx/http_client.h"

namespace sbx::api {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr const char* kAlice = "alice-token-0123456789";

// The certificates, made once for the whole suite.
struct Certs {
  std::string dir, ca, server_cert, server_key, client_cert, client_key, other_cert, other_key;
  std::string server_pin;  // as `openssl x509 -fingerprint -sha256` prints it (AB:CD:...)
};

bool Sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

std::string ShOut(const std::string& cmd) {
  std::string out;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[512];
    while (fgets(buf, sizeof buf, f)) out += buf;
    pclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// CA, server (SAN IP:127.0.0.1 only), client (clientAuth), other (self-signed, SAN 127.0.0.1).
std::unique_ptr<Certs> MakeCerts() {
  char tmpl[] = "/tmp/sbx-tls-test-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return nullptr;
  auto c = std::make_unique<Certs>();
  c->dir = tmpl;
  const std::string d = c->dir;
  const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  std::ofstream(d + "/server.ext") << "basicConstraints=CA:FALSE\n"
                                      "subjectAltName=IP:127.0.0.1\n"
                                      "extendedKeyUsage=serverAuth\n";
  std::ofstream(d + "/client.ext") << "basicConstraints=CA:FALSE\n"
                                      "extendedKeyUsage=clientAuth\n";
  bool ok =
      Sh(fmt::format("openssl req -x509 {} -keyout {d}/ca.key -out {d}/ca.pem -days 2 "
                     "-subj /CN=sbx-test-ca",
                     key, fmt::arg("d", d))) &&
      Sh(fmt::format("openssl req {} -keyout {d}/server.key -out {d}/server.csr "
                     "-subj /CN=127.0.0.1",
                     key, fmt::arg("d", d))) &&
      Sh(fmt::format("openssl x509 -req -in {d}/server.csr -CA {d}/ca.pem -CAkey {d}/ca.key "
                     "-CAcreateserial -days 2 -extfile {d}/server.ext -out {d}/server.pem",
                     fmt::arg("d", d))) &&
      Sh(fmt::format("openssl req {} -keyout {d}/client.key -out {d}/client.csr -subj /CN=client",
                     key, fmt::arg("d", d))) &&
      Sh(fmt::format("openssl x509 -req -in {d}/client.csr -CA {d}/ca.pem -CAkey {d}/ca.key "
                     "-CAcreateserial -days 2 -extfile {d}/client.ext -out {d}/client.pem",
                     fmt::arg("d", d))) &&
      Sh(fmt::format("openssl req -x509 {} -keyout {d}/other.key -out {d}/other.pem -days 2 "
                     "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1",
                     key, fmt::arg("d", d)));
  if (!ok) return nullptr;
  for (const char* k : {"ca.key", "server.key", "client.key", "other.key"})
    chmod((d + "/" + k).c_str(), 0600);
  c->ca = d + "/ca.pem";
  c->server_cert = d + "/server.pem";
  c->server_key = d + "/server.key";
  c->client_cert = d + "/client.pem";
  c->client_key = d + "/client.key";
  c->other_cert = d + "/other.pem";
  c->other_key = d + "/other.key";
  std::string fp = ShOut("openssl x509 -in " + c->server_cert + " -noout -fingerprint -sha256");
  c->server_pin = fp.substr(fp.find('=') + 1);
  return c;
}

int OpenFds() {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    (void)e;
    ++n;
  }
  return n;
}

int Threads() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

bool WaitUntil(const std::function<bool()>& done, double timeout_s = 20) {
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

host::UniqueFd Connect(int port) {
  host::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) fd.Reset();
  return fd;
}

// Reads until the peer closes (true) or `timeout_s` passes (false); what arrived in *out.
bool ReadToEof(int fd, double timeout_s, std::string* out = nullptr) {
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return true;
    if (out) out->append(buf, static_cast<size_t>(n));
  }
  return false;
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = MakeCerts().release();
    ASSERT_NE(certs_, nullptr) << "openssl could not make the test certificates";
  }
  static void TearDownTestSuite() {
    if (certs_) fs::remove_all(certs_->dir);
    delete certs_;
    certs_ = nullptr;
  }
  void TearDown() override {
    server_.reset();
    service_.reset();
  }

  // A TLS server on 127.0.0.1:0 with the fake runtime; `client_ca`: mutual TLS.
  void Start(bool mutual = false, ServerOptions o = {}) {
    ASSERT_NE(certs_, nullptr);
    auto ctx = TlsServerContext::Create(certs_->server_cert, certs_->server_key,
                                        mutual ? certs_->ca : "");
    ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
    o.tls = *ctx;
    auto addr = ParseListenAddress("127.0.0.1:0");
    auto l = Listener::Open(*addr);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    auto auth = Authenticator::Create({{"alice", kAlice}});
    ASSERT_TRUE(auth.ok());
    service_ =
        std::make_unique<ApiService>(&fake_, std::move(auth).value(), ServiceOptions{});
    ApiService* svc = service_.get();
    server_ = std::make_unique<HttpServer>(
        std::move(l).value(), [svc](const HttpRequest& r) { return svc->Handle(r); },
        [svc](const HttpRequest& h) { return svc->HeadCheck(h); }, o);
    ASSERT_TRUE(server_->Start().ok());
    ASSERT_TRUE(server_->tls());
  }

  int port() const { return server_->address().port; }
  std::string Url(const char* host = "127.0.0.1") const {
    return fmt::format("https://{}:{}", host, port());
  }

  StatusOr<std::unique_ptr<Runtime>> Open(const http::TlsOptions& t,
                                          const char* host = "127.0.0.1") {
    return client::OpenRemoteRuntime(Url(host), kAlice, t);
  }

  // GET /v1/info with the CA: the server still answers.
  bool StillServes(const http::TlsOptions& t = {}) {
    http::TlsOptions trust = t;
    if (trust.empty()) trust.ca_file = certs_->ca;
    auto rt = Open(trust);
    return rt.ok() && (*rt)->Info().value("tenant", "") == "alice";
  }

  static Certs* certs_;
  FakeRuntime fake_;
  std::unique_ptr<ApiService> service_;
  std::unique_ptr<HttpServer> server_;
};

Certs* TlsTest::certs_ = nullptr;

TEST_F(TlsTest, RoundTripVerifiedByTheCa) {
  Start();
  auto rt = Open({.ca_file = certs_->ca});
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  EXPECT_EQ((*rt)->Info()["tenant"], "alice");
  auto id = (*rt)->Create(SandboxSpec{});
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  ExecSpec e;
  e.command = "echo over tls";
  auto r = (*rt)->Exec(*id, e);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_tail, "echo over tls");
  // Bigger than every buffer on the way (the relay's 32 KiB, a TLS record, the socketpair).
  std::string content(3 << 20, 'q');
  content[12345] = '\0';
  Status put = (*rt)->PutFile(*id, "/work/big", content, 0600);
  ASSERT_TRUE(put.ok()) << put.ToString();
  EXPECT_EQ(fake_.Get(*id)->files["/work/big"].first, content);
  EXPECT_TRUE((*rt)->Destroy(*id).ok());
  auto st = server_->stats();
  EXPECT_GE(st.tls_handshakes, 5u);
  EXPECT_EQ(st.tls_failed, 0u);
}

TEST_F(TlsTest, RoundTripTrustedByThePin) {
  Start();
  ASSERT_FALSE(certs_->server_pin.empty());
  auto rt = Open({.pin_sha256 = certs_->server_pin});
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  EXPECT_EQ((*rt)->Info()["tenant"], "alice");
  // Lower case without colons is the same pin; CA and pin together both hold.
  std::string plain = *http::NormalizePinSha256(certs_->server_pin);
  EXPECT_TRUE(Open({.pin_sha256 = plain}).ok());
  EXPECT_TRUE(Open({.ca_file = certs_->ca, .pin_sha256 = plain}).ok());
}

TEST_F(TlsTest, AWrongPinIsRefusedNamingIt) {
  Start();
  auto rt = Open({.pin_sha256 = std::string(64, 'a')});
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), Code::kPermissionDenied);
  EXPECT_NE(rt.status().message().find("does not match the pinned fingerprint"), std::string::npos)
      << rt.status().ToString();
  // The right CA does not excuse a wrong pin.
  auto both = Open({.ca_file = certs_->ca, .pin_sha256 = std::string(64, 'b')});
  EXPECT_EQ(both.status().code(), Code::kPermissionDenied);
  EXPECT_EQ(Open({.pin_sha256 = "abc"}).status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(StillServes());
}

TEST_F(TlsTest, AWrongCaOrAWrongHostIsRefused) {
  Start();
  auto rt = Open({.ca_file = certs_->other_cert});
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), Code::kPermissionDenied);
  EXPECT_NE(rt.status().message().find("certificate is not trusted"), std::string::npos)
      << rt.status().ToString();
  // The certificate names IP 127.0.0.1 only: "localhost" reaches the same server, but the
  // certificate is not for that name.
  auto host = Open({.ca_file = certs_->ca}, "localhost");
  ASSERT_FALSE(host.ok());
  EXPECT_EQ(host.status().code(), Code::kPermissionDenied) << host.status().ToString();
  EXPECT_NE(host.status().message().find("mismatch"), std::string::npos)
      << host.status().ToString();
  EXPECT_TRUE(StillServes());
}

TEST_F(TlsTest, HttpsWithoutTrustIsRefusedBeforeConnecting) {
  Start();
  auto rt = client::OpenRemoteRuntime(Url(), kAlice);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), Code::kInvalidArgument);
  EXPECT_NE(rt.status().message().find("unverified TLS is refused"), std::string::npos);
  auto call = http::Call(*http::ParseEndpoint(Url()), http::Request{}, {.timeout_s = 5});
  ASSERT_FALSE(call.ok());
  EXPECT_EQ(call.status().code(), Code::kInvalidArgument);
  // Trust for a plain URL is a mistake too (it would protect nothing).
  EXPECT_EQ(client::OpenRemoteRuntime("http://127.0.0.1:1", kAlice, {.ca_file = certs_->ca})
                .status()
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(Open({.ca_file = certs_->dir + "/none.pem"}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(server_->stats().tls_handshakes, 0u);
}

TEST_F(TlsTest, MutualTlsNeedsAClientCertificateSignedByTheCa) {
  Start(/*mutual=*/true);
  auto none = Open({.ca_file = certs_->ca});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kPermissionDenied) << none.status().ToString();
  EXPECT_NE(none.status().message().find("requires a client certificate"), std::string::npos)
      << none.status().ToString();
  EXPECT_NE(none.status().message().find("certificate"), std::string::npos);
  auto other = Open({.ca_file = certs_->ca,
                     .client_cert_file = certs_->other_cert,
                     .client_key_file = certs_->other_key});
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), Code::kPermissionDenied) << other.status().ToString();
  auto rt = Open({.ca_file = certs_->ca,
                  .client_cert_file = certs_->client_cert,
                  .client_key_file = certs_->client_key});
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  EXPECT_EQ((*rt)->Info()["tenant"], "alice");
  EXPECT_GE(server_->stats().tls_failed, 2u);
  // A key that is not the certificate's is refused before connecting.
  EXPECT_EQ(Open({.ca_file = certs_->ca,
                  .client_cert_file = certs_->client_cert,
                  .client_key_file = certs_->other_key})
                .status()
                .code(),
            Code::kInvalidArgument);
}

TEST_F(TlsTest, PlainHttpAndGarbageGetACleanCloseAndTheServerKeepsServing) {
  ServerOptions o;
  o.tls_handshake_timeout_s = 1;  // a truncated handshake waits for it
  Start(false, o);
  {
    // http.client-like plain request to the TLS port.
    auto ep = http::ParseEndpoint(fmt::format("http://127.0.0.1:{}", port()));
    auto r = http::Call(*ep, http::Request{.path = "/v1/info"}, {.timeout_s = 10});
    EXPECT_FALSE(r.ok() && r->status == 200);
  }
  for (std::string garbage :
       {std::string("GET /v1/info HTTP/1.1\r\nHost: x\r\n\r\n"), std::string(5000, '\x16'),
        std::string("\x16\x03\x01\x00\x05hello", 10), std::string(1, '\0'),
        std::string("\x16\x03\x03\x40\x00", 5) + std::string(300, 'z')}) {
    host::UniqueFd fd = Connect(port());
    ASSERT_TRUE(fd.valid());
    ssize_t n = send(fd.get(), garbage.data(), garbage.size(), MSG_NOSIGNAL);
    EXPECT_GT(n, 0);
    if (garbage.size() == 300 + 5) shutdown(fd.get(), SHUT_WR);  // a truncated record
    EXPECT_TRUE(ReadToEof(fd.get(), 15)) << "the server did not close";
  }
  EXPECT_TRUE(WaitUntil([&] { return server_->stats().tls_connections == 0; }));
  EXPECT_GE(server_->stats().tls_failed, 5u);
  EXPECT_TRUE(StillServes());
}

TEST_F(TlsTest, ASilentClientIsDroppedAtTheHandshakeDeadline) {
  ServerOptions o;
  o.tls_handshake_timeout_s = 0.3;
  Start(false, o);
  host::UniqueFd fd = Connect(port());
  ASSERT_TRUE(fd.valid());
  auto t0 = Clock::now();
  EXPECT_TRUE(ReadToEof(fd.get(), 10));
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(s, 0.2);
  EXPECT_LT(s, 5.0);
  EXPECT_EQ(server_->stats().tls_failed, 1u);
  EXPECT_TRUE(StillServes());
}

TEST_F(TlsTest, TlsConnectionsAreBoundedByMaxConnections) {
  ServerOptions o;
  o.max_connections = 2;
  Start(false, o);
  host::UniqueFd a = Connect(port()), b = Connect(port());
  ASSERT_TRUE(WaitUntil([&] { return server_->stats().tls_connections == 2; }));
  host::UniqueFd c = Connect(port());
  ASSERT_TRUE(c.valid());
  EXPECT_TRUE(ReadToEof(c.get(), 10)) << "the third connection was not closed";
  EXPECT_GE(server_->stats().refused, 1u);
  a.Reset();
  b.Reset();
  ASSERT_TRUE(WaitUntil([&] { return server_->stats().tls_connections == 0; }));
  EXPECT_TRUE(StillServes());
}

TEST_F(TlsTest, ATlsClientToAPlainServerIsUnavailable) {
  // No TLS context: the plain server on the port answers the ClientHello with a 400.
  auto addr = ParseListenAddress("127.0.0.1:0");
  auto l = Listener::Open(*addr);
  ASSERT_TRUE(l.ok());
  auto auth = Authenticator::Create({{"alice", kAlice}});
  ApiService svc(&fake_, std::move(auth).value(), ServiceOptions{});
  HttpServer plain(
      std::move(l).value(), [&](const HttpRequest& r) { return svc.Handle(r); },
      [&](const HttpRequest& h) { return svc.HeadCheck(h); }, ServerOptions{});
  ASSERT_TRUE(plain.Start().ok());
  auto rt = client::OpenRemoteRuntime(fmt::format("https://127.0.0.1:{}", plain.address().port),
                                      kAlice, {.ca_file = certs_->ca});
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), Code::kSandboxUnavailable) << rt.status().ToString();
  EXPECT_NE(rt.status().message().find("TLS"), std::string::npos) << rt.status().ToString();
  plain.Stop(5);
}

TEST_F(TlsTest, AHandshakeIsBoundedByTheCallsDeadline) {
  // A "server" that accepts and never answers: the client's one deadline ends the handshake.
  host::UniqueFd l(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  ASSERT_EQ(bind(l.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(listen(l.get(), 4), 0);
  socklen_t len = sizeof sa;
  getsockname(l.get(), reinterpret_cast<sockaddr*>(&sa), &len);
  auto ep = http::ParseEndpoint(fmt::format("https://127.0.0.1:{}", ntohs(sa.sin_port)));
  auto t0 = Clock::now();
  auto r = http::Call(*ep, http::Request{}, {.timeout_s = 0.3, .tls = {.ca_file = certs_->ca}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kTimeout) << r.status().ToString();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
}

TEST_F(TlsTest, NoDescriptorOrThreadOutlivesTheServer) {
  int fds = OpenFds(), threads = Threads();
  {
    ServerOptions o;
    o.tls_handshake_timeout_s = 0.2;
    Start(false, o);
    EXPECT_TRUE(StillServes());
    host::UniqueFd silent = Connect(port());
    host::UniqueFd garbage = Connect(port());
    send(garbage.get(), "garbage\r\n\r\n", 11, MSG_NOSIGNAL);
    auto rt = Open({.ca_file = certs_->ca});
    ASSERT_TRUE(rt.ok());
    auto id = (*rt)->Create(SandboxSpec{});
    ASSERT_TRUE(id.ok());
    // Stopped with a TLS connection open in each state.
    EXPECT_TRUE(server_->Stop(5));
    server_.reset();
    service_.reset();
  }
  EXPECT_TRUE(WaitUntil([&] { return OpenFds() == fds && Threads() == threads; }, 10))
      << "fds " << OpenFds() << " (was " << fds << "), threads " << Threads() << " (was "
      << threads << ")";
}

TEST(TlsServerContextTest, RefusesFilesThatCannotBeLoaded) {
  char tmpl[] = "/tmp/sbx-tls-ctx-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string d = tmpl;
  std::ofstream(d + "/junk.pem") << "not a certificate\n";
  auto r = TlsServerContext::Create(d + "/junk.pem", d + "/junk.pem", "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("tls.cert_file"), std::string::npos);
  EXPECT_FALSE(TlsServerContext::Create(d + "/none.pem", d + "/none.key", "").ok());
  fs::remove_all(d);
}

}  // namespace
}  // namespace sbx::api
