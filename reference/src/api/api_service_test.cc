// The Execution API's routes, authentication and tenancy (PROD-1), over a fake runtime: every
// answer's status and error code, and that one tenant can neither see nor touch another's
// sandbox (the answer is byte for byte the one for a sandbox that does not exist).
#include "api/api_service.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "api/fake_runtime.h"
#include "wire/error_map.h"
#include "wire/wire.h"

namespace sbx::api {
namespace {

using nlohmann::json;

constexpr const char* kAlice = "alice-token-0123456789";
constexpr const char* kBob = "bob-token-0123456789abcdef";

class ApiServiceTest : public ::testing::Test {
 protected:
  ApiServiceTest() : service_(&fake_, MakeAuth(), MakeOptions()) {}

  static Authenticator MakeAuth() {
    auto a = Authenticator::Create({{"alice", kAlice}, {"bob", kBob}});
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return std::move(a).value();
  }
  static ServiceOptions MakeOptions() {
    ServiceOptions o;
    o.max_sandboxes["bob"] = 2;
    o.floors["bob"] = "gvisor";
    return o;
  }

  HttpResponse Call(const std::string& method, const std::string& path,
                    const std::string& body = "", const char* token = kAlice) {
    HttpRequest r;
    r.method = method;
    r.target = r.path = path;
    if (auto q = path.find('?'); q != std::string::npos) {
      r.path = path.substr(0, q);
      r.query = path.substr(q + 1);
    }
    if (token) r.headers.push_back({"authorization", std::string("Bearer ") + token});
    r.body = body;
    return service_.Handle(r);
  }

  static std::string Code(const HttpResponse& r) {
    auto j = json::parse(r.body);
    return j["error"]["code"].get<std::string>();
  }

  std::string CreateFor(const char* token) {
    auto r = Call("POST", "/v1/sandboxes", R"({"template":"sandbox"})", token);
    EXPECT_EQ(r.status, 201) << r.body;
    return json::parse(r.body)["sandbox"].get<std::string>();
  }

  FakeRuntime fake_;
  ApiService service_;
};

TEST_F(ApiServiceTest, EveryRouteNeedsAValidBearerToken) {
  for (auto [method, path] :
       std::vector<std::pair<std::string, std::string>>{{"GET", "/v1/info"},
                                                        {"POST", "/v1/sandboxes"},
                                                        {"GET", "/v1/sandboxes"},
                                                        {"POST", "/v1/sandboxes/x/exec"},
                                                        {"DELETE", "/v1/sandboxes/x"},
                                                        {"GET", "/nowhere"},
                                                        {"POST", "/v1/run"}}) {
    auto none = Call(method, path, "", nullptr);
    EXPECT_EQ(none.status, 401) << path;
    EXPECT_EQ(Code(none), "unauthenticated");
    bool has_challenge = false;
    for (const auto& h : none.headers)
      has_challenge |= h.name == "WWW-Authenticate" && h.value.rfind("Bearer", 0) == 0;
    EXPECT_TRUE(has_challenge) << path;
    auto wrong = Call(method, path, "", "alice-token-0123456780");
    EXPECT_EQ(wrong.status, 401) << path;
    EXPECT_EQ(Code(wrong), "unauthenticated");
  }
  HttpRequest r;
  r.method = "GET";
  r.path = "/v1/info";
  for (const char* v :
       {"Basic YWxpY2U6eA==", "Bearer", "Bearer ", "bearer alice-token-0123456789 x",
        "alice-token-0123456789", "Bearer alice-token-0123456789\t"}) {
    r.headers = {{"authorization", v}};
    EXPECT_EQ(service_.Handle(r).status, 401) << v;
  }
  r.headers = {{"authorization", "bEaReR   alice-token-0123456789"}};
  EXPECT_EQ(service_.Handle(r).status, 200);
  EXPECT_EQ(fake_.size(), 0u);  // nothing was created by any refused call
}

TEST_F(ApiServiceTest, HeadCheckRefusesBeforeTheBody) {
  HttpRequest head;
  head.method = "POST";
  head.path = "/v1/sandboxes";
  auto refused = service_.HeadCheck(head);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status, 401);
  head.headers = {{"authorization", std::string("Bearer ") + kBob}};
  EXPECT_FALSE(service_.HeadCheck(head).has_value());
}

TEST_F(ApiServiceTest, InfoNamesTheTenantAndTheTenantsFeature) {
  auto r = Call("GET", "/v1/info", "", kBob);
  ASSERT_EQ(r.status, 200);
  auto j = json::parse(r.body);
  EXPECT_EQ(j["tenant"], "bob");
  EXPECT_EQ(j["api"], "v1");
  EXPECT_EQ(j["name"], "fake");
  EXPECT_NE(std::find(j["features"].begin(), j["features"].end(), "tenants"), j["features"].end());
}

TEST_F(ApiServiceTest, CreateExecRevertSuspendResumeDestroy) {
  auto r = Call("POST", "/v1/sandboxes",
                R"({"template":"sandbox","limits":{"memory_bytes":268435456}})");
  ASSERT_EQ(r.status, 201) << r.body;
  std::string id = json::parse(r.body)["sandbox"];
  bool location = false;
  for (const auto& h : r.headers)
    location |= h.name == "Location" && h.value == "/v1/sandboxes/" + id;
  EXPECT_TRUE(location);
  EXPECT_EQ(fake_.last_spec().tenant, "alice");  // the authenticated tenant, always
  EXPECT_EQ(fake_.last_spec().limits.memory_bytes, 268435456);

  r = Call("POST", "/v1/sandboxes/" + id + "/exec", R"({"cmd":"echo hi","timeout_s":5})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto res = json::parse(r.body);
  EXPECT_EQ(res["status"], "ok");
  EXPECT_EQ(res["stdout"], "echo hi");
  // The adapter's exec object carries "sandbox": accepted when it names the same one.
  r = Call("POST", "/v1/sandboxes/" + id + "/exec", json{{"sandbox", id}, {"cmd", "x"}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;

  for (const char* op : {"revert", "suspend", "resume"}) {
    r = Call("POST", "/v1/sandboxes/" + id + "/" + op);
    ASSERT_EQ(r.status, 200) << op << r.body;
    EXPECT_TRUE(json::parse(r.body)["seconds"].is_number());
  }
  EXPECT_EQ(fake_.Get(id)->reverts, 1);
  r = Call("POST", "/v1/sandboxes/" + id + "/revert", json{{"sandbox", id}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  r = Call("DELETE", "/v1/sandboxes/" + id);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(fake_.Get(id).has_value());
  r = Call("DELETE", "/v1/sandboxes/" + id);
  EXPECT_EQ(r.status, 404);
}

TEST_F(ApiServiceTest, ExecAnswers200WhateverTheCommandDid) {
  std::string id = CreateFor(kAlice);
  auto r = Call("POST", "/v1/sandboxes/" + id + "/exec", R"({"cmd":"timeout"})");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["status"], "timeout");
}

TEST_F(ApiServiceTest, AnotherTenantsSandboxIsIndistinguishableFromNoSandbox) {
  std::string id = CreateFor(kAlice);
  const std::string ghost = "sb9999";
  struct Op {
    std::string method, suffix, body;
  };
  std::vector<Op> ops = {{"GET", "", ""},
                         {"DELETE", "", ""},
                         {"POST", "/exec", R"({"cmd":"cat /work/secret"})"},
                         {"POST", "/revert", ""},
                         {"POST", "/suspend", ""},
                         {"POST", "/resume", ""},
                         {"POST", "/files", R"({"path":"x","content_b64":"eA=="})"},
                         {"GET", "/gateway-log", ""}};
  for (const Op& op : ops) {
    auto theirs = Call(op.method, "/v1/sandboxes/" + id + op.suffix, op.body, kBob);
    // The same request for an ID that does not exist, with the ID replaced in the body.
    auto none = Call(op.method, "/v1/sandboxes/" + ghost + op.suffix, op.body, kBob);
    EXPECT_EQ(theirs.status, 404) << op.method << op.suffix;
    EXPECT_EQ(none.status, 404);
    std::string expected = none.body;
    expected.replace(expected.find(ghost), ghost.size(), id);
    EXPECT_EQ(theirs.body, expected) << op.method << op.suffix;
    EXPECT_EQ(theirs.headers.size(), none.headers.size());
  }
  // Alice's sandbox was not touched by any of it.
  auto box = fake_.Get(id);
  ASSERT_TRUE(box.has_value());
  EXPECT_EQ(box->execs, 0);
  EXPECT_EQ(box->reverts, 0);
  EXPECT_EQ(box->state, SandboxState::kRunning);
  EXPECT_TRUE(box->files.empty());
  // Bob's list is empty; Alice's has hers.
  EXPECT_EQ(json::parse(Call("GET", "/v1/sandboxes", "", kBob).body)["sandboxes"].size(), 0u);
  auto mine = json::parse(Call("GET", "/v1/sandboxes").body)["sandboxes"];
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0]["id"], id);
  EXPECT_EQ(mine[0]["tenant"], "alice");
}

TEST_F(ApiServiceTest, CreatingForAnotherTenantIsRefused) {
  auto r = Call("POST", "/v1/sandboxes", R"({"tenant":"bob"})");
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(Code(r), "permission_denied");
  r = Call("POST", "/v1/run", R"({"tenant":"bob","cmd":"id"})");
  EXPECT_EQ(r.status, 403);
  r = Call("POST", "/v1/sandboxes", R"({"tenant":"alice"})");
  EXPECT_EQ(r.status, 201);
  EXPECT_EQ(fake_.runs(), 0);
}

TEST_F(ApiServiceTest, BadBodiesAre400WithInvalidArgument) {
  std::string id = CreateFor(kAlice);
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::vector<std::pair<std::string, std::string>> cases = {
      {"/v1/sandboxes", ""},
      {"/v1/sandboxes", "not json"},
      {"/v1/sandboxes", "{\"template\":"},             // truncated
      {"/v1/sandboxes", "[1,2]"},                      // not an object
      {"/v1/sandboxes", R"({"tempalte":"sandbox"})"},  // unknown key
      {"/v1/sandboxes", R"({"limits":{"memory_bytes":-5}})"},
      {"/v1/sandboxes", R"({"limits":{"cpus":2}})"},
      {"/v1/sandboxes", R"({"egress":{"rules":[{"kind":"ftp","hosts":["a.b"],"ports":[1]}]}})"},
      {"/v1/sandboxes", "{\"template\":\"\xff\xfe\"}"},  // invalid UTF-8
      {"/v1/sandboxes", deep},
      {"/v1/sandboxes/" + id + "/exec", "{}"},
      {"/v1/sandboxes/" + id + "/exec", R"({"cmd":"x","timeout_s":-1})"},
      {"/v1/sandboxes/" + id + "/exec", R"({"cmd":"x","timeout_s":"5"})"},
      {"/v1/sandboxes/" + id + "/exec", R"({"cmd":"x","bogus":1})"},
      {"/v1/sandboxes/" + id + "/exec", R"({"cmd":"x","sandbox":"sb0002"})"},
      {"/v1/sandboxes/" + id + "/revert", R"({"force":true})"},
      {"/v1/sandboxes/" + id + "/revert", R"({"sandbox":"other"})"},
      {"/v1/sandboxes/" + id + "/revert", "nope"},
      {"/v1/sandboxes/" + id + "/files", R"({"path":"x","content_b64":"not base64!"})"},
      {"/v1/sandboxes/" + id + "/files", R"({"path":"x","content_b64":"eA="})"},
      {"/v1/sandboxes/" + id + "/files", R"({"path":"x","content_b64":"eA==","mode":70000})"},
      {"/v1/sandboxes/" + id + "/files", R"({"content_b64":"eA=="})"},
      {"/v1/sandboxes/" + id + "/files", R"({"path":"x","content_b64":"eA==","owner":0})"},
      {"/v1/run", R"({"template":"sandbox"})"},  // no command
      {"/v1/run", R"({"cmd":"id","colour":"red"})"},
  };
  for (const auto& [path, body] : cases) {
    auto r = Call("POST", path, body);
    EXPECT_EQ(r.status, 400) << path << " " << body.substr(0, 80) << " -> "
                             << r.body.substr(0, 200);
    EXPECT_EQ(Code(r), "invalid_argument") << path;
  }
  EXPECT_EQ(fake_.size(), 1u);
  EXPECT_EQ(fake_.Get(id)->execs, 0);
  // The unknown key is named, so a typo is found at once.
  auto r = Call("POST", "/v1/sandboxes", R"({"tempalte":"sandbox"})");
  EXPECT_NE(r.body.find("tempalte"), std::string::npos);
}

TEST_F(ApiServiceTest, UnknownRoutesMethodsAndQueries) {
  EXPECT_EQ(Call("GET", "/v2/info").status, 404);
  EXPECT_EQ(Call("GET", "/v1/info/").status, 404);
  EXPECT_EQ(Call("GET", "/v1/sandboxes/x/y/z").status, 404);
  EXPECT_EQ(Call("POST", "/v1/sandboxes/x/explode").status, 404);
  EXPECT_EQ(Code(Call("GET", "/")), "not_found");
  auto r = Call("DELETE", "/v1/info");
  EXPECT_EQ(r.status, 405);
  ASSERT_FALSE(r.headers.empty());
  EXPECT_EQ(r.headers[0].name, "Allow");
  EXPECT_EQ(r.headers[0].value, "GET");
  EXPECT_EQ(Call("GET", "/v1/sandboxes/x/exec").status, 405);
  EXPECT_EQ(Call("PUT", "/v1/sandboxes").status, 405);
  EXPECT_EQ(Call("GET", "/v1/info?verbose=1").status, 400);
  EXPECT_EQ(Call("GET", "/v1/info", "{}").status, 400);
}

TEST_F(ApiServiceTest, RuntimeErrorsMapThroughTheTable) {
  std::string id = CreateFor(kAlice);
  std::vector<std::pair<std::string, int>> cases = {{"failed_precondition", 409},
                                                    {"sandbox_unavailable", 503},
                                                    {"unsupported", 501},
                                                    {"permission_denied", 403},
                                                    {"internal", 500},
                                                    {"resource_exceeded", 429},
                                                    {"tool_error", 502},
                                                    {"timeout", 504},
                                                    {"already_exists", 409}};
  for (const auto& [code, http] : cases) {
    auto r = Call("POST", "/v1/sandboxes/" + id + "/exec", json{{"cmd", "fail " + code}}.dump());
    EXPECT_EQ(r.status, http) << code;
    EXPECT_EQ(Code(r), code);
    r = Call("POST", "/v1/sandboxes", json{{"template", "fail-" + code}}.dump());
    EXPECT_EQ(r.status, http) << code;
    EXPECT_EQ(Code(r), code);
  }
  // A suspended sandbox refuses exec: 409 failed_precondition.
  ASSERT_EQ(Call("POST", "/v1/sandboxes/" + id + "/suspend").status, 200);
  auto r = Call("POST", "/v1/sandboxes/" + id + "/exec", R"({"cmd":"id"})");
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(Code(r), "failed_precondition");
}

TEST_F(ApiServiceTest, MaxSandboxesPerTenant) {
  std::string a = CreateFor(kBob), b = CreateFor(kBob);
  auto r = Call("POST", "/v1/sandboxes", "{}", kBob);
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(Code(r), "resource_exceeded");
  EXPECT_EQ(Call("POST", "/v1/run", R"({"cmd":"id"})", kBob).status, 429);
  EXPECT_EQ(Call("POST", "/v1/sandboxes", "{}").status, 201);  // alice has her own budget
  ASSERT_EQ(Call("DELETE", "/v1/sandboxes/" + a, "", kBob).status, 200);
  EXPECT_EQ(Call("POST", "/v1/sandboxes", "{}", kBob).status, 201);
  // A failed create does not use up the budget.
  ASSERT_EQ(Call("DELETE", "/v1/sandboxes/" + b, "", kBob).status, 200);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(Call("POST", "/v1/sandboxes", R"({"template":"fail-internal"})", kBob).status, 500);
  }
  EXPECT_EQ(Call("POST", "/v1/sandboxes", "{}", kBob).status, 201);
  EXPECT_EQ(service_.Counts()["bob"], 2);
}

TEST_F(ApiServiceTest, PutFileAndGatewayLog) {
  std::string id = CreateFor(kAlice);
  std::string content("bin\0ary\xff", 8);
  auto r = Call(
      "POST", "/v1/sandboxes/" + id + "/files",
      json{{"path", "/work/in.bin"}, {"content_b64", wire::Base64Encode(content)}, {"mode", 0755}}
          .dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "{}");
  auto box = fake_.Get(id);
  EXPECT_EQ(box->files["/work/in.bin"].first, content);
  EXPECT_EQ(box->files["/work/in.bin"].second, 0755);
  r = Call("GET", "/v1/sandboxes/" + id + "/gateway-log");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["decisions"][0]["verdict"], "deny");
}

TEST_F(ApiServiceTest, RunIsOneShotForTheCallersTenant) {
  auto r = Call("POST", "/v1/run",
                R"({"template":"sandbox","env":{"A":"1"},"cmd":"echo run","timeout_s":3})", kBob);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["stdout"], "echo run");
  EXPECT_EQ(fake_.last_spec().tenant, "bob");
  EXPECT_EQ(fake_.last_spec().env.at("A"), "1");
  EXPECT_EQ(fake_.size(), 0u);
  EXPECT_EQ(service_.Counts().count("bob"), 0u);
}

// Issue 17: no sandbox at all is an error answer with its one code (and Retry-After where it
// means "not now"), never a 200 that a client must parse to learn nothing ran.
TEST_F(ApiServiceTest, RunWithoutASandboxIsAnErrorAnswerWithRetryAfter) {
  auto r = Call("POST", "/v1/run", R"({"template":"unavailable-sandbox_unavailable","cmd":"id"})");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(Code(r), "sandbox_unavailable");
  bool retry = false;
  for (const auto& [k, v] : r.headers) retry = retry || (k == "Retry-After" && v == "1");
  EXPECT_TRUE(retry);
  // A bad backend name keeps its own code (400, no Retry-After).
  r = Call("POST", "/v1/run", R"({"template":"unavailable-invalid_argument","cmd":"id"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Code(r), "invalid_argument");
  for (const auto& [k, v] : r.headers) EXPECT_NE(k, "Retry-After");
  // The tenant's budget is given back either way.
  EXPECT_EQ(service_.Counts().count("alice"), 0u);
  // 429 at the tenant's bound says when to come back too.
  std::string a = CreateFor(kBob), b = CreateFor(kBob);
  r = Call("POST", "/v1/run", R"({"cmd":"id"})", kBob);
  ASSERT_EQ(r.status, 429);
  retry = false;
  for (const auto& [k, v] : r.headers) retry = retry || k == "Retry-After";
  EXPECT_TRUE(retry);
}

TEST_F(ApiServiceTest, InfoReportsTheTenantsBound) {
  std::string a = CreateFor(kBob);
  auto r = Call("GET", "/v1/info", "", kBob);
  ASSERT_EQ(r.status, 200);
  auto j = json::parse(r.body);
  EXPECT_EQ(j["capacity"]["tenant"]["max_sandboxes"], 2);
  EXPECT_EQ(j["capacity"]["tenant"]["sandboxes"], 1);
  // SEL-2: a tenant is told its own floor, and only its own.
  EXPECT_EQ(j["tenant_floor"], "gvisor");
  auto alice = json::parse(Call("GET", "/v1/info").body);
  EXPECT_FALSE(alice.contains("tenant_floor")) << alice.dump();
}

TEST(ErrorMapTest, EveryCodeRoundTripsThroughItsNameAndStatus) {
  std::set<int> seen;
  for (Code c :
       {Code::kTimeout, Code::kResourceExceeded, Code::kToolError, Code::kSandboxUnavailable,
        Code::kInvalidArgument, Code::kNotFound, Code::kPermissionDenied, Code::kUnauthenticated,
        Code::kFailedPrecondition, Code::kInternal, Code::kUnsupported, Code::kAlreadyExists}) {
    EXPECT_EQ(wire::CodeFromName(CodeName(c)), c);
    int http = wire::HttpStatusFor(c);
    EXPECT_GE(http, 400) << CodeName(c);
    Status back = wire::StatusFromErrorResponse(http, wire::ErrorBody(c, "m"));
    EXPECT_EQ(back.code(), c);
    EXPECT_EQ(back.message(), "m");
  }
  EXPECT_EQ(wire::CodeFromName("no_such_code"), Code::kOk);
  // A body that is not an error object still yields a Status from the HTTP status.
  EXPECT_EQ(wire::StatusFromErrorResponse(404, "<html>").code(), Code::kNotFound);
  EXPECT_EQ(wire::StatusFromErrorResponse(418, "").code(), Code::kInvalidArgument);
  EXPECT_EQ(wire::StatusFromErrorResponse(599, "").code(), Code::kInternal);
}

TEST(AuthTest, ConfigurationErrors) {
  EXPECT_FALSE(Authenticator::Create({}).ok());
  EXPECT_FALSE(Authenticator::Create({{"alice", "short"}}).ok());
  EXPECT_FALSE(Authenticator::Create({{"alice", "has space in the token!"}}).ok());
  EXPECT_FALSE(Authenticator::Create({{"Alice", kAlice}}).ok());
  EXPECT_FALSE(Authenticator::Create({{"alice", kAlice}, {"bob", kAlice}}).ok());
  EXPECT_FALSE(Authenticator::Create({{"alice", kAlice}, {"alice", kBob}}).ok());
  auto a = Authenticator::Create({{"alice", kAlice}, {"bob", kBob}});
  ASSERT_TRUE(a.ok());
  std::string tenant, header = std::string("Bearer ") + kBob;
  EXPECT_EQ(a->Authenticate(&header, &tenant), Authenticator::Result::kOk);
  EXPECT_EQ(tenant, "bob");
  // A prefix or an extension of a token is wrong (no length leak through a short compare).
  for (std::string t :
       {std::string(kBob).substr(0, 20), std::string(kBob) + "x", std::string(kBob) + "="}) {
    header = "Bearer " + t;
    EXPECT_EQ(a->Authenticate(&header, &tenant), Authenticator::Result::kInvalid) << t;
  }
  EXPECT_EQ(a->Authenticate(nullptr, &tenant), Authenticator::Result::kMissing);
}

TEST(WireTest, Base64AndJsonSafety) {
  for (std::string s : {std::string(""), std::string("f"), std::string("fo"), std::string("foo"),
                        std::string("foob"), std::string("\0\xff\x10", 3)}) {
    auto back = wire::Base64Decode(wire::Base64Encode(s));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, s);
  }
  EXPECT_EQ(wire::Base64Encode("foobar"), "Zm9vYmFy");
  for (const char* bad :
       {"Zg=", "Zg=a", "Z===", "Zm9v YmFy", "Zh==", "Zm9=", "====", "Zm9vYmFy\n"}) {
    EXPECT_FALSE(wire::Base64Decode(bad).ok()) << bad;
  }
  // Binary output of a command never breaks the JSON answer.
  json j = {{"stdout", std::string("\xff\xfe ok", 5)}};
  EXPECT_NE(wire::DumpJson(j).find("ok"), std::string::npos);
  EXPECT_FALSE(wire::ParseJsonBody(std::string(wire::kMaxJsonDepth + 1, '[') +
                                   std::string(wire::kMaxJsonDepth + 1, ']'))
                   .ok());
  EXPECT_TRUE(wire::ParseJsonBody(std::string(wire::kMaxJsonDepth, '[') +
                                  std::string(wire::kMaxJsonDepth, ']'))
                  .ok());
  EXPECT_TRUE(
      wire::ParseJsonBody(R"({"s":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["})").ok());
}

TEST(WireTest, SpecsAndResultsSurviveTheWire) {
  SandboxSpec s;
  s.template_name = "t";
  s.backend = "native";
  s.tool = "curl";
  s.trust = Trust::kUntrusted;
  s.limits.cpu_millicores = 500;
  s.limits.memory_bytes = 1 << 28;
  s.egress.rules.push_back({"http", {"mirror.test"}, {80}});
  s.hosts["mirror.test"] = "127.0.0.1:8080";
  s.env["A"] = "b";
  s.secrets["K"] = "v";
  auto back = SandboxSpecFromJson(wire::SandboxSpecToJson(s));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->template_name, "t");
  EXPECT_EQ(back->trust, Trust::kUntrusted);
  EXPECT_EQ(back->limits.memory_bytes, 1 << 28);
  EXPECT_EQ(back->egress.rules.size(), 1u);
  EXPECT_EQ(back->hosts.at("mirror.test"), "127.0.0.1:8080");
  EXPECT_EQ(back->secrets.at("K"), "v");

  ExecSpec e;
  e.argv = {"ls", "-l"};
  e.timeout_s = 2.5;
  e.stdin_data = "in";
  auto eback = ExecSpecFromJson(wire::ExecSpecToJson(e));
  ASSERT_TRUE(eback.ok());
  EXPECT_EQ(eback->argv, e.argv);
  EXPECT_EQ(eback->timeout_s, 2.5);
  EXPECT_EQ(eback->stdin_data, "in");

  ExecResult r;
  r.status = ExecStatus::kResourceExceeded;
  r.state = SandboxState::kCrashed;
  r.exit_code = -1;
  r.signal = 9;
  r.stdout_tail = "o";
  r.reason = "memory limit 256Mi";
  r.error_code = "oom";
  r.stages.execute = 0.5;
  r.usage.oom_kills = 1;
  json j = r;
  auto rback = wire::ExecResultFromJson(json::parse(wire::DumpJson(j)));
  ASSERT_TRUE(rback.ok()) << rback.status().ToString();
  EXPECT_EQ(rback->status, ExecStatus::kResourceExceeded);
  EXPECT_EQ(rback->state, SandboxState::kCrashed);
  EXPECT_EQ(rback->signal, 9);
  EXPECT_EQ(rback->reason, r.reason);
  EXPECT_EQ(rback->stages.execute, 0.5);
  EXPECT_EQ(rback->stages.allocate, -1);
  EXPECT_EQ(rback->usage.oom_kills, 1);
  EXPECT_FALSE(wire::ExecResultFromJson(json{{"status", "exploded"}}).ok());
  EXPECT_FALSE(wire::ExecResultFromJson(json{{"exit", "zero"}}).ok());
  EXPECT_TRUE(wire::ExecResultFromJson(json{{"status", "ok"}, {"future_key", 1}}).ok());
}

}  // namespace
}  // namespace sbx::api
