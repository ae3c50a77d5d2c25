// sbx guest agent: PID 1 of the microVM guest (docs/microvm.md). Static; no library beyond libc.
//
// It mounts /dev /proc /sys /tmp and the cgroup file system (v2, else v1's memory controller),
// loads the virtio modules listed in /etc/sbx-modules, opens the virtio-serial port named
// "sbx.agent" and serves the host one request at a time over it:
//   PING       -> PONG
//   EXEC       -> EXEC_RESULT  (argv or `sh -c` line, env, cwd, stdin, timeout, memory limit;
//                               exit code or signal, stdout/stderr bounded, CPU, peak memory,
//                               OOM and timeout flags)
//   SET_CLOCK  -> CLOCK_SET    (CLOCK_REALTIME and a reseed of the kernel RNG; sent after every
//                               restore of a template clone)
//   CONFIGURE  -> CONFIGURED   (eth0 address and routes, tmpfs sizes under /sandbox, hostname;
//                               once per clone)
// Version 2: an EXEC may name a root (the /sandbox tree the host appends to the initramfs, made
// read-only at boot with tmpfs mounts where commands write): the command then runs chrooted
// there, in new PID and mount namespaces (a tiny reaper is PID 1 of the namespace and relays the
// command's status), with a fresh /proc, as a given uid/gid without capabilities and with
// no_new_privs, under pids.max and RLIMIT_NOFILE; at the deadline SIGTERM, then kill after a grace.
// It sends READY once, when it is listening. Frames (little-endian, version 2):
//   magic "SBXV" | u8 version | u8 type | u16 flags (0) | u32 id | u32 payload length
//   payload = fields: u16 tag | u32 length | bytes
// Every byte from the host is checked; a bad frame gets an ERROR reply (id 0 when the header
// itself was unreadable, after which the agent resynchronises on the next magic). It never exits:
// PID 1 exiting panics the guest.
//
// The agent is one program in files by concern, all sharing this header:
//   agent_main.c      boot (mounts, modules, the port), the request loop, SET_CLOCK
//   agent_protocol.c  reply buffers, frames, request fields
//   agent_io.c        kernel log, clocks, whole writes, small files
//   agent_exec.c      EXEC: the forked side, the wait and the result
//   agent_exec_request.c  EXEC: the request's fields, parsed and checked
//   agent_cgroup.c    the guest's cgroups: setup at boot, one per command
//   agent_root.c      the /sandbox tree made read-only with tmpfs where commands write
//   agent_net.c       CONFIGURE: eth0, routes, tmpfs sizes, hostname
// The protocol's numbers are the host's: backend/microvm/microvm_agent_protocol.h.
#pragma once
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/random.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/microvm/microvm_agent_protocol.h"

#define AGENT_VERSION "sbx-guest-agent/2"
#define SANDBOX_ROOT "/sandbox"
#define SCRATCH "/scratch"  // the one tmpfs behind every writable place of the root
#define PORT_NAME "sbx.agent"

enum {
  kMaxArgs = 4096,
  kDefaultOutputLimit = 1 << 20,
  kMaxOutputLimit = 4 << 20,
};
// The protocol's numbers (types, tags, version, sizes): one list with the host's.

// Set at boot (agent_main.c, agent_cgroup.c, agent_root.c).
extern int g_port;
extern int g_cgroup_v2;  // 1: cgroup2 at /sys/fs/cgroup; 0: v1 memory at .../memory; -1: none
extern unsigned g_exec_seq;
extern int g_has_root;    // /sandbox prepared at boot (read-only, tmpfs mounts, /dev)
extern int g_configured;  // CONFIGURE done

// A reply under construction (agent_protocol.c).
struct buf {
  unsigned char* p;
  size_t len, cap;
  int failed;
};

// One field of a request: its tag and bytes inside the received payload.
struct fieldref {
  unsigned tag;
  const unsigned char* d;
  uint32_t n;
};

// An EXEC request, parsed (agent_exec_request.c).
struct exec_req {
  char** argv;
  int argc;
  char* shell;
  char** env;
  int envc;
  char* cwd;
  uint32_t timeout_ms;
  uint64_t mem_limit;
  const unsigned char* in;
  uint32_t in_len;
  uint32_t out_limit;
  char* root;  // v2: chroot + new PID and mount namespaces
  uint32_t uid, gid, pids_limit, nofile, term_grace_ms;
  int have_uid, have_gid;
};

// agent_io.c: kernel log, clocks, whole writes, small files
void klog(const char* fmt, ...);
uint64_t now_ns(clockid_t c);
int write_all(int fd, const unsigned char* p, size_t n);
int write_file(const char* path, const char* s);
int read_file(const char* path, char* out, size_t cap);
uint64_t keyed_value(const char* path, const char* key);
uint64_t number_file(const char* path);

// agent_protocol.c: reply buffers, frames, request fields
void buf_put(struct buf* b, const void* d, size_t n);
uint64_t get_le(const unsigned char* p, int n);
void field(struct buf* b, unsigned tag, const void* d, size_t n);
void field_u64(struct buf* b, unsigned tag, uint64_t v);
void field_u32(struct buf* b, unsigned tag, uint32_t v);
void field_u8(struct buf* b, unsigned tag, unsigned v);
void field_str(struct buf* b, unsigned tag, const char* s);
void send_frame(unsigned type, uint32_t id, struct buf* payload);
void send_error(uint32_t id, const char* fmt, ...);
int split_fields(const unsigned char* p, uint32_t n, struct fieldref* out, int max,
                 const char** why);
char* field_cstr(const struct fieldref* f);

// agent_cgroup.c: cgroups
int make_cgroup(const struct exec_req* r, char* cg, size_t n);
// agent_exec_request.c: an EXEC request's fields into *r (0), or -1 with the reason in why;
// free_exec_req frees what parse_exec_req allocated (also after a failed parse).
int parse_exec_req(const struct fieldref* f, int nf, struct exec_req* r, char* why, size_t wn);
void free_exec_req(struct exec_req* r);
void kill_cgroup(const char* cg, int remove);
void term_cgroup(const char* cg, pid_t pid, int skip_pid);
void setup_cgroups(void);

// agent_root.c: the sandbox root
int is_mount_point(const char* path);
int prepare_root(void);

// agent_net.c: CONFIGURE (network)
void loopback_up(void);
void do_configure(uint32_t id, const struct fieldref* f, int nf);

// agent_exec.c: EXEC
void do_exec(uint32_t id, const struct fieldref* f, int nf);
