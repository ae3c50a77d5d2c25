// Over 600 lines on purpose: the server's promises (401 before the body, head limit, connection
// limits, drain) tested together over both transports.
// sandboxd's HTTP server and its client over real sockets (unix and TCP loopback), with the
// runtime faked: the remote runtime round trip, error mapping, tenancy through the client, and
// a server that keeps serving whatever the peers send (garbage, huge heads, slow or missing
// bodies, too many connections), drains on stop and removes its socket.
#include "api/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "api/api_service.h"
#include "api/fake_runtime.h"
#include "client/remote_runtime.h"
#include "sbx/http_client.h"
#include "host/fd.h"

namespace sbx::api {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr const char* kAlice = "alice-token-0123456789";
constexpr const char* kBob = "bob-token-0123456789abcdef";

host::UniqueFd ConnectTo(const ListenAddress& a) {
  host::UniqueFd fd;
  if (a.kind == ListenAddress::Kind::kUnix) {
    fd.Reset(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    a.path.copy(sa.sun_path, sizeof sa.sun_path - 1);
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) fd.Reset();
  } else {
    fd.Reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(a.port));
    inet_pton(AF_INET, a.host.c_str(), &sa.sin_addr);
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) fd.Reset();
  }
  return fd;
}

// Reads until EOF or `timeout_s`; returns what arrived.
std::string ReadAll(int fd, double timeout_s, bool* eof = nullptr) {
  std::string out;
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  if (eof) *eof = false;
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (poll(&p, 1, std::max(left, 1)) <= 0) continue;
    char buf[65536];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (eof) *eof = true;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Reads until `end` has arrived (or EOF, or `timeout_s`); returns what arrived. For an answer
// on a connection the server keeps open: the read ends with the answer, not at a time.
std::string ReadUntil(int fd, std::string_view end, double timeout_s) {
  std::string out;
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (out.find(end) == std::string::npos && Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (poll(&p, 1, std::max(left, 1)) <= 0) continue;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Polls `done` every 5 ms until it holds or `timeout_s` passes; true if it held.
bool WaitUntil(const std::function<bool()>& done, double timeout_s = 30) {
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// The fake, with every Exec held in the handler until `want` are running at once (or 10 s
// pass): the peak is how many requests the server really ran concurrently, counted, not timed.
class ConcurrencyProbe final : public Runtime {
 public:
  ConcurrencyProbe(Runtime* inner, int want) : inner_(inner), want_(want) {}
  int peak() const {
    std::lock_guard lock(mu_);
    return peak_;
  }
  nlohmann::json Info() const override { return inner_->Info(); }
  ExecResult Run(const ExecRequest& r) override { return inner_->Run(r); }
  StatusOr<std::string> Create(const SandboxSpec& s) override { return inner_->Create(s); }
  StatusOr<ExecResult> Exec(const std::string& id, const ExecSpec& e) override {
    {
      std::unique_lock lock(mu_);
      if (!deadline_) deadline_ = Clock::now() + std::chrono::seconds(10);
      peak_ = std::max(peak_, ++running_);
      cv_.notify_all();
      cv_.wait_until(lock, *deadline_, [&] { return peak_ >= want_; });
    }
    auto r = inner_->Exec(id, e);
    std::lock_guard lock(mu_);
    --running_;
    return r;
  }
  StatusOr<double> Revert(const std::string& id) override { return inner_->Revert(id); }
  StatusOr<double> Suspend(const std::string& id) override { return inner_->Suspend(id); }
  StatusOr<double> Resume(const std::string& id) override { return inner_->Resume(id); }
  StatusOr<double> Destroy(const std::string& id) override { return inner_->Destroy(id); }
  Status PutFile(const std::string& id, const std::string& path, const std::string& content,
                 int mode) override {
    return inner_->PutFile(id, path, content, mode);
  }
  std::vector<SandboxInfo> List() const override { return inner_->List(); }
  nlohmann::json GatewayLog(const std::string& id) const override {
    return inner_->GatewayLog(id);
  }

 private:
  Runtime* inner_;
  const int want_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int running_ = 0, peak_ = 0;
  std::optional<Clock::time_point> deadline_;
};

void SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

int StatusOf(const std::string& wire) {
  auto o = http::ParseResponse(wire, true, 1 << 20);
  return o.kind == http::ResponseOutcome::Kind::kComplete ? o.response.status : -1;
}

std::string Req(const std::string& method, const std::string& path, const std::string& body = "",
                const char* token = kAlice, const std::string& extra = "") {
  std::string s = method + " " + path + " HTTP/1.1\r\nHost: t\r\n";
  if (token) s += std::string("Authorization: Bearer ") + token + "\r\n";
  s += extra;
  if (!body.empty()) s += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return s + "\r\n" + body;
}

class ServerTest : public ::testing::TestWithParam<bool /*tcp*/> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sbx-server-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    server_.reset();
    service_.reset();
    fs::remove_all(dir_);
  }

  void Start(ServerOptions o = {}, Runtime* runtime = nullptr) {
    auto addr = GetParam() ? ParseListenAddress("127.0.0.1:0")
                           : ParseListenAddress("unix:" + dir_ + "/d.sock");
    ASSERT_TRUE(addr.ok());
    auto l = Listener::Open(*addr);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    auto auth = Authenticator::Create({{"alice", kAlice}, {"bob", kBob}});
    ASSERT_TRUE(auth.ok());
    service_ = std::make_unique<ApiService>(runtime ? runtime : &fake_, std::move(auth).value(),
                                            ServiceOptions{});
    if (o.request_timeout_s == ServerOptions{}.request_timeout_s) o.request_timeout_s = 5;
    o.access_log = [this](std::string_view line) {
      std::lock_guard lock(log_mu_);
      log_.emplace_back(line);
    };
    ApiService* svc = service_.get();
    server_ = std::make_unique<HttpServer>(
        std::move(l).value(), [svc](const HttpRequest& r) { return svc->Handle(r); },
        [svc](const HttpRequest& h) { return svc->HeadCheck(h); }, o);
    ASSERT_TRUE(server_->Start().ok());
  }

  std::string Url() const {
    const ListenAddress& a = server_->address();
    return a.kind == ListenAddress::Kind::kUnix ? a.ToString() : "http://" + a.ToString();
  }

  std::unique_ptr<Runtime> Client(const char* token = kAlice) {
    auto rt = client::OpenRemoteRuntime(Url(), token);
    EXPECT_TRUE(rt.ok()) << rt.status().ToString();
    return rt.ok() ? std::move(rt).value() : nullptr;
  }

  // One exchange on a fresh connection: send, read the answer (until the server closes; the
  // bound only ends a hang).
  std::string Exchange(const std::string& bytes, double timeout_s = 30) {
    host::UniqueFd fd = ConnectTo(server_->address());
    EXPECT_TRUE(fd.valid());
    SendAll(fd.get(), bytes);
    return ReadAll(fd.get(), timeout_s);
  }

  bool StillServes() {
    return StatusOf(Exchange(Req("GET", "/v1/info", "", kAlice, "Connection: close\r\n"))) == 200;
  }

  std::vector<std::string> Log() {
    std::lock_guard lock(log_mu_);
    return log_;
  }

  std::string dir_;
  FakeRuntime fake_;
  std::unique_ptr<Runtime> probe_;  // a wrapper of fake_ a test may serve instead
  std::unique_ptr<ApiService> service_;
  std::unique_ptr<HttpServer> server_;
  std::mutex log_mu_;
  std::vector<std::string> log_;
};

TEST_P(ServerTest, RemoteRuntimeRoundTrip) {
  Start();
  auto rt = Client();
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(rt->Info()["tenant"], "alice");
  SandboxSpec spec;
  spec.limits.memory_bytes = 1 << 28;
  auto id = rt->Create(spec);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(fake_.last_spec().tenant, "alice");
  ExecSpec e;
  e.command = "echo hello";
  auto r = rt->Exec(*id, e);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, ExecStatus::kOk);
  EXPECT_EQ(r->stdout_tail, "echo hello");
  std::string content(3 << 20, 'z');
  content[7] = '\0';
  ASSERT_TRUE(rt->PutFile(*id, "/work/big", content, 0600).ok());
  EXPECT_EQ(fake_.Get(*id)->files["/work/big"].first, content);
  EXPECT_TRUE(rt->Revert(*id).ok());
  EXPECT_TRUE(rt->Suspend(*id).ok());
  auto refused = rt->Exec(*id, e);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(rt->Resume(*id).ok());
  ASSERT_EQ(rt->List().size(), 1u);
  EXPECT_EQ(rt->List()[0].id, *id);
  EXPECT_EQ(rt->GatewayLog(*id).size(), 1u);
  auto secs = rt->Destroy(*id);
  ASSERT_TRUE(secs.ok());
  EXPECT_GT(*secs, 0);
  auto gone = rt->Exec(*id, e);
  EXPECT_EQ(gone.status().code(), Code::kNotFound);
  EXPECT_EQ(rt->Destroy("../../v1/info").status().code(), Code::kNotFound);  // never a path trick
  ExecRequest req;
  req.exec.command = "one shot";
  ExecResult once = rt->Run(req);
  EXPECT_EQ(once.status, ExecStatus::kOk);
  EXPECT_EQ(once.stdout_tail, "one shot");
  auto failed = rt->Create([] {
    SandboxSpec s;
    s.template_name = "fail-sandbox_unavailable";
    return s;
  }());
  EXPECT_EQ(failed.status().code(), Code::kSandboxUnavailable);
}

TEST_P(ServerTest, WrongTokenAbsentServerAndBadUrls) {
  Start();
  auto wrong = client::OpenRemoteRuntime(Url(), "alice-token-0123456780");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), Code::kUnauthenticated);
  EXPECT_EQ(client::OpenRemoteRuntime(Url(), "").status().code(), Code::kUnauthenticated);
  EXPECT_EQ(client::OpenRemoteRuntime(Url(), "alice-token-01234\r\nX: y").status().code(),
            Code::kUnauthenticated);
  EXPECT_EQ(client::OpenRemoteRuntime("unix:" + dir_ + "/none.sock", kAlice).status().code(),
            Code::kSandboxUnavailable);
  EXPECT_EQ(client::OpenRemoteRuntime("ftp://x", kAlice).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(client::OpenRemoteRuntime("http://127.0.0.1:99999", kAlice).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(client::OpenRemoteRuntime("http://:8080", kAlice).status().code(),
            Code::kInvalidArgument);
  // A base path is a URL's (sandboxd behind a proxy, sbx/http_client.h): nothing listens here.
  EXPECT_EQ(client::OpenRemoteRuntime("http://127.0.0.1:1/prefix", kAlice).status().code(),
            Code::kSandboxUnavailable);
}

TEST_P(ServerTest, TenantsCannotReachEachOthersSandboxesThroughTheClient) {
  Start();
  auto alice = Client(kAlice);
  auto bob = Client(kBob);
  auto id = alice->Create(SandboxSpec{});
  ASSERT_TRUE(id.ok());
  ExecSpec e;
  e.command = "cat /work/secret";
  EXPECT_EQ(bob->Exec(*id, e).status().code(), Code::kNotFound);
  EXPECT_EQ(bob->Revert(*id).status().code(), Code::kNotFound);
  EXPECT_EQ(bob->Destroy(*id).status().code(), Code::kNotFound);
  EXPECT_EQ(bob->PutFile(*id, "/work/x", "x", 0644).code(), Code::kNotFound);
  EXPECT_TRUE(bob->List().empty());
  EXPECT_EQ(fake_.Get(*id)->execs, 0);
  SandboxSpec for_alice;
  for_alice.tenant = "alice";
  EXPECT_EQ(bob->Create(for_alice).status().code(), Code::kPermissionDenied);
  EXPECT_TRUE(alice->Destroy(*id).ok());
}

TEST_P(ServerTest, GarbageNeverStopsTheServer) {
  Start();
  std::string head = "POST /v1/sandboxes HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " +
                     std::string(kAlice) + "\r\n";
  auto with_body = [&](const std::string& body) {
    return head + "Connection: close\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body;
  };
  struct Case {
    std::string name, bytes;
    int status;  // -1: no answer expected
  };
  std::vector<Case> cases = {
      {"garbage", "\x01\x02\x03 hello there\r\n\r\n", 400},
      {"TLS hello", std::string("\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", 11), 400},
      {"bare LF", "GET /v1/info HTTP/1.1\nHost: t\n\n", 400},
      {"huge head",
       "GET /v1/info HTTP/1.1\r\nHost: t\r\nX: " + std::string(20000, 'a') + "\r\n\r\n", 431},
      {"body too large", head + "Content-Length: 9000000\r\n\r\n{", 413},
      {"chunked", head + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 411},
      {"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400},
      // Well-formed HTTP with a bad body: a 400, and the connection stays usable (closed here
      // only because the request asks for it).
      {"malformed JSON", with_body("{\"templa"), 400},
      {"unknown key", with_body("{\"colour\":1}"), 400},
      {"invalid UTF-8", with_body("{\"template\":\"\xc3\x28\"}"), 400},
      {"deep JSON", with_body(std::string(200000, '[')), 400},
      {"truncated body", head + "Content-Length: 100\r\n\r\n{\"template\"", -1},
      {"only a method", "GET", -1},
  };
  for (const Case& c : cases) {
    host::UniqueFd fd = ConnectTo(server_->address());
    ASSERT_TRUE(fd.valid());
    SendAll(fd.get(), c.bytes);
    if (c.status == -1) shutdown(fd.get(), SHUT_WR);  // the peer gives up mid-request
    bool eof = false;
    std::string got = ReadAll(fd.get(), 30, &eof);
    EXPECT_TRUE(eof) << c.name << ": the server must close after a protocol error";
    if (c.status == -1) {
      EXPECT_TRUE(got.empty()) << c.name << ": " << got;
    } else {
      EXPECT_EQ(StatusOf(got), c.status) << c.name << ": " << got.substr(0, 300);
      auto o = http::ParseResponse(got, true, 1 << 20);
      EXPECT_EQ(json::parse(o.response.body)["error"]["code"], "invalid_argument") << c.name;
    }
    EXPECT_TRUE(StillServes()) << "after " << c.name;
  }
  EXPECT_EQ(fake_.size(), 0u);
}

TEST_P(ServerTest, AnUnauthenticatedBodyIsNeverRead) {
  // A server that waited for the body would answer only at its request timeout, 60 s here:
  // the 401 must come from the head alone, long before that.
  ServerOptions o;
  o.request_timeout_s = 60;
  Start(o);
  host::UniqueFd fd = ConnectTo(server_->address());
  // Announce 8 MiB and send none of it.
  SendAll(fd.get(), "POST /v1/sandboxes HTTP/1.1\r\nHost: t\r\nContent-Length: 8388608\r\n\r\n");
  auto t0 = Clock::now();
  bool eof = false;
  std::string got = ReadAll(fd.get(), 30, &eof);
  EXPECT_EQ(StatusOf(got), 401) << got;
  EXPECT_TRUE(eof);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 20.0);
}

TEST_P(ServerTest, SlowAndIdleConnectionsAreCut) {
  ServerOptions o;
  o.request_timeout_s = 0.3;
  o.idle_timeout_s = 0.3;
  Start(o);
  host::UniqueFd slow = ConnectTo(server_->address());
  SendAll(slow.get(), "GET /v1/info HTTP/1.1\r\nHost: t\r\n");  // and never the end of the head
  bool eof = false;
  std::string got = ReadAll(slow.get(), 30, &eof);  // ends at the server's 0.3 s cut
  EXPECT_EQ(StatusOf(got), 408) << got;
  EXPECT_TRUE(eof);
  host::UniqueFd idle = ConnectTo(server_->address());
  got = ReadAll(idle.get(), 30, &eof);
  EXPECT_TRUE(got.empty());
  EXPECT_TRUE(eof);
  EXPECT_TRUE(StillServes());
  EXPECT_EQ(server_->stats().timeouts, 1u);
}

TEST_P(ServerTest, KeepAlivePipeliningAndExpectContinue) {
  Start();
  host::UniqueFd fd = ConnectTo(server_->address());
  SendAll(fd.get(), Req("GET", "/v1/info") + Req("GET", "/v1/sandboxes") +
                        Req("GET", "/v1/info", "", kBob, "Connection: close\r\n"));
  bool eof = false;
  std::string got = ReadAll(fd.get(), 30, &eof);
  EXPECT_TRUE(eof);
  std::string_view rest(got);
  std::vector<std::string> bodies;
  while (!rest.empty()) {
    auto o = http::ParseResponse(rest, false, 1 << 20);
    ASSERT_EQ(o.kind, http::ResponseOutcome::Kind::kComplete);
    bodies.push_back(o.response.body);
    size_t head_end = rest.find("\r\n\r\n") + 4;
    rest.remove_prefix(head_end + o.response.body.size());
  }
  ASSERT_EQ(bodies.size(), 3u);
  EXPECT_EQ(json::parse(bodies[0])["tenant"], "alice");
  EXPECT_TRUE(json::parse(bodies[1]).contains("sandboxes"));
  EXPECT_EQ(json::parse(bodies[2])["tenant"], "bob");

  host::UniqueFd c = ConnectTo(server_->address());
  std::string body = R"({"template":"sandbox"})";
  SendAll(c.get(), "POST /v1/sandboxes HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " +
                       std::string(kAlice) + "\r\nExpect: 100-continue\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n");
  std::string interim = ReadUntil(c.get(), "\r\n\r\n", 30);  // the connection stays open
  EXPECT_EQ(interim, "HTTP/1.1 100 Continue\r\n\r\n");
  SendAll(c.get(), body);
  shutdown(c.get(), SHUT_WR);
  EXPECT_EQ(StatusOf(ReadAll(c.get(), 30)), 201);
}

TEST_P(ServerTest, TooManyConnectionsGet503) {
  ServerOptions o;
  o.max_connections = 2;
  Start(o);
  host::UniqueFd a = ConnectTo(server_->address()), b = ConnectTo(server_->address());
  ASSERT_TRUE(WaitUntil([&] { return server_->stats().open_connections == 2; }))
      << "both accepted";
  host::UniqueFd c = ConnectTo(server_->address());
  std::string got = ReadAll(c.get(), 30);
  EXPECT_EQ(StatusOf(got), 503) << got;
  a.Reset();
  b.Reset();
  ASSERT_TRUE(WaitUntil([&] { return server_->stats().open_connections == 0; }))
      << "the server saw both close";
  EXPECT_TRUE(StillServes());
  EXPECT_GE(server_->stats().refused, 1u);
}

TEST_P(ServerTest, ParallelClientsAreServedConcurrently) {
  ServerOptions o;
  o.workers = 8;
  // Every exec is held in the handler until all eight are in at once (10 s at most): a server
  // that runs fewer at a time never gets there.
  auto* probe = new ConcurrencyProbe(&fake_, 8);
  probe_.reset(probe);
  Start(o, probe);
  auto rt = Client();
  std::vector<std::string> ids;
  for (int i = 0; i < 8; ++i) ids.push_back(*rt->Create(SandboxSpec{}));
  ExecSpec e;
  e.command = "echo concurrently";
  std::vector<std::future<bool>> all;
  for (const auto& id : ids) {
    all.push_back(std::async(std::launch::async, [&, id] {
      auto c = client::OpenRemoteRuntime(Url(), kAlice);
      return c.ok() && (*c)->Exec(id, e).ok();
    }));
  }
  for (auto& f : all) EXPECT_TRUE(f.get());
  EXPECT_EQ(probe->peak(), 8) << "the server never ran the eight requests at once";
}

TEST_P(ServerTest, StopDrainsRunningRequestsAndRemovesTheSocket) {
  Start();
  auto rt = Client();
  std::string id = *rt->Create(SandboxSpec{});
  auto running = std::async(std::launch::async, [&] {
    ExecSpec e;
    e.command = "sleep 0.5";
    return rt->Exec(id, e).ok();
  });
  ASSERT_TRUE(WaitUntil([&] { return fake_.Get(id)->execs == 1; })) << "the request is running";
  EXPECT_TRUE(server_->Stop(30));  // returns as soon as the request is answered
  EXPECT_TRUE(running.get());  // its answer was delivered
  EXPECT_FALSE(ConnectTo(server_->address()).valid());
  if (!GetParam()) {
    EXPECT_FALSE(fs::exists(server_->address().path));
  }
}

TEST_P(ServerTest, StopGivesUpAfterTheDrainTimeout) {
  Start();
  auto rt = Client();
  std::string id = *rt->Create(SandboxSpec{});
  auto running = std::async(std::launch::async, [&] {
    ExecSpec e;
    e.command = "sleep 3";
    return rt->Exec(id, e).ok();
  });
  ASSERT_TRUE(WaitUntil([&] { return fake_.Get(id)->execs == 1; })) << "the request is running";
  auto t0 = Clock::now();
  EXPECT_FALSE(server_->Stop(0.1));
  // Gave up at its 0.1 s drain timeout, not when the 3 s handler ended.
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
  server_.reset();  // waits for the handler
  running.get();
}

TEST_P(ServerTest, AccessLogHasNoBodiesOrTokens) {
  Start();
  auto rt = Client();
  SandboxSpec s;
  s.secrets["API_KEY"] = "sekrit-value-42";
  auto id = rt->Create(s);
  ASSERT_TRUE(id.ok());
  Exchange(Req("GET", "/v1/info", "", nullptr, "Connection: close\r\n"));
  auto log = Log();
  ASSERT_GE(log.size(), 3u);
  bool saw_create = false, saw_401 = false;
  for (const auto& line : log) {
    EXPECT_EQ(line.find("sekrit"), std::string::npos) << line;
    EXPECT_EQ(line.find(kAlice), std::string::npos) << line;
    saw_create |= line.rfind("POST /v1/sandboxes tenant=alice status=201 ms=", 0) == 0;
    saw_401 |= line.rfind("GET /v1/info tenant=- status=401", 0) == 0;
  }
  EXPECT_TRUE(saw_create);
  EXPECT_TRUE(saw_401);
}

INSTANTIATE_TEST_SUITE_P(UnixAndTcp, ServerTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Tcp" : "Unix";
                         });

class ListenerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sbx-listener-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ListenerTest, UnixSocketModeBusyStaleAndForeignFiles) {
  auto addr = *ParseListenAddress("unix:" + dir_ + "/sub/d.sock");
  {
    auto l = Listener::Open(addr);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    EXPECT_FALSE(fs::exists(addr.path));  // not before Publish
    ASSERT_TRUE(l->Publish().ok());
    struct stat st {};
    ASSERT_EQ(lstat(addr.path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0660u);
    auto busy = Listener::Open(addr);
    ASSERT_FALSE(busy.ok());
    EXPECT_EQ(busy.status().code(), Code::kAlreadyExists);
    EXPECT_TRUE(fs::exists(addr.path));  // the failed second one did not remove the first's socket
  }
  EXPECT_FALSE(fs::exists(addr.path));  // removed with its owner
  // A stale socket (nobody listening) is replaced.
  {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    addr.path.copy(sa.sun_path, sizeof sa.sun_path - 1);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    close(fd);
  }
  {
    auto l = Listener::Open(addr);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    EXPECT_TRUE(l->Publish().ok());
  }
  // Any other file is never replaced.
  std::ofstream(addr.path) << "precious";
  auto refused = Listener::Open(addr);
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kInvalidArgument);
  std::ifstream in(addr.path);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "precious");
}

TEST_F(ListenerTest, TcpPortBusy) {
  auto l = Listener::Open(*ParseListenAddress("127.0.0.1:0"));
  ASSERT_TRUE(l.ok());
  EXPECT_GT(l->address().port, 0);
  auto again =
      Listener::Open(*ParseListenAddress("127.0.0.1:" + std::to_string(l->address().port)));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Code::kAlreadyExists);
}

}  // namespace
}  // namespace sbx::api
