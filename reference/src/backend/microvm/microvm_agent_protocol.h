// The microVM guest agent's wire protocol, version 2 (docs/microvm.md "Agent protocol"): the one
// list of its numbers, read by both sides. The guest agent (C:
// reference/src/backend/microvm/guest/) gets plain enums; the host (C++: microvm_vm.h)
// gets the same names, typed, in sbx::microvm::proto. Frames, little-endian:
//   magic "SBXV" | u8 version | u8 type | u16 flags (0) | u32 id | u32 payload length
//   payload = fields: u16 tag | u32 length | bytes
// Change a number here and both sides change with it; a new version bumps SBXV_VERSION.
#ifndef SBX_MICROVM_AGENT_PROTOCOL_H
#define SBX_MICROVM_AGENT_PROTOCOL_H

#define SBXV_MAGIC "SBXV"
#define SBXV_VERSION 2
#define SBXV_HEADER_SIZE 16
#define SBXV_MAX_REQUEST_PAYLOAD (1u << 20)  // what the agent accepts (host -> guest)
#define SBXV_MAX_REPLY_PAYLOAD (16u << 20)   // what the host accepts (guest -> host)

#ifdef __cplusplus
#include <cstddef>
#include <cstdint>
namespace sbx::microvm::proto {
inline constexpr char kMagic[sizeof SBXV_MAGIC] = SBXV_MAGIC;  // 4 bytes on the wire
inline constexpr uint8_t kVersion = SBXV_VERSION;
inline constexpr size_t kHeaderSize = SBXV_HEADER_SIZE;
inline constexpr uint32_t kMaxRequestPayload = SBXV_MAX_REQUEST_PAYLOAD;
inline constexpr uint32_t kMaxReplyPayload = SBXV_MAX_REPLY_PAYLOAD;
#define SBXV_ENUM(name, type) enum name : type
#else
enum {
  kVersion = SBXV_VERSION,
  kHeaderSize = SBXV_HEADER_SIZE,
  kMaxRequestPayload = SBXV_MAX_REQUEST_PAYLOAD,
};
#define SBXV_ENUM(name, type) enum name
#endif

// Message types: requests from the host, replies (high bit) from the agent.
SBXV_ENUM(Type, uint8_t){
    kPing = 1,    kExec = 2,          kSetClock = 3,    kConfigure = 4,     kReady = 0x81,
    kPong = 0x82, kExecResult = 0x83, kClockSet = 0x84, kConfigured = 0x85, kError = 0xff,
};
// Field tags, per message type. EXEC:
SBXV_ENUM(ExecTag, uint16_t){
    kArgv = 1,
    kShell = 2,
    kEnv = 3,
    kCwd = 4,
    kTimeoutMs = 5,
    kMemLimit = 6,
    kStdin = 7,
    kOutputLimit = 8,
    // v2
    kRoot = 9,
    kUid = 10,
    kGid = 11,
    kPidsLimit = 12,
    kNofile = 13,
    kTermGraceMs = 14,
};
// EXEC_RESULT:
SBXV_ENUM(ResultTag, uint16_t){
    kExitCode = 1,        kSignal = 2,      kStdout = 3,     kStderr = 4,    kStdoutTruncated = 5,
    kStderrTruncated = 6, kCpuUsec = 7,     kPeakMemory = 8, kOom = 9,       kTimedOut = 10,
    kWallUsec = 11,       kStartError = 12, kDiskFree = 13,  kDiskUsed = 14,
};
// SET_CLOCK, CLOCK_SET:
SBXV_ENUM(ClockTag, uint16_t){kRealtimeNs = 1, kSeed = 2};
SBXV_ENUM(ClockSetTag, uint16_t){kGuestNsBefore = 1, kReseeded = 2};
// READY:
SBXV_ENUM(ReadyTag, uint16_t){kAgentVersion = 1, kKernel = 2, kCgroup = 3, kHasRoot = 4};
// CONFIGURE:
SBXV_ENUM(ConfigureTag, uint16_t){
    kAddress = 1, kPrefix = 2, kGateway = 3, kDiskBytes = 4, kHostname = 5,
};
// ERROR:
SBXV_ENUM(ErrorTag, uint16_t){kMessage = 1};

#undef SBXV_ENUM
#ifdef __cplusplus
}  // namespace sbx::microvm::proto
#endif

#endif  // SBX_MICROVM_AGENT_PROTOCOL_H
