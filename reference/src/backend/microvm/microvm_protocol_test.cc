// The host side of the guest agent's protocol (docs/microvm.md "Agent protocol"): encoding,
// the incremental decoder, and what it says about bytes that are not frames.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "backend/microvm/microvm_vm.h"

namespace sbx::microvm {
namespace {

std::string Enc(const proto::Frame& f) {
  auto s = proto::Encode(f);
  EXPECT_TRUE(s.ok());
  return s.ok() ? *s : std::string();
}

TEST(MicroVmProtocol, EncodesTheDocumentedLayout) {
  proto::Frame f{proto::kPing, 0x01020304, {proto::StrField(7, "ab")}};
  std::string b = Enc(f);
  ASSERT_EQ(b.size(), 16u + 6u + 2u);
  EXPECT_EQ(b.substr(0, 4), "SBXV");
  EXPECT_EQ(b[4], 2);                                              // version
  EXPECT_EQ(b[5], proto::kPing);                                   // type
  EXPECT_EQ(b.substr(6, 2), std::string(2, '\0'));                 // flags
  EXPECT_EQ(b.substr(8, 4), std::string("\x04\x03\x02\x01", 4));   // id, little-endian
  EXPECT_EQ(b.substr(12, 4), std::string("\x08\x00\x00\x00", 4));  // payload length
  EXPECT_EQ(b.substr(16), std::string("\x07\x00\x02\x00\x00\x00"
                                      "ab",
                                      8));
}

TEST(MicroVmProtocol, DecodesAcrossArbitrarySplits) {
  proto::Frame a{proto::kExecResult,
                 5,
                 {proto::U32Field(proto::kExitCode, 3), proto::StrField(proto::kStdout, "out\n"),
                  proto::U64Field(proto::kPeakMemory, 1u << 20), proto::U8Field(proto::kOom, 1)}};
  proto::Frame b{proto::kPong, 6, {}};
  std::string bytes = Enc(a) + Enc(b);
  for (size_t split = 0; split <= bytes.size(); split++) {
    proto::Decoder d;
    d.Feed(bytes.substr(0, split));
    std::vector<proto::Frame> got;
    for (;;) {
      auto f = d.Next();
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      if (!*f) break;
      got.push_back(**f);
    }
    d.Feed(bytes.substr(split));
    for (;;) {
      auto f = d.Next();
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      if (!*f) break;
      got.push_back(**f);
    }
    ASSERT_EQ(got.size(), 2u) << "split at " << split;
    EXPECT_EQ(got[0].id, 5u);
    EXPECT_EQ(got[1].type, proto::kPong);
    auto r = DecodeExecResult(got[0]);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->exit_code.value_or(-1), 3);
    EXPECT_EQ(r->stdout_data, "out\n");
    EXPECT_EQ(r->peak_memory, 1u << 20);
    EXPECT_TRUE(r->oom);
    EXPECT_FALSE(r->timed_out);
  }
}

void ExpectBroken(const std::string& bytes, const std::string& want) {
  proto::Decoder d;
  d.Feed(bytes);
  auto f = d.Next();
  ASSERT_FALSE(f.ok()) << "accepted: " << want;
  EXPECT_EQ(f.status().code(), Code::kToolError);
  EXPECT_NE(f.status().message().find(want), std::string::npos) << f.status().message();
  // Once out of step, it stays broken (no guessing where the next frame starts).
  d.Feed(Enc(proto::Frame{proto::kPong, 1, {}}));
  auto g = d.Next();
  EXPECT_FALSE(g.ok());
}

TEST(MicroVmProtocol, MalformedFramesAreNamedErrors) {
  std::string good = Enc(proto::Frame{proto::kPong, 1, {proto::StrField(1, "x")}});
  ExpectBroken("hello", "bad magic 68656c6c");
  ExpectBroken("SBXW", "bad magic");
  std::string v = good;
  v[4] = 1;
  ExpectBroken(v, "protocol version 1, want 2");
  std::string fl = good;
  fl[6] = 1;
  ExpectBroken(fl, "flags 0x1");
  std::string big = good.substr(0, 12) + std::string("\xff\xff\xff\x7f", 4);
  ExpectBroken(big, "over the");
  // Field header cut short, field longer than the payload.
  std::string cut = good.substr(0, 12) + std::string("\x03\x00\x00\x00", 4) + "abc";
  ExpectBroken(cut, "truncated field header");
  std::string longer = good.substr(0, 12) + std::string("\x07\x00\x00\x00", 4) +
                       std::string("\x01\x00\x09\x00\x00\x00z", 7);
  ExpectBroken(longer, "runs past the payload");
}

TEST(MicroVmProtocol, IncompleteIsNotAnError) {
  std::string good = Enc(proto::Frame{proto::kPong, 1, {}});
  for (size_t n = 0; n < good.size(); n++) {
    proto::Decoder d;
    d.Feed(good.substr(0, n));
    auto f = d.Next();
    ASSERT_TRUE(f.ok()) << n;
    EXPECT_FALSE(f->has_value()) << n;
  }
}

TEST(MicroVmProtocol, ExecResultChecksItsFields) {
  auto res = [](std::vector<proto::Field> fs) {
    return DecodeExecResult(proto::Frame{proto::kExecResult, 1, std::move(fs)});
  };
  EXPECT_FALSE(res({}).ok());  // neither exit code nor signal
  EXPECT_FALSE(
      res({proto::U32Field(proto::kExitCode, 0), proto::U32Field(proto::kSignal, 9)}).ok());
  EXPECT_FALSE(res({proto::U32Field(proto::kExitCode, 300)}).ok());
  EXPECT_FALSE(res({proto::U32Field(proto::kSignal, 0)}).ok());
  EXPECT_FALSE(res({proto::StrField(proto::kExitCode, "x")}).ok());
  EXPECT_FALSE(res({proto::U32Field(proto::kExitCode, 0), proto::U8Field(proto::kOom, 2)}).ok());
  EXPECT_FALSE(
      res({proto::U32Field(proto::kExitCode, 0), proto::U32Field(proto::kCpuUsec, 1)}).ok());
  auto ok = res({proto::U32Field(proto::kSignal, 9), proto::U8Field(proto::kTimedOut, 1)});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->signal.value_or(0), 9);
  EXPECT_TRUE(ok->timed_out);
  auto wrong = DecodeExecResult(proto::Frame{proto::kPong, 1, {}});
  EXPECT_FALSE(wrong.ok());
}

TEST(MicroVmProtocol, ExecRequestValidation) {
  ExecRequest none;
  EXPECT_FALSE(EncodeExecRequest(1, none).ok());
  ExecRequest both;
  both.argv = {"true"};
  both.shell = "true";
  EXPECT_FALSE(EncodeExecRequest(1, both).ok());
  ExecRequest huge;
  huge.shell = "true";
  huge.stdin_data.assign(proto::kMaxRequestPayload + 1, 'x');
  auto e = EncodeExecRequest(1, huge);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("limit"), std::string::npos);
}

// Version 2: the EXEC fields for a chrooted, unprivileged, limited command.
TEST(MicroVmProtocol, ExecRequestV2Fields) {
  ExecRequest r;
  r.shell = "id -u";
  r.cwd = "/work";
  r.root = "/sandbox";
  r.uid = 1000;
  r.gid = 1000;
  r.pids_limit = 20;
  r.nofile = 32;
  r.timeout_ms = 300;
  r.term_grace_ms = 2000;
  auto e = EncodeExecRequest(7, r);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  proto::Decoder d(proto::kMaxRequestPayload);
  d.Feed(*e);
  auto f = d.Next();
  ASSERT_TRUE(f.ok() && f->has_value()) << f.status().ToString();
  const proto::Frame& fr = **f;
  EXPECT_EQ(fr.type, proto::kExec);
  EXPECT_EQ(fr.id, 7u);
  ASSERT_NE(fr.Find(proto::kRoot), nullptr);
  EXPECT_EQ(fr.Find(proto::kRoot)->value, "/sandbox");
  EXPECT_EQ(proto::kRoot, 9);
  EXPECT_EQ(proto::kTermGraceMs, 14);
  struct {
    uint16_t tag;
    uint32_t want;
  } nums[] = {{proto::kUid, 1000},  {proto::kGid, 1000},         {proto::kPidsLimit, 20},
              {proto::kNofile, 32}, {proto::kTermGraceMs, 2000}, {proto::kTimeoutMs, 300}};
  for (auto& n : nums) {
    auto v = proto::FieldU32(fr, n.tag, 0);
    ASSERT_TRUE(v.ok()) << n.tag;
    EXPECT_EQ(*v, n.want) << "tag " << n.tag;
    EXPECT_EQ(fr.Find(n.tag)->value.size(), 4u);
  }
  // Zero / empty values are not sent at all (the agent's defaults apply).
  ExecRequest plain;
  plain.argv = {"true"};
  auto fields = ExecRequestFields(plain);
  ASSERT_TRUE(fields.ok());
  ASSERT_EQ(fields->size(), 1u);
  EXPECT_EQ((*fields)[0].tag, proto::kArgv);
  // A relative root is refused before anything is sent.
  plain.root = "sandbox";
  EXPECT_FALSE(EncodeExecRequest(1, plain).ok());
}

TEST(MicroVmProtocol, ConfigureFields) {
  EXPECT_EQ(proto::kConfigure, 4);
  EXPECT_EQ(proto::kConfigured, 0x85);
  EXPECT_EQ(proto::kHasRoot, 4);
  GuestConfig none;
  auto f = ConfigureFields(none);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->empty());
  GuestConfig c;
  c.address = "10.201.0.7";
  c.prefix = 24;
  c.gateway = "10.200.0.1";
  c.disk_bytes = 1ull << 20;
  c.hostname = "sbx";
  f = ConfigureFields(c);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  proto::Frame fr{proto::kConfigure, 3, *f};
  EXPECT_EQ(fr.Find(proto::kAddress)->value, "10.201.0.7");
  EXPECT_EQ(*proto::FieldU32(fr, proto::kPrefix, 0), 24u);
  EXPECT_EQ(fr.Find(proto::kGateway)->value, "10.200.0.1");
  EXPECT_EQ(*proto::FieldU64(fr, proto::kDiskBytes, 0), 1ull << 20);
  EXPECT_EQ(fr.Find(proto::kHostname)->value, "sbx");
  // The wire bytes of one field, as documented: u16 tag | u32 length | bytes.
  auto bytes =
      proto::Encode(proto::Frame{proto::kConfigure, 1, {proto::U64Field(proto::kDiskBytes, 1)}});
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->substr(16), std::string("\x04\x00\x08\x00\x00\x00\x01\0\0\0\0\0\0\0", 14));

  for (auto bad :
       {GuestConfig{.address = "10.0.0"}, GuestConfig{.address = "::1"},
        GuestConfig{.address = "10.0.0.1", .prefix = 33}, GuestConfig{.gateway = "10.0.0.1"},
        GuestConfig{.address = "10.0.0.2", .gateway = "gw"},
        GuestConfig{.hostname = std::string(65, 'h')}}) {
    auto r = ConfigureFields(bad);
    EXPECT_FALSE(r.ok()) << bad.address << " " << bad.prefix << " " << bad.gateway;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    }
  }
}

TEST(MicroVmProtocol, ReadyV2HasRootFlag) {
  std::string b = Enc(
      proto::Frame{proto::kReady,
                   0,
                   {proto::StrField(proto::kAgentVersion, "sbx-guest-agent/2"),
                    proto::StrField(proto::kCgroup, "v2"), proto::U8Field(proto::kHasRoot, 1)}});
  proto::Decoder d;
  d.Feed(b);
  auto f = d.Next();
  ASSERT_TRUE(f.ok() && f->has_value());
  auto root = proto::FieldFlag(**f, proto::kHasRoot);
  ASSERT_TRUE(root.ok());
  EXPECT_TRUE(*root);
}

// Random bytes, and random mutations of good frames: always a frame, "need more", or an error.
TEST(MicroVmProtocol, RandomBytesNeverCrash) {
  std::mt19937 rng(1234);
  std::string good = Enc(
      proto::Frame{proto::kExecResult,
                   9,
                   {proto::U32Field(proto::kExitCode, 0), proto::StrField(proto::kStdout, "x")}});
  for (int i = 0; i < 20000; i++) {
    std::string b;
    if (i % 2) {
      b.resize(rng() % 64);
      for (auto& c : b) c = static_cast<char>(rng());
    } else {
      b = good;
      for (int k = 0; k < 3; k++) b[rng() % b.size()] = static_cast<char>(rng());
    }
    proto::Decoder d(1 << 16);
    d.Feed(b);
    for (int k = 0; k < 4; k++) {
      auto f = d.Next();
      if (!f.ok() || !*f) break;
      (void)DecodeExecResult(**f);
    }
  }
}

}  // namespace
}  // namespace sbx::microvm
