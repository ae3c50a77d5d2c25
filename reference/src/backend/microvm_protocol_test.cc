// The host side of the guest agent's protocol (docs/microvm.md "Agent protocol"): encoding,
// the incremental decoder, and what it says about bytes that are not frames.
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "backend/microvm_vm.h"

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
  EXPECT_EQ(b[4], 1);                      // version
  EXPECT_EQ(b[5], proto::kPing);           // type
  EXPECT_EQ(b.substr(6, 2), std::string(2, '\0'));  // flags
  EXPECT_EQ(b.substr(8, 4), std::string("\x04\x03\x02\x01", 4));  // id, little-endian
  EXPECT_EQ(b.substr(12, 4), std::string("\x08\x00\x00\x00", 4)); // payload length
  EXPECT_EQ(b.substr(16), std::string("\x07\x00\x02\x00\x00\x00" "ab", 8));
}

TEST(MicroVmProtocol, DecodesAcrossArbitrarySplits) {
  proto::Frame a{proto::kExecResult, 5,
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
  v[4] = 2;
  ExpectBroken(v, "protocol version 2");
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
  EXPECT_FALSE(res({proto::U32Field(proto::kExitCode, 0), proto::U32Field(proto::kSignal, 9)}).ok());
  EXPECT_FALSE(res({proto::U32Field(proto::kExitCode, 300)}).ok());
  EXPECT_FALSE(res({proto::U32Field(proto::kSignal, 0)}).ok());
  EXPECT_FALSE(res({proto::StrField(proto::kExitCode, "x")}).ok());
  EXPECT_FALSE(res({proto::U32Field(proto::kExitCode, 0), proto::U8Field(proto::kOom, 2)}).ok());
  EXPECT_FALSE(res({proto::U32Field(proto::kExitCode, 0), proto::U32Field(proto::kCpuUsec, 1)}).ok());
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

// Random bytes, and random mutations of good frames: always a frame, "need more", or an error.
TEST(MicroVmProtocol, RandomBytesNeverCrash) {
  std::mt19937 rng(1234);
  std::string good = Enc(proto::Frame{proto::kExecResult, 9,
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
