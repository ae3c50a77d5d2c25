// sandboxd's configuration file, command line and listen addresses: the documented schema is
// accepted, every deviation is refused with a message that names it.
#include "api/config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "api/listener.h"

namespace sbx::api {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Each config text is refused as kInvalidArgument with a message holding its needle, and never
// echoing `secret` (a token would end up in logs).
void ExpectEachRefused(const std::vector<std::pair<std::string, std::string>>& cases,
                       const std::string& dir, const std::string& secret) {
  for (const auto& [text, needle] : cases) {
    auto bad = ParseDaemonConfig(json::parse(text), dir);
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_EQ(bad.status().code(), Code::kInvalidArgument) << text;
    EXPECT_NE(bad.status().message().find(needle), std::string::npos)
        << text << " -> " << bad.status().message();
    if (!secret.empty()) {
      EXPECT_EQ(bad.status().message().find(secret), std::string::npos) << text;
    }
  }
}

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sbx-config-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& content, mode_t mode) {
    std::string p = dir_ + "/" + name;
    std::ofstream(p) << content;
    chmod(p.c_str(), mode);
    return p;
  }

  std::string dir_;
};

TEST_F(ConfigTest, TheDocumentedExampleParses) {
  Write("bob.token", "bob-token-from-a-file-0123\n", 0600);
  std::string path = Write("c.json", R"({
    "tenants": {
      "alice": {"token": "alice-token-0123456789"},
      "bob": {"token_file": "bob.token", "max_sandboxes": 4, "floor": "gvisor"}
    },
    "listen": "127.0.0.1:8080",
    "workers": 4,
    "max_connections": 32,
    "drain_timeout_s": 5
  })",
                           0600);
  auto c = LoadDaemonConfig(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->tenants.size(), 2u);
  EXPECT_EQ(c->tenants[0].name, "alice");
  EXPECT_EQ(c->tenants[0].max_sandboxes, 16);
  EXPECT_EQ(c->tenants[1].token, "bob-token-from-a-file-0123");  // newline stripped
  EXPECT_EQ(c->tenants[1].max_sandboxes, 4);
  EXPECT_EQ(c->tenants[0].floor, "");
  EXPECT_EQ(c->tenants[1].floor, "gvisor");
  EXPECT_EQ(c->listen, "127.0.0.1:8080");
  EXPECT_EQ(c->workers, 4);
  EXPECT_TRUE(c->warnings.empty());
}

TEST_F(ConfigTest, DefaultsAndTheWorldReadableWarning) {
  std::string path =
      Write("c.json", R"({"tenants": {"alice": {"token": "alice-token-0123456789"}}})", 0644);
  auto c = LoadDaemonConfig(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->listen, "unix:/run/sandcheck/sandboxd.sock");
  EXPECT_FALSE(c->allow_remote);
  EXPECT_EQ(c->workers, 16);
  EXPECT_EQ(c->max_connections, 256);
  ASSERT_EQ(c->warnings.size(), 1u);
  EXPECT_NE(c->warnings[0].find("readable by others"), std::string::npos);
}

TEST_F(ConfigTest, EveryDeviationIsAnErrorNamingIt) {
  const std::string ok_tenant = R"("alice": {"token": "alice-token-0123456789"})";
  std::vector<std::pair<std::string, std::string>> cases = {
      {"{}", "tenants"},
      {R"({"tenants": {}})", "tenants"},
      {R"({"tenants": []})", "tenants"},
      {"{\"tenants\": {" + ok_tenant + "}, \"lisen\": \"x\"}", "lisen"},
      {R"({"tenants": {"alice": {"token": "alice-token-0123456789", "floor": "vm"}}})",
       "alice.floor"},
      {R"({"tenants": {"alice": {"token": "alice-token-0123456789", "admin": true}}})", "admin"},
      {R"({"tenants": {"alice": {}}})", "exactly one of token and token_file"},
      {R"({"tenants": {"alice": {"token": "alice-token-0123456789", "token_file": "x"}}})",
       "exactly one"},
      {R"({"tenants": {"alice": {"token": "short"}}})", "16..512"},
      {R"({"tenants": {"alice": {"token": 12345678901234567890}}})", "expected a string"},
      {R"({"tenants": {"Alice!": {"token": "alice-token-0123456789"}}})", "Alice!"},
      {R"({"tenants": {"alice": {"token": "alice-token-0123456789", "max_sandboxes": 0}}})",
       "max_sandboxes"},
      {R"({"tenants": {"alice": {"token": "alice-token-0123456789", "max_sandboxes": "4"}}})",
       "max_sandboxes"},
      {R"({"tenants": {"a": {"token": "same-token-0123456789"}, "b": {"token": "same-token-0123456789"}}})",
       "same token"},
      {R"({"tenants": {"alice": {"token_file": "missing.token"}}})", "missing.token"},
      {"{\"tenants\": {" + ok_tenant + "}, \"workers\": 0}", "workers"},
      {"{\"tenants\": {" + ok_tenant + "}, \"allow_remote\": \"yes\"}", "allow_remote"},
      {"{\"tenants\": {" + ok_tenant + "}, \"drain_timeout_s\": -1}", "drain_timeout_s"},
      {"{\"tenants\": {" + ok_tenant + "}, \"listen\": 8080}", "listen"},
  };
  ExpectEachRefused(cases, dir_, "alice-token-0123456789");
  auto bad_json = LoadDaemonConfig(Write("bad.json", "{\"tenants\": ", 0600));
  EXPECT_FALSE(bad_json.ok());
  EXPECT_FALSE(LoadDaemonConfig(dir_ + "/nope.json").ok());
}

// BK-7: the remote backend's workers.
TEST_F(ConfigTest, RemoteWorkersParseAndEveryDeviationIsNamed) {
  const std::string head = R"({"tenants": {"alice": {"token": "alice-token-0123456789"}}, )";
  auto c = ParseDaemonConfig(json::parse(head + R"("remote_workers": [
      {"name": "w1", "url": "unix:/run/w1.sock", "tokens": {"alice": "alice-on-w1-0123456789"}},
      {"name": "w2", "url": "http://127.0.0.1:8081", "tokens": {"alice": "alice-on-w2-0123456789"}},
      {"name": "w3", "url": "http://[::1]:8082", "tokens": {"alice": "alice-on-w3-0123456789"}},
      {"name": "w4", "url": "http://localhost:8083", "tokens": {"alice": "alice-on-w4-0123456789"}}],
      "remote_call_timeout_s": 2.5})"),
                             dir_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->remote_workers.size(), 4u);
  EXPECT_EQ(c->remote_workers[1].name, "w2");
  EXPECT_EQ(c->remote_workers[1].url, "http://127.0.0.1:8081");
  EXPECT_EQ(c->remote_workers[0].tokens.at("alice"), "alice-on-w1-0123456789");
  EXPECT_DOUBLE_EQ(c->remote_call_timeout_s, 2.5);
  auto none = ParseDaemonConfig(json::parse(head + R"("workers": 2})"), dir_);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->remote_workers.empty());
  EXPECT_DOUBLE_EQ(none->remote_call_timeout_s, 10);

  const std::string w = R"({"name": "w1", "url": "unix:/run/w1.sock", "tokens": {"alice": "alice-on-w1-0123456789"}})";
  std::vector<std::pair<std::string, std::string>> cases = {
      {R"("remote_workers": {})", "remote_workers: expected an array"},
      {R"("remote_workers": [7])", "remote_workers[0]: expected an object"},
      {R"("remote_workers": [{"url": "unix:/x", "tokens": {"alice": "alice-on-w1-0123456789"}}])",
       "remote_workers[0].name"},
      {R"("remote_workers": [{"name": "w1", "tokens": {"alice": "alice-on-w1-0123456789"}}])",
       "remote_workers[0].url"},
      {R"("remote_workers": [{"name": "w1", "url": "ftp://x", "tokens": {"alice": "alice-on-w1-0123456789"}}])",
       "remote_workers[0].url"},
      {R"("remote_workers": [{"name": "w1", "url": "unix:/x", "tokens": {}}])", "tokens: required"},
      {R"("remote_workers": [{"name": "w1", "url": "unix:/x", "tokens": {"alice": "short"}}])",
       "remote_workers[0].tokens.alice"},
      {R"("remote_workers": [{"name": "w1", "url": "unix:/x", "tokens": {"alice": "alice-on-w1-0123456789"}, "tls": true}])",
       "tls"},
      {R"("remote_workers": [)" + w + ", " + w + "]", "'w1' twice"},
      {R"("remote_workers": [{"name": "w1", "url": "http://10.1.2.3:8080", "tokens": {"alice": "alice-on-w1-0123456789"}}])",
       "not on this host"},
      {R"("remote_workers": [{"name": "w1", "url": "http://worker.example:8080", "tokens": {"alice": "alice-on-w1-0123456789"}}])",
       "in clear"},
      {R"("remote_call_timeout_s": 0)", "remote_call_timeout_s"},
      {R"("remote_call_timeout_s": "5")", "remote_call_timeout_s"},
  };
  for (auto& [text, needle] : cases) text = head + text + "}";
  ExpectEachRefused(cases, dir_, "alice-on-w1-0123456789");
}

// Issue 14, TLS: the server's "tls" object. The files only need to exist here (sandboxd loads
// them at start: tls_server_test.cc); paths are relative to the config file; the key is a secret.
TEST_F(ConfigTest, TlsParsesAndEveryDeviationIsNamed) {
  Write("server.pem", "cert", 0644);
  Write("server.key", "key", 0600);
  Write("world.key", "key", 0644);
  Write("ca.pem", "ca", 0644);
  fs::create_directory(dir_ + "/adir");
  const std::string head = R"({"tenants": {"alice": {"token": "alice-token-0123456789"}}, )";
  auto c = ParseDaemonConfig(
      json::parse(head + R"("listen": "127.0.0.1:8443", "tls": {"cert_file": "server.pem",
          "key_file": ")" + dir_ + R"(/server.key", "client_ca_file": "ca.pem"}})"),
      dir_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->tls.has_value());
  EXPECT_EQ(c->tls->cert_file, dir_ + "/server.pem");
  EXPECT_EQ(c->tls->key_file, dir_ + "/server.key");
  EXPECT_EQ(c->tls->client_ca_file, dir_ + "/ca.pem");
  auto no_mtls = ParseDaemonConfig(
      json::parse(head + R"("tls": {"cert_file": "server.pem", "key_file": "server.key"}})"), dir_);
  ASSERT_TRUE(no_mtls.ok()) << no_mtls.status().ToString();
  EXPECT_EQ(no_mtls->tls->client_ca_file, "");
  auto none = ParseDaemonConfig(json::parse(head + R"("workers": 2})"), dir_);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->tls.has_value());

  std::vector<std::pair<std::string, std::string>> cases = {
      {R"("tls": true)", "config.tls: expected a JSON object"},
      {R"("tls": {})", "cert_file and key_file are required"},
      {R"("tls": {"cert_file": "server.pem"})", "cert_file and key_file are required"},
      {R"("tls": {"key_file": "server.key"})", "cert_file and key_file are required"},
      {R"("tls": {"cert_file": "server.pem", "key_file": "server.key", "ciphers": "x"})",
       "unknown key 'ciphers'"},
      {R"("tls": {"cert_file": "missing.pem", "key_file": "server.key"})",
       "config.tls.cert_file"},
      {R"("tls": {"cert_file": "server.pem", "key_file": "missing.key"})",
       "config.tls.key_file"},
      {R"("tls": {"cert_file": "server.pem", "key_file": "world.key"})",
       "readable by others"},
      {R"("tls": {"cert_file": "adir", "key_file": "server.key"})", "not a regular file"},
      {R"("tls": {"cert_file": 7, "key_file": "server.key"})", "cert_file: expected a file name"},
      {R"("tls": {"cert_file": "", "key_file": "server.key"})", "cert_file: expected a file name"},
      {R"("tls": {"cert_file": "server.pem", "key_file": "server.key", "client_ca_file": "no.pem"})",
       "config.tls.client_ca_file"},
  };
  for (auto& [text, needle] : cases) text = head + text + "}";
  ExpectEachRefused(cases, dir_, "");
}

// Issue 14, TLS to workers: https:// workers need trust, may then be anywhere; plain http://
// stays loopback-only; trust keys on a plain url are a mistake, named.
TEST_F(ConfigTest, RemoteWorkersOverHttpsNeedTrust) {
  Write("ca.pem", "ca", 0644);
  Write("client.pem", "cert", 0644);
  Write("client.key", "key", 0600);
  Write("world.key", "key", 0644);
  const std::string pin = "AB:" + std::string(62, 'c');  // 2 + 62 = 64 hex digits
  const std::string head = R"({"tenants": {"alice": {"token": "alice-token-0123456789"}}, )";
  const std::string tok = R"("tokens": {"alice": "alice-on-w1-0123456789"})";
  auto c = ParseDaemonConfig(json::parse(head + R"("remote_workers": [
      {"name": "w1", "url": "https://10.1.2.3:8443", "ca_file": "ca.pem", )" + tok + R"(},
      {"name": "w2", "url": "https://worker.example", "pin_sha256": ")" + pin + R"(", )" + tok +
                                             R"(},
      {"name": "w3", "url": "https://[2001:db8::1]:9443", "ca_file": "ca.pem",
       "client_cert_file": "client.pem", "client_key_file": "client.key", )" + tok + R"(}]})"),
                             dir_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->remote_workers.size(), 3u);
  EXPECT_EQ(c->remote_workers[0].ca_file, dir_ + "/ca.pem");
  EXPECT_EQ(c->remote_workers[0].pin_sha256, "");
  EXPECT_EQ(c->remote_workers[1].pin_sha256, "ab" + std::string(62, 'c'));  // normalised
  EXPECT_EQ(c->remote_workers[1].ca_file, "");
  EXPECT_EQ(c->remote_workers[2].client_cert_file, dir_ + "/client.pem");
  EXPECT_EQ(c->remote_workers[2].client_key_file, dir_ + "/client.key");

  auto w = [&](const std::string& url, const std::string& extra) {
    return R"("remote_workers": [{"name": "w1", "url": ")" + url + R"(", )" + extra +
           (extra.empty() ? "" : ", ") + tok + "}]";
  };
  std::vector<std::pair<std::string, std::string>> cases = {
      {w("https://10.1.2.3:8443", ""), "needs ca_file or pin_sha256"},
      {w("https://127.0.0.1:8443", ""), "unverified TLS is refused"},
      {w("https://10.1.2.3:8443", R"("client_cert_file": "client.pem", "client_key_file": "client.key")"),
       "needs ca_file or pin_sha256"},
      {w("https://10.1.2.3:8443", R"("ca_file": "missing.pem")"), "remote_workers[0].ca_file"},
      {w("https://10.1.2.3:8443", R"("pin_sha256": "abcd")"), "pin_sha256: expected 64 hex digits"},
      {w("https://10.1.2.3:8443", R"("pin_sha256": ")" + std::string(64, 'g') + "\""),
       "pin_sha256"},
      {w("https://10.1.2.3:8443", R"("pin_sha256": 5)"), "pin_sha256: expected a string"},
      {w("https://10.1.2.3:8443", R"("ca_file": "ca.pem", "client_cert_file": "client.pem")"),
       "client_cert_file and client_key_file go together"},
      {w("https://10.1.2.3:8443", R"("ca_file": "ca.pem", "client_cert_file": "client.pem", "client_key_file": "world.key")"),
       "readable by others"},
      {w("https://10.1.2.3:8443", R"("ca_file": "ca.pem", "verify": false)"), "unknown key 'verify'"},
      {w("http://127.0.0.1:8080", R"("ca_file": "ca.pem")"), "need an https:// url"},
      {w("unix:/run/w1.sock", R"("pin_sha256": ")" + std::string(64, 'a') + "\""),
       "need an https:// url"},
      {w("http://10.1.2.3:8080", ""), "in clear"},
  };
  for (auto& [text, needle] : cases) text = head + text + "}";
  ExpectEachRefused(cases, dir_, "alice-on-w1-0123456789");
}

TEST_F(ConfigTest, TokenFileMustNotBeReadableByOthers) {
  Write("t.token", "a-token-in-a-file-0123456789", 0644);
  auto c =
      ParseDaemonConfig(json::parse(R"({"tenants": {"alice": {"token_file": "t.token"}}})"), dir_);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("readable by others"), std::string::npos);
  chmod((dir_ + "/t.token").c_str(), 0640);
  c = ParseDaemonConfig(json::parse(R"({"tenants": {"alice": {"token_file": "t.token"}}})"), dir_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->tenants[0].token, "a-token-in-a-file-0123456789");
}

TEST(DaemonArgsTest, Parse) {
  auto a = ParseDaemonArgs({"--config", "c.json", "--socket", "/tmp/s.sock"});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->config_path, "c.json");
  EXPECT_EQ(a->listen, "unix:/tmp/s.sock");
  a = ParseDaemonArgs({"--config", "c.json", "--listen", "127.0.0.1:0", "--allow-remote"});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->listen, "127.0.0.1:0");
  EXPECT_TRUE(a->allow_remote);
  EXPECT_TRUE(ParseDaemonArgs({"--help"})->help);
  EXPECT_FALSE(ParseDaemonArgs({}).ok());
  EXPECT_FALSE(ParseDaemonArgs({"--config"}).ok());
  EXPECT_FALSE(ParseDaemonArgs({"--config", "c", "--socket", "rel.sock"}).ok());
  EXPECT_FALSE(
      ParseDaemonArgs({"--config", "c", "--socket", "/a", "--listen", "127.0.0.1:1"}).ok());
  EXPECT_FALSE(ParseDaemonArgs({"--config", "c", "--verbose"}).ok());
}

TEST(ListenAddressTest, ParseAndLoopback) {
  auto u = ParseListenAddress("unix:/run/x.sock");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->kind, ListenAddress::Kind::kUnix);
  EXPECT_TRUE(IsLoopback(*u));
  auto t = ParseListenAddress("127.0.0.1:8080");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->port, 8080);
  EXPECT_TRUE(IsLoopback(*t));
  EXPECT_TRUE(IsLoopback(*ParseListenAddress("127.9.9.9:1")));
  EXPECT_TRUE(IsLoopback(*ParseListenAddress("[::1]:1")));
  EXPECT_TRUE(IsLoopback(*ParseListenAddress("[::ffff:127.0.0.1]:1")));
  EXPECT_EQ(ParseListenAddress("[::1]:80")->ToString(), "[::1]:80");
  for (const char* remote :
       {"0.0.0.0:80", "10.0.0.1:80", "[::]:80", "[2001:db8::1]:80", "128.0.0.1:1"}) {
    auto a = ParseListenAddress(remote);
    ASSERT_TRUE(a.ok()) << remote;
    EXPECT_FALSE(IsLoopback(*a)) << remote;
  }
  for (const char* bad : {"localhost:80", "127.0.0.1", "127.0.0.1:", "127.0.0.1:99999",
                          "127.0.0.1:8x", "unix:relative", "[::1:80", "", "tcp://127.0.0.1:80"}) {
    EXPECT_FALSE(ParseListenAddress(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace sbx::api
