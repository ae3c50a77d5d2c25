// sandboxd's API in front of the REAL runtime (namespaces, cgroups, mounts; needs root), served
// at once over a unix socket and TCP loopback, as the daemon does it: two tenants, the whole
// lifecycle, authentication and tenancy (PROD-1), bad requests that must not hurt the server,
// eight parallel clients, and no kernel object left behind afterwards.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "api/api_service.h"
#include "api/http_server.h"
#include "backend/common/leak_census.h"
#include "client/remote_runtime.h"
#include "host/fd.h"
#include "sbx/http_client.h"
#include "sbx/runtime.h"

namespace sbx::api {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr const char* kAlice = "alice-itest-token-0123456789";
constexpr const char* kBob = "bob-itest-token-0123456789xyz";

// What the runtime can leave on the host, scoped to this process: the shared leak census.
using backendtest::Census;
Census TakeCensus() { return backendtest::TakeCensus(); }

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

// Sends `bytes` (then half-closes if asked) and reads until the server closes or 10 s pass.
http::Response Exchange(const ListenAddress& a, const std::string& bytes, bool half_close = false) {
  host::UniqueFd fd = ConnectTo(a);
  EXPECT_TRUE(fd.valid());
  std::string_view rest(bytes);
  while (!rest.empty()) {
    ssize_t n = send(fd.get(), rest.data(), rest.size(), MSG_NOSIGNAL);
    if (n <= 0) break;
    rest.remove_prefix(static_cast<size_t>(n));
  }
  if (half_close) shutdown(fd.get(), SHUT_WR);
  std::string in;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline) {
    pollfd p{fd.get(), POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[65536];
    ssize_t n = recv(fd.get(), buf, sizeof buf, 0);
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  auto o = http::ParseResponse(in, true, 1 << 24);
  http::Response r = o.response;
  if (o.kind != http::ResponseOutcome::Kind::kComplete) r.status = -1;
  return r;
}

std::string Req(const std::string& method, const std::string& path, const std::string& body = "",
                const char* token = kAlice) {
  std::string s = method + " " + path + " HTTP/1.1\r\nHost: t\r\nConnection: close\r\n";
  if (token) s += std::string("Authorization: Bearer ") + token + "\r\n";
  if (!body.empty()) s += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return s + "\r\n" + body;
}

class Sandboxd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) return;
    baseline_ = new Census(TakeCensus());
    auto rt = Runtime::Open(RuntimeOptions{});
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    runtime_ = std::move(rt).value().release();
    auto auth = Authenticator::Create({{"alice", kAlice}, {"bob", kBob}});
    ASSERT_TRUE(auth.ok());
    ServiceOptions so;
    so.max_sandboxes["bob"] = 6;
    service_ = new ApiService(runtime_, std::move(auth).value(), so);
    dir_ =
        new std::string(fs::temp_directory_path() / ("sandboxd-itest-" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    for (const std::string& where : {"unix:" + *dir_ + "/d.sock", std::string("127.0.0.1:0")}) {
      auto l = Listener::Open(*ParseListenAddress(where));
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      ServerOptions o;
      o.workers = 8;
      ApiService* svc = service_;
      auto* s = new HttpServer(
          std::move(l).value(), [svc](const HttpRequest& r) { return svc->Handle(r); },
          [svc](const HttpRequest& h) { return svc->HeadCheck(h); }, o);
      ASSERT_TRUE(s->Start().ok());
      servers_.push_back(s);
    }
  }
  static void TearDownTestSuite() {
    for (HttpServer* s : servers_) {
      EXPECT_TRUE(s->Stop(10));
      delete s;
    }
    servers_.clear();
    delete service_;
    delete runtime_;  // destroys every sandbox still live
    runtime_ = nullptr;
    if (dir_) fs::remove_all(*dir_);
    delete dir_;
    if (baseline_) {
      // Sandbox teardown is synchronous for cgroups and processes; mounts die with namespaces.
      Census after = TakeCensus();
      for (auto deadline = Clock::now() + std::chrono::seconds(30);
           !(after == *baseline_) && Clock::now() < deadline;) {  // a leak never settles
        usleep(20000);
        after = TakeCensus();
      }
      EXPECT_EQ(after, *baseline_) << "sandboxd left kernel objects behind: " << after;
    }
    delete baseline_;
  }
  void SetUp() override {
    if (geteuid() != 0)
      GTEST_SKIP() << "LOUD SKIP: integration tests need root (namespaces, cgroups)";
    ASSERT_NE(runtime_, nullptr);
  }

  static std::vector<std::string> Urls() {
    std::vector<std::string> out;
    for (HttpServer* s : servers_) {
      const ListenAddress& a = s->address();
      out.push_back(a.kind == ListenAddress::Kind::kUnix ? a.ToString() : "http://" + a.ToString());
    }
    return out;
  }

  static std::unique_ptr<Runtime> Client(const std::string& url, const char* token) {
    auto rt = client::OpenRemoteRuntime(url, token);
    EXPECT_TRUE(rt.ok()) << url << ": " << rt.status().ToString();
    return rt.ok() ? std::move(rt).value() : nullptr;
  }

  static ExecSpec Cmd(const std::string& c, double timeout = 20) {
    ExecSpec e;
    e.command = c;
    e.timeout_s = timeout;
    return e;
  }

  static Census* baseline_;
  static Runtime* runtime_;
  static ApiService* service_;
  static std::vector<HttpServer*> servers_;
  static std::string* dir_;
};
Census* Sandboxd::baseline_ = nullptr;
Runtime* Sandboxd::runtime_ = nullptr;
ApiService* Sandboxd::service_ = nullptr;
std::vector<HttpServer*> Sandboxd::servers_;
std::string* Sandboxd::dir_ = nullptr;

TEST_F(Sandboxd, LifecycleOverUnixSocketAndTcp) {
  for (const std::string& url : Urls()) {
    SCOPED_TRACE(url);
    auto alice = Client(url, kAlice);
    ASSERT_NE(alice, nullptr);
    json info = alice->Info();
    EXPECT_EQ(info["tenant"], "alice");
    EXPECT_EQ(info["name"], "sandcheck-reference");
    auto id = alice->Create(SandboxSpec{});
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    auto r = alice->Exec(*id, Cmd("echo canary > /work/c; mkdir -p /tmp/x; cat /work/c; pwd"));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, ExecStatus::kOk) << r->reason;
    EXPECT_EQ(r->stdout_tail, "canary\n/work\n");
    EXPECT_EQ(r->exit_code, 0);
    // A failing command is still a 200 with its status in the result.
    r = alice->Exec(*id, Cmd("echo oops >&2; exit 7"));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->exit_code, 7);
    EXPECT_EQ(r->stderr_tail, "oops\n");
    r = alice->Exec(*id, Cmd("sleep 5", 0.3));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->status, ExecStatus::kTimeout);
    ASSERT_TRUE(alice->PutFile(*id, "/work/in.txt", "from the client\n", 0644).ok());
    r = alice->Exec(*id, Cmd("cat /work/in.txt"));
    EXPECT_EQ(r->stdout_tail, "from the client\n");
    auto reverted = alice->Revert(*id);
    ASSERT_TRUE(reverted.ok()) << reverted.status().ToString();
    r = alice->Exec(*id, Cmd("ls -A /work; ls /tmp"));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->stdout_tail, "") << "revert must leave /work and /tmp empty";
    auto listed = alice->List();
    EXPECT_TRUE(std::any_of(listed.begin(), listed.end(),
                            [&](const SandboxInfo& i) { return i.id == *id; }));
    auto destroyed = alice->Destroy(*id);
    ASSERT_TRUE(destroyed.ok()) << destroyed.status().ToString();
    EXPECT_EQ(alice->Exec(*id, Cmd("true")).status().code(), Code::kNotFound);
    EXPECT_EQ(alice->Destroy(*id).status().code(), Code::kNotFound);
    // One-shot over the API.
    ExecRequest once;
    once.exec.command = "echo once";
    ExecResult o = alice->Run(once);
    EXPECT_EQ(o.status, ExecStatus::kOk) << o.reason;
    EXPECT_EQ(o.stdout_tail, "once\n");
  }
}

TEST_F(Sandboxd, TokensAreRequiredAndTenantsAreIsolated) {
  const std::vector<std::string> urls = Urls();
  auto bob = Client(urls[0], kBob);
  auto id = bob->Create(SandboxSpec{});
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  ASSERT_TRUE(bob->Exec(*id, Cmd("echo bob-secret > /work/canary")).ok());
  const std::string ghost = "sb000000000000";
  for (HttpServer* s : servers_) {
    const ListenAddress& a = s->address();
    SCOPED_TRACE(a.ToString());
    // No token, a wrong token, a token of the wrong shape: 401 with a challenge.
    for (const char* token :
         {static_cast<const char*>(nullptr), "alice-itest-token-0123456780", "x"}) {
      auto r = Exchange(
          a, Req("POST", "/v1/sandboxes/" + *id + "/exec", R"({"cmd":"cat /work/canary"})", token));
      EXPECT_EQ(r.status, 401);
      ASSERT_NE(r.Header("www-authenticate"), nullptr);
      EXPECT_EQ(json::parse(r.body)["error"]["code"], "unauthenticated");
    }
    EXPECT_EQ(client::OpenRemoteRuntime(urls[0], "alice-itest-token-0123456780").status().code(),
              Code::kUnauthenticated);
    // Alice and bob's sandbox: exactly the answers for a sandbox that does not exist.
    struct Op {
      std::string method, suffix, body;
    };
    for (const Op& op :
         std::vector<Op>{{"GET", "", ""},
                         {"POST", "/exec", R"({"cmd":"cat /work/canary"})"},
                         {"POST", "/revert", ""},
                         {"POST", "/suspend", ""},
                         {"POST", "/resume", ""},
                         {"POST", "/files", R"({"path":"/work/canary","content_b64":"eA=="})"},
                         {"GET", "/gateway-log", ""},
                         {"DELETE", "", ""}}) {
      auto theirs =
          Exchange(a, Req(op.method, "/v1/sandboxes/" + *id + op.suffix, op.body, kAlice));
      auto none =
          Exchange(a, Req(op.method, "/v1/sandboxes/" + ghost + op.suffix, op.body, kAlice));
      EXPECT_EQ(theirs.status, 404) << op.method << op.suffix;
      std::string expected = none.body;
      ASSERT_NE(expected.find(ghost), std::string::npos) << expected;
      expected.replace(expected.find(ghost), ghost.size(), *id);
      EXPECT_EQ(theirs.body, expected) << op.method << op.suffix;
    }
    auto list = Exchange(a, Req("GET", "/v1/sandboxes", "", kAlice));
    ASSERT_EQ(list.status, 200);
    for (const auto& sb : json::parse(list.body)["sandboxes"]) EXPECT_NE(sb["id"], *id);
  }
  // Bob's sandbox is untouched: still running, canary in place (no revert, no exec by alice).
  auto r = bob->Exec(*id, Cmd("cat /work/canary"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_tail, "bob-secret\n");
  EXPECT_TRUE(bob->Destroy(*id).ok());
}

TEST_F(Sandboxd, BadRequestsAreRefusedAndTheServerKeepsServing) {
  auto alice = Client(Urls()[1], kAlice);
  auto id = alice->Create(SandboxSpec{});
  ASSERT_TRUE(id.ok());
  const std::string exec_path = "/v1/sandboxes/" + *id + "/exec";
  std::string auth = std::string("Authorization: Bearer ") + kAlice + "\r\n";
  struct Case {
    std::string name, bytes;
    int status;
    bool half_close = false;
  };
  std::vector<Case> cases = {
      {"garbage", "\x13\x37 garbage garbage\r\n\r\n", 400},
      {"malformed JSON", Req("POST", exec_path, "{\"cmd\": \"ls\""), 400},
      {"JSON array", Req("POST", exec_path, "[\"ls\"]"), 400},
      {"unknown key", Req("POST", exec_path, R"({"cmd":"ls","privileged":true})"), 400},
      {"unknown create key",
       Req("POST", "/v1/sandboxes", R"({"template":"sandbox","mounts":["/"]})"), 400},
      {"bad limit", Req("POST", "/v1/sandboxes", R"({"limits":{"memory_bytes":"lots"}})"), 400},
      {"bad timeout", Req("POST", exec_path, R"({"cmd":"ls","timeout_s":0})"), 400},
      {"huge header",
       "GET /v1/info HTTP/1.1\r\nHost: t\r\n" + auth + "X-Pad: " + std::string(32768, 'p') +
           "\r\n\r\n",
       431},
      {"body over 8 MiB",
       "POST " + exec_path + " HTTP/1.1\r\nHost: t\r\n" + auth + "Content-Length: 8388609\r\n\r\n{",
       413},
      {"truncated body",
       "POST " + exec_path + " HTTP/1.1\r\nHost: t\r\n" + auth +
           "Content-Length: 50\r\n\r\n{\"cmd\"",
       -1, true},
      {"chunked",
       "POST " + exec_path + " HTTP/1.1\r\nHost: t\r\n" + auth +
           "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
       411},
  };
  for (HttpServer* s : servers_) {
    for (const Case& c : cases) {
      auto r = Exchange(s->address(), c.bytes, c.half_close);
      EXPECT_EQ(r.status, c.status) << s->address().ToString() << " " << c.name << ": " << r.body;
      if (c.status > 0) {
        EXPECT_EQ(json::parse(r.body)["error"]["code"], "invalid_argument") << c.name;
      }
      // Still serving, and the sandbox still works.
      auto ok = alice->Exec(*id, Cmd("echo alive"));
      ASSERT_TRUE(ok.ok()) << "after " << c.name << ": " << ok.status().ToString();
      EXPECT_EQ(ok->stdout_tail, "alive\n");
    }
  }
  EXPECT_TRUE(alice->Destroy(*id).ok());
}

TEST_F(Sandboxd, EightParallelClients) {
  const std::vector<std::string> urls = Urls();
  auto t0 = Clock::now();
  std::vector<std::future<std::string>> clients;
  for (int i = 0; i < 8; ++i) {
    clients.push_back(std::async(std::launch::async, [&, i]() -> std::string {
      const char* token = i % 2 ? kBob : kAlice;
      auto rt = client::OpenRemoteRuntime(urls[static_cast<size_t>(i / 2 % 2)], token);
      if (!rt.ok()) return "open: " + rt.status().ToString();
      auto id = (*rt)->Create(SandboxSpec{});
      if (!id.ok()) return "create: " + id.status().ToString();
      for (int k = 0; k < 3; ++k) {
        auto r =
            (*rt)->Exec(*id, Cmd("echo " + std::to_string(i) + " >> /work/log; wc -l < /work/log"));
        if (!r.ok()) return "exec: " + r.status().ToString();
        if (r->stdout_tail != std::to_string(k + 1) + "\n") return "exec output: " + r->stdout_tail;
      }
      if (auto rv = (*rt)->Revert(*id); !rv.ok()) return "revert: " + rv.status().ToString();
      auto r = (*rt)->Exec(*id, Cmd("ls -A /work"));
      if (!r.ok() || !r->stdout_tail.empty())
        return "after revert: " + (r.ok() ? r->stdout_tail : "");
      // Each client sees its own sandbox and none of the other tenant's.
      for (const SandboxInfo& info : (*rt)->List()) {
        if (info.tenant != (i % 2 ? "bob" : "alice")) return "list shows tenant " + info.tenant;
      }
      if (auto d = (*rt)->Destroy(*id); !d.ok()) return "destroy: " + d.status().ToString();
      return "";
    }));
  }
  for (auto& c : clients) EXPECT_EQ(c.get(), "");
  double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  RecordProperty("eight_clients_wall_s", std::to_string(wall));
  EXPECT_TRUE(service_->Counts().empty());
  EXPECT_TRUE(runtime_->List().empty());
}

TEST_F(Sandboxd, ApiOverheadAgainstTheRuntimeInProcess) {
  // Not a gate: the cost of the HTTP layer per call, for docs/sandboxd.md, measured as the
  // median of revert + first command, in process and over each transport.
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto measure = [&](Runtime* rt) {
    auto id = rt->Create(SandboxSpec{});
    EXPECT_TRUE(id.ok());
    std::vector<double> samples;
    for (int i = 0; i < 15; ++i) {
      auto t0 = Clock::now();
      EXPECT_TRUE(rt->Revert(*id).ok());
      EXPECT_TRUE(rt->Exec(*id, Cmd("true")).ok());
      samples.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    EXPECT_TRUE(rt->Destroy(*id).ok());
    return median(samples);
  };
  double local = measure(runtime_);
  std::string line = "revert+exec p50: in-process " + std::to_string(local) + " ms";
  for (const std::string& url : Urls()) {
    auto rt = Client(url, kAlice);
    double remote = measure(rt.get());
    std::vector<double> info;  // a call that does nothing: the HTTP layer alone
    for (int i = 0; i < 200; ++i) {
      auto t0 = Clock::now();
      rt->Info();
      info.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    line += ", " + url.substr(0, 4) + " " + std::to_string(remote) + " ms (GET /v1/info p50 " +
            std::to_string(median(info)) + " ms)";
    RecordProperty(url.substr(0, 4) + "_revert_exec_p50_ms", std::to_string(remote));
  }
  RecordProperty("local_revert_exec_p50_ms", std::to_string(local));
  std::cout << line << "\n";
}

TEST(SandboxdShutdown, DestroyingTheRuntimeReclaimsEverySandbox) {
  if (geteuid() != 0) GTEST_SKIP() << "LOUD SKIP: integration tests need root";
  Census before = TakeCensus();
  {
    auto rt = Runtime::Open(RuntimeOptions{});
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    auto auth = Authenticator::Create({{"alice", kAlice}});
    ApiService service(rt->get(), std::move(auth).value(), ServiceOptions{});
    std::string dir = fs::temp_directory_path() / ("sandboxd-shutdown-" + std::to_string(getpid()));
    auto l = Listener::Open(*ParseListenAddress("unix:" + dir + "/d.sock"));
    ASSERT_TRUE(l.ok());
    HttpServer server(
        std::move(l).value(), [&](const HttpRequest& r) { return service.Handle(r); },
        [&](const HttpRequest& h) { return service.HeadCheck(h); }, ServerOptions{});
    ASSERT_TRUE(server.Start().ok());
    auto client = client::OpenRemoteRuntime("unix:" + dir + "/d.sock", kAlice);
    ASSERT_TRUE(client.ok());
    for (int i = 0; i < 3; ++i) {
      auto id = (*client)->Create(SandboxSpec{});
      ASSERT_TRUE(id.ok());
      ExecSpec bg;
      bg.command = "sleep 60 >/dev/null 2>&1 & echo started";
      ASSERT_TRUE((*client)->Exec(*id, bg).ok());
    }
    EXPECT_EQ(service.Counts()["alice"], 3);
    EXPECT_FALSE(TakeCensus() == before);
    EXPECT_TRUE(server.Stop(5));
    EXPECT_FALSE(fs::exists(dir + "/d.sock"));
    fs::remove_all(dir);
  }  // the runtime goes here, as in sandboxd on SIGTERM
  Census after = TakeCensus();
  for (auto deadline = Clock::now() + std::chrono::seconds(30);
       !(after == before) && Clock::now() < deadline;) {  // mounts die with their namespaces
    usleep(20000);
    after = TakeCensus();
  }
  EXPECT_EQ(after, before) << "before " << before << " after " << after;
}

}  // namespace
}  // namespace sbx::api
