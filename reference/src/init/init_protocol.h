// The control protocol between the supervisor (the runtime) and sbx-init, the sandbox's PID 1.
// One SOCK_SEQPACKET socketpair: each message is one packet: a Header, then a payload; file
// descriptors travel as SCM_RIGHTS. Only the supervisor holds the other end: a tool never sees
// it (close-on-exec in init, closed in every child before exec).
#pragma once

#include <cstdint>

namespace sbx::initproto {

inline constexpr int kControlFd = 3;  // where sbx-init finds its end of the socketpair
inline constexpr int kSeccompFd = 4;  // a memfd with the raw BPF program (sock_filter[])
inline constexpr uint32_t kMaxPacket = 192 * 1024;

enum MsgType : uint32_t {
  kReady = 1,    // init → sup: mounts done, pivoted, waiting for work. a = 0 or errno, payload =
                 // error text
  kExec = 2,     // sup → init: run a command. a = argc, b = envc, payload = ExecParams + strings,
                 // fds: stdin, stdout, stderr [, fd 3 of the command]
  kStarted = 3,  // init → sup: id, a = pid (in the sandbox), b = 0 or errno of a failed exec
  kExited = 4,   // init → sup: id, a = wait status of the exec's main process
  kSignalAll = 5,  // sup → init: kill(-1, a) inside the sandbox's PID namespace (all but init)
  kReset = 6,      // sup → init: kill every process, reap them, empty the writable directories
  kResetDone = 7,  // init → sup: a = 0 or errno
};

struct Header {
  uint32_t type;
  uint32_t id;
  int32_t a;
  int32_t b;
};

struct ExecParams {
  uint32_t uid;
  uint32_t gid;
  int64_t nofile;  // RLIMIT_NOFILE (RES-6)
  int64_t nproc;   // RLIMIT_NPROC, 0 = none (gvisor: the guest kernel's process limit, RES-4)
};

}  // namespace sbx::initproto
