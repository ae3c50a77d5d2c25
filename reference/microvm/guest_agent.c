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
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <sched.h>
#include <linux/random.h>
#include <poll.h>
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
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/microvm_agent_protocol.h"

#define AGENT_VERSION "sbx-guest-agent/2"
#define SANDBOX_ROOT "/sandbox"
#define SCRATCH "/scratch"       // the one tmpfs behind every writable place of the root
#define PORT_NAME "sbx.agent"

enum {
  kMaxArgs = 4096,
  kDefaultOutputLimit = 1 << 20,
  kMaxOutputLimit = 4 << 20,
};
// The protocol's numbers (types, tags, version, sizes): one list with the host's.

static int g_port = -1;
static int g_cgroup_v2;         // 1: cgroup2 at /sys/fs/cgroup; 0: v1 memory at .../memory; -1: none
static unsigned g_exec_seq;
static int g_has_root;          // /sandbox prepared at boot (read-only, tmpfs mounts, /dev)
static int g_configured;        // CONFIGURE done

static void klog(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (n > (int)sizeof buf - 2) n = sizeof buf - 2;
  buf[n++] = '\n';
  int fd = open("/dev/kmsg", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t w = write(fd, buf, n);
    (void)w;
    close(fd);
  }
}

static uint64_t now_ns(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// ---- output buffer for a reply ----
struct buf {
  unsigned char* p;
  size_t len, cap;
  int failed;
};
static void buf_reserve(struct buf* b, size_t extra) {
  if (b->failed) return;
  if (b->len + extra <= b->cap) return;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra) cap *= 2;
  unsigned char* np = realloc(b->p, cap);
  if (!np) { b->failed = 1; return; }
  b->p = np;
  b->cap = cap;
}
static void buf_put(struct buf* b, const void* d, size_t n) {
  buf_reserve(b, n);
  if (b->failed) return;
  if (n) memcpy(b->p + b->len, d, n);
  b->len += n;
}
static void put_le(unsigned char* p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get_le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}
static void field(struct buf* b, unsigned tag, const void* d, size_t n) {
  unsigned char h[6];
  put_le(h, tag, 2);
  put_le(h + 2, n, 4);
  buf_put(b, h, 6);
  buf_put(b, d, n);
}
static void field_u64(struct buf* b, unsigned tag, uint64_t v) {
  unsigned char d[8];
  put_le(d, v, 8);
  field(b, tag, d, 8);
}
static void field_u32(struct buf* b, unsigned tag, uint32_t v) {
  unsigned char d[4];
  put_le(d, v, 4);
  field(b, tag, d, 4);
}
static void field_u8(struct buf* b, unsigned tag, unsigned v) {
  unsigned char d = (unsigned char)v;
  field(b, tag, &d, 1);
}
static void field_str(struct buf* b, unsigned tag, const char* s) { field(b, tag, s, strlen(s)); }

static int write_all(int fd, const unsigned char* p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        poll(&pf, 1, 100);
        continue;
      }
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static void send_frame(unsigned type, uint32_t id, struct buf* payload) {
  unsigned char h[kHeaderSize];
  memcpy(h, SBXV_MAGIC, 4);
  h[4] = kVersion;
  h[5] = (unsigned char)type;
  put_le(h + 6, 0, 2);
  put_le(h + 8, id, 4);
  size_t n = payload && !payload->failed ? payload->len : 0;
  put_le(h + 12, n, 4);
  if (write_all(g_port, h, kHeaderSize) < 0 || (n && write_all(g_port, payload->p, n) < 0))
    klog("sbx-agent: write to host failed: %s", strerror(errno));
}

static void send_error(uint32_t id, const char* fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  struct buf b = {0};
  field_str(&b, kMessage, msg);
  send_frame(kError, id, &b);
  free(b.p);
}

// ---- request fields ----
struct fieldref {
  unsigned tag;
  const unsigned char* d;
  uint32_t n;
};
// Splits a payload into fields; returns the count or -1 with *why set.
static int split_fields(const unsigned char* p, uint32_t n, struct fieldref* out, int max,
                        const char** why) {
  int k = 0;
  uint32_t off = 0;
  while (off < n) {
    if (n - off < 6) { *why = "truncated field header"; return -1; }
    unsigned tag = (unsigned)get_le(p + off, 2);
    uint32_t len = (uint32_t)get_le(p + off + 2, 4);
    off += 6;
    if (len > n - off) { *why = "field longer than the payload"; return -1; }
    if (k == max) { *why = "too many fields"; return -1; }
    out[k].tag = tag;
    out[k].d = p + off;
    out[k].n = len;
    k++;
    off += len;
  }
  return k;
}

// A copy of a string field, NUL-terminated; NULL if it holds a NUL byte or memory runs out.
static char* field_cstr(const struct fieldref* f) {
  if (memchr(f->d, 0, f->n)) return NULL;
  char* s = malloc((size_t)f->n + 1);
  if (!s) return NULL;
  memcpy(s, f->d, f->n);
  s[f->n] = 0;
  return s;
}

static int write_file(const char* path, const char* s) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t w = write(fd, s, strlen(s));
  int e = errno;
  close(fd);
  errno = e;
  return w == (ssize_t)strlen(s) ? 0 : -1;
}

static int read_file(const char* path, char* out, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t r = read(fd, out, cap - 1);
  close(fd);
  if (r < 0) return -1;
  out[r] = 0;
  return (int)r;
}

// Value of "key N" in a flat-keyed cgroup file; 0 if absent.
static uint64_t keyed_value(const char* path, const char* key) {
  char text[4096];
  if (read_file(path, text, sizeof text) < 0) return 0;
  size_t kl = strlen(key);
  for (char* line = text; line && *line;) {
    char* nl = strchr(line, '\n');
    if (nl) *nl = 0;
    if (strncmp(line, key, kl) == 0 && line[kl] == ' ') return strtoull(line + kl + 1, NULL, 10);
    line = nl ? nl + 1 : NULL;
  }
  return 0;
}
static uint64_t number_file(const char* path) {
  char text[64];
  if (read_file(path, text, sizeof text) < 0) return 0;
  return strtoull(text, NULL, 10);
}

// ---- exec ----
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
  char* root;                   // v2: chroot + new PID and mount namespaces
  uint32_t uid, gid, pids_limit, nofile, term_grace_ms;
  int have_uid, have_gid;
};

static void free_req(struct exec_req* r) {
  for (int i = 0; i < r->argc; i++) free(r->argv[i]);
  for (int i = 0; i < r->envc; i++) free(r->env[i]);
  free(r->argv);
  free(r->env);
  free(r->shell);
  free(r->cwd);
  free(r->root);
}

// Parses EXEC's fields; 0 or -1 with a message in why.
static int parse_exec(const struct fieldref* f, int nf, struct exec_req* r, char* why, size_t wn) {
  memset(r, 0, sizeof *r);
  r->out_limit = kDefaultOutputLimit;
  r->argv = calloc(kMaxArgs + 1, sizeof(char*));
  r->env = calloc(kMaxArgs + 1, sizeof(char*));
  if (!r->argv || !r->env) { snprintf(why, wn, "out of memory"); return -1; }
  int have_timeout = 0, have_mem = 0, have_in = 0, have_limit = 0;
  int have_u32[3] = {0, 0, 0};  // pids_limit, nofile, term_grace_ms
  for (int i = 0; i < nf; i++) {
    switch (f[i].tag) {
      case kArgv:
      case kEnv: {
        int* c = f[i].tag == kArgv ? &r->argc : &r->envc;
        char** v = f[i].tag == kArgv ? r->argv : r->env;
        if (*c == kMaxArgs) { snprintf(why, wn, "more than %d %s entries", kMaxArgs, f[i].tag == kArgv ? "argv" : "env"); return -1; }
        char* s = field_cstr(&f[i]);
        if (!s) { snprintf(why, wn, "%s entry %d holds a NUL byte", f[i].tag == kArgv ? "argv" : "env", *c); return -1; }
        if (f[i].tag == kEnv && (!strchr(s, '=') || s[0] == '=')) {
          snprintf(why, wn, "env entry %d is not NAME=VALUE", *c);
          free(s);
          return -1;
        }
        v[(*c)++] = s;
        break;
      }
      case kShell:
      case kCwd: {
        char** dst = f[i].tag == kShell ? &r->shell : &r->cwd;
        if (*dst) { snprintf(why, wn, "%s given twice", f[i].tag == kShell ? "shell" : "cwd"); return -1; }
        *dst = field_cstr(&f[i]);
        if (!*dst) { snprintf(why, wn, "%s holds a NUL byte", f[i].tag == kShell ? "shell" : "cwd"); return -1; }
        break;
      }
      case kTimeoutMs:
        if (f[i].n != 4 || have_timeout++) { snprintf(why, wn, "timeout_ms: want one u32"); return -1; }
        r->timeout_ms = (uint32_t)get_le(f[i].d, 4);
        break;
      case kMemLimit:
        if (f[i].n != 8 || have_mem++) { snprintf(why, wn, "memory_limit: want one u64"); return -1; }
        r->mem_limit = get_le(f[i].d, 8);
        break;
      case kStdin:
        if (have_in++) { snprintf(why, wn, "stdin given twice"); return -1; }
        r->in = f[i].d;
        r->in_len = f[i].n;
        break;
      case kOutputLimit:
        if (f[i].n != 4 || have_limit++) { snprintf(why, wn, "output_limit: want one u32"); return -1; }
        r->out_limit = (uint32_t)get_le(f[i].d, 4);
        if (r->out_limit > kMaxOutputLimit) { snprintf(why, wn, "output_limit over %d", kMaxOutputLimit); return -1; }
        break;
      case kRoot:
        if (r->root) { snprintf(why, wn, "root given twice"); return -1; }
        r->root = field_cstr(&f[i]);
        if (!r->root) { snprintf(why, wn, "root holds a NUL byte"); return -1; }
        if (r->root[0] != '/' || f[i].n > 200) { snprintf(why, wn, "root must be an absolute path of at most 200 bytes"); return -1; }
        break;
      case kUid:
      case kGid: {
        int* have = f[i].tag == kUid ? &r->have_uid : &r->have_gid;
        const char* what = f[i].tag == kUid ? "uid" : "gid";
        if (f[i].n != 4 || (*have)++) { snprintf(why, wn, "%s: want one u32", what); return -1; }
        uint32_t v = (uint32_t)get_le(f[i].d, 4);
        if (v == UINT32_MAX) { snprintf(why, wn, "%s 4294967295 is not an id", what); return -1; }
        *(f[i].tag == kUid ? &r->uid : &r->gid) = v;
        break;
      }
      case kPidsLimit:
      case kNofile:
      case kTermGraceMs: {
        int k = (int)f[i].tag - kPidsLimit;
        const char* what = k == 0 ? "pids_limit" : k == 1 ? "nofile" : "term_grace_ms";
        uint32_t* dst = k == 0 ? &r->pids_limit : k == 1 ? &r->nofile : &r->term_grace_ms;
        if (f[i].n != 4 || have_u32[k]++) { snprintf(why, wn, "%s: want one u32", what); return -1; }
        *dst = (uint32_t)get_le(f[i].d, 4);
        break;
      }
      default:
        snprintf(why, wn, "unknown exec field %u", f[i].tag);
        return -1;
    }
  }
  if (!!r->shell == !!r->argc) { snprintf(why, wn, "exec needs argv or shell, exactly one"); return -1; }
  if (r->shell) {
    r->argv[0] = strdup("/bin/sh");
    r->argv[1] = strdup("-c");
    r->argv[2] = r->shell;
    r->shell = NULL;
    r->argc = 3;
    if (!r->argv[0] || !r->argv[1]) { snprintf(why, wn, "out of memory"); return -1; }
  } else if (r->argv[0][0] == 0) {
    snprintf(why, wn, "argv[0] is empty");
    return -1;
  }
  if (r->mem_limit && r->mem_limit < 1 << 20) { snprintf(why, wn, "memory_limit under 1 MiB"); return -1; }
  return 0;
}

// The command's cgroup: path in cg (v2: /sys/fs/cgroup/sbx-cmd-N; v1: .../memory/sbx-cmd-N).
static int make_cgroup(const struct exec_req* r, char* cg, size_t n) {
  if (g_cgroup_v2 < 0) {
    cg[0] = 0;
    if (r->pids_limit) { errno = ENOTSUP; return -1; }
    return 0;
  }
  snprintf(cg, n, "%s/sbx-cmd-%u", g_cgroup_v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory",
           ++g_exec_seq);
  if (mkdir(cg, 0755) < 0 && errno != EEXIST) return -1;
  char path[256], val[32];
  if (r->mem_limit) snprintf(val, sizeof val, "%llu", (unsigned long long)r->mem_limit);
  if (g_cgroup_v2) {
    snprintf(path, sizeof path, "%s/memory.max", cg);
    if (write_file(path, r->mem_limit ? val : "max") < 0) return -1;
    snprintf(path, sizeof path, "%s/memory.swap.max", cg);
    write_file(path, "0");  // no swap in the guest anyway
    snprintf(path, sizeof path, "%s/memory.oom.group", cg);
    write_file(path, "1");
    if (r->pids_limit) {
      // With a root the namespace's reaper is one of the cgroup's processes: it does not count
      // against the command's allowance.
      snprintf(path, sizeof path, "%s/pids.max", cg);
      snprintf(val, sizeof val, "%llu", (unsigned long long)r->pids_limit + (r->root ? 1 : 0));
      if (write_file(path, val) < 0) return -1;
    }
  } else if (r->pids_limit) {
    errno = ENOTSUP;  // cgroup v1 fallback: memory controller only
    return -1;
  } else if (r->mem_limit) {
    snprintf(path, sizeof path, "%s/memory.limit_in_bytes", cg);
    if (write_file(path, val) < 0) return -1;
  }
  return 0;
}

// Kills every process of the cgroup and waits until it is empty; removes it.
static void kill_cgroup(const char* cg, int remove) {
  char path[256];
  if (!cg[0]) return;
  if (g_cgroup_v2) {
    snprintf(path, sizeof path, "%s/cgroup.kill", cg);
    write_file(path, "1");
  }
  snprintf(path, sizeof path, "%s/cgroup.procs", cg);
  for (int round = 0; round < 2000; round++) {
    char text[8192];
    int n = read_file(path, text, sizeof text);
    if (n <= 0) break;
    for (char* s = text; *s;) {
      long pid = strtol(s, &s, 10);
      if (pid > 1) kill((pid_t)pid, SIGKILL);
      while (*s == '\n') s++;
    }
    // (No reaping here: the command's own status is collected by wait4 on its pid; a task
    // leaves cgroup.procs when it exits, zombie or not.)
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  if (remove) rmdir(cg);
}

struct out_stream {
  int fd;
  struct buf b;
  uint32_t limit;
  int truncated;
};

static void drain(struct out_stream* s) {
  char tmp[16384];
  for (;;) {
    ssize_t r = read(s->fd, tmp, sizeof tmp);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EAGAIN) return;
    if (r <= 0) {
      close(s->fd);
      s->fd = -1;
      return;
    }
    size_t room = s->b.len < s->limit ? s->limit - s->b.len : 0;
    size_t take = (size_t)r < room ? (size_t)r : room;
    buf_put(&s->b, tmp, take);
    if (take < (size_t)r) s->truncated = 1;
  }
}

// SIGTERM to every process of the command (at the deadline, when a grace is asked for). With a
// root the namespace's reaper (our child, pid) is skipped: it has nothing to stop.
static void term_cgroup(const char* cg, pid_t pid, int skip_pid) {
  if (!cg[0]) {
    kill(-pid, SIGTERM);
    return;
  }
  char path[256], text[8192];
  snprintf(path, sizeof path, "%s/cgroup.procs", cg);
  if (read_file(path, text, sizeof text) <= 0) return;
  for (char* s = text; *s;) {
    long p = strtol(s, &s, 10);
    if (p > 1 && !(skip_pid && p == pid)) kill((pid_t)p, SIGTERM);
    while (*s == '\n') s++;
  }
}

// ---- the forked side of EXEC (only async-signal-safe work, plus fork in the reaper) ----
enum { S_CGROUP = 1, S_CWD = 2, S_EXEC = 3, S_PROC = 4, S_ROOT = 5, S_NOFILE = 6, S_IDS = 7,
       S_FORK = 8 };
struct child_ctx {
  const struct exec_req* r;
  const char* cg;
  char** envp;
  const char* path_env;
  int in, out, err;  // the command's stdio (pipe ends)
  int errfd;         // start errors: {stage, errno}, CLOEXEC
  int statfd;        // with a root: the reaper writes the command's wait status here
  int agent_fds[5];  // the agent's ends of those pipes: the reaper, which never execs, closes them
};

static void child_fail(const struct child_ctx* c, int stage) {
  int e[2] = {stage, errno};
  ssize_t w = write(c->errfd, e, sizeof e);
  (void)w;
  _exit(127);
}

static void join_cgroup(const struct child_ctx* c) {
  if (!c->cg[0]) return;
  char p[256];
  snprintf(p, sizeof p, "%s/cgroup.procs", c->cg);
  if (write_file(p, "0") < 0) child_fail(c, S_CGROUP);
}

static void command_stdio(const struct child_ctx* c) {
  dup2(c->in, 0);
  dup2(c->out, 1);
  dup2(c->err, 2);
}

// RLIMIT_NOFILE, then the identity: no supplementary groups, gid, uid; with uid != 0 the
// capability bounding set is emptied too (setuid already clears the permitted and effective
// sets), and no_new_privs is set so that nothing the command runs gains privileges.
static void drop_privileges(const struct child_ctx* c) {
  const struct exec_req* r = c->r;
  if (r->nofile) {
    struct rlimit rl = {.rlim_cur = r->nofile, .rlim_max = r->nofile};
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) child_fail(c, S_NOFILE);
  }
  // SECURITY: the bounding set first, while we still hold CAP_SETPCAP: after the uid change
  // no exec can bring a capability back (file capabilities are capped by the bounding set).
  if (r->uid != 0)
    for (int cap = 0; cap < 64; cap++)
      if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
        if (errno == EINVAL) break;  // past the last capability
        child_fail(c, S_IDS);
      }
  // SECURITY: groups, then gid, then uid (after setresuid we could no longer change the
  // others); all three ids of each, so no saved id lets the command switch back. Any failure
  // ends the child: a command never runs with more than it asked for.
  if (r->root || r->have_uid || r->have_gid) {
    if (setgroups(0, NULL) < 0 || setresgid(r->gid, r->gid, r->gid) < 0 ||
        setresuid(r->uid, r->uid, r->uid) < 0)
      child_fail(c, S_IDS);
  }
  // SECURITY: no_new_privs: no setuid binary or file capability in the root gains anything.
  if ((r->root || r->uid != 0) && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) child_fail(c, S_IDS);
}

static void exec_command(const struct child_ctx* c) {
  signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  if (!strchr(c->r->argv[0], '/')) setenv("PATH", c->path_env, 1);  // execvpe's search path
  execvpe(c->r->argv[0], c->r->argv, c->envp);
  child_fail(c, S_EXEC);
}

// PID 1 of the command's PID namespace, in its own mount namespace: mounts a fresh proc in the
// root, changes root, drops privileges (so it holds nothing the command could use), forks the
// command, reaps every orphan, and when the command exits reports its wait status and exits:
// the kernel then kills whatever is left in the namespace.
static void reaper(const struct child_ctx* c) {
  const struct exec_req* r = c->r;
  setsid();
  join_cgroup(c);
  if (g_port >= 0) close(g_port);
  for (int i = 0; i < 5; i++)
    if (c->agent_fds[i] >= 0) close(c->agent_fds[i]);
  mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);  // nothing we mount leaks out
  char proc[256];
  snprintf(proc, sizeof proc, "%s/proc", r->root);
  if (mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) child_fail(c, S_PROC);
  // SECURITY: chroot, not pivot_root (the guest's root is an initramfs, which cannot be
  // pivoted away). A chroot holds only against a process without CAP_SYS_CHROOT: the sandbox
  // user (uid != 0) loses it in drop_privileges below. A command run as uid 0 keeps it and
  // could leave the chroot for the rest of the guest; the VM, not the chroot, is the boundary
  // then (docs/microvm.md).
  if (chroot(r->root) < 0 || chdir("/") < 0) child_fail(c, S_ROOT);
  drop_privileges(c);
  if (r->cwd && chdir(r->cwd) < 0) child_fail(c, S_CWD);
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, NULL);  // PID 1 of the namespace: only the agent's SIGKILL ends it
  pid_t cmd = fork();
  if (cmd < 0) child_fail(c, S_FORK);
  if (cmd == 0) {
    setsid();
    command_stdio(c);
    exec_command(c);
  }
  close(c->errfd);
  close(c->in);
  close(c->out);
  close(c->err);
  for (;;) {
    int st;
    pid_t w = waitpid(-1, &st, 0);
    if (w == cmd) {
      ssize_t n = write(c->statfd, &st, sizeof st);
      (void)n;
      _exit(0);
    }
    if (w < 0 && errno != EINTR) _exit(127);
  }
}

static void do_exec(uint32_t id, const struct fieldref* f, int nf) {
  struct exec_req r;
  char why[256];
  if (parse_exec(f, nf, &r, why, sizeof why) < 0) {
    send_error(id, "bad exec request: %s", why);
    free_req(&r);
    return;
  }
  if (r.pids_limit && g_cgroup_v2 != 1) {
    send_error(id, "pids_limit needs cgroup v2 (this guest has %s)", g_cgroup_v2 == 0 ? "v1" : "none");
    free_req(&r);
    return;
  }
  char cg[128];
  if (make_cgroup(&r, cg, sizeof cg) < 0) {
    send_error(id, "cannot make the command's cgroup %s: %s", cg, strerror(errno));
    kill_cgroup(cg, 1);
    free_req(&r);
    return;
  }
  int outp[2] = {-1, -1}, errp[2] = {-1, -1}, inp[2] = {-1, -1}, errpipe[2] = {-1, -1},
      statp[2] = {-1, -1};
  if (pipe2(outp, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0 || pipe2(inp, O_CLOEXEC) < 0 ||
      pipe2(errpipe, O_CLOEXEC) < 0 || (r.root && pipe2(statp, O_CLOEXEC | O_NONBLOCK) < 0)) {
    int e = errno;
    // The pipes made before the one that failed (PID 1 must not leak under EMFILE).
    int* all[] = {outp, errp, inp, errpipe, statp};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
      for (int j = 0; j < 2; j++)
        if (all[i][j] >= 0) close(all[i][j]);
    errno = e;
    send_error(id, "pipe: %s", strerror(errno));
    kill_cgroup(cg, 1);
    free_req(&r);
    return;
  }
  static char* default_env[] = {"PATH=/bin:/sbin:/usr/bin:/usr/sbin", "HOME=/root", NULL};
  struct child_ctx c = {
      .r = &r,
      .cg = cg,
      .envp = r.envc ? r.env : default_env,
      .path_env = "/bin:/sbin:/usr/bin:/usr/sbin",
      .in = inp[0],
      .out = outp[1],
      .err = errp[1],
      .errfd = errpipe[1],
      .statfd = statp[1],
      .agent_fds = {outp[0], errp[0], inp[1], errpipe[0], statp[0]},
  };
  for (int i = 0; i < r.envc; i++)
    if (strncmp(r.env[i], "PATH=", 5) == 0) c.path_env = r.env[i] + 5;
  uint64_t t0 = now_ns(CLOCK_MONOTONIC);
  pid_t pid;
  if (r.root) {
    // A fork that is PID 1 of a new PID namespace, in a new mount namespace: the reaper.
    pid = (pid_t)syscall(SYS_clone, CLONE_NEWPID | CLONE_NEWNS | SIGCHLD, NULL, NULL, NULL, NULL);
    if (pid == 0) reaper(&c);
  } else {
    pid = fork();
    if (pid == 0) {
      // The command: its own session, in its cgroup, stdio on the pipes.
      setsid();
      join_cgroup(&c);
      command_stdio(&c);
      drop_privileges(&c);
      if (r.cwd && chdir(r.cwd) < 0) child_fail(&c, S_CWD);
      exec_command(&c);
    }
  }
  close(outp[1]);
  close(errp[1]);
  close(inp[0]);
  close(errpipe[1]);
  if (statp[1] >= 0) close(statp[1]);
  if (pid < 0) {
    int e = errno;
    close(outp[0]);
    close(errp[0]);
    close(inp[1]);
    close(errpipe[0]);
    if (statp[0] >= 0) close(statp[0]);
    send_error(id, "%s: %s", r.root ? "clone" : "fork", strerror(e));
    kill_cgroup(cg, 1);
    free_req(&r);
    return;
  }
  int start_err[2] = {0, 0};  // {stage (S_*), errno}
  {
    ssize_t n;
    do n = read(errpipe[0], start_err, sizeof start_err);
    while (n < 0 && errno == EINTR);
    if (n != sizeof start_err) start_err[0] = start_err[1] = 0;
    close(errpipe[0]);
  }
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  struct out_stream so = {.fd = outp[0], .limit = r.out_limit}, se = {.fd = errp[0], .limit = r.out_limit};
  fcntl(so.fd, F_SETFL, O_NONBLOCK);
  fcntl(se.fd, F_SETFL, O_NONBLOCK);
  int infd = inp[1];
  uint32_t in_off = 0;
  if (infd >= 0) fcntl(infd, F_SETFL, O_NONBLOCK);
  if (infd >= 0 && r.in_len == 0) { close(infd); infd = -1; }
  uint64_t deadline = r.timeout_ms ? t0 + (uint64_t)r.timeout_ms * 1000000ull : 0;
  uint64_t kill_at = 0;  // after the deadline: end of the SIGTERM grace
  int exited = 0, timed_out = 0, killed = 0, status = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  while (!exited || so.fd >= 0 || se.fd >= 0) {
    struct pollfd pf[4];
    int n = 0, ip = -1, op = -1, ep = -1, pp = -1;
    if (so.fd >= 0) { op = n; pf[n++] = (struct pollfd){.fd = so.fd, .events = POLLIN}; }
    if (se.fd >= 0) { ep = n; pf[n++] = (struct pollfd){.fd = se.fd, .events = POLLIN}; }
    if (infd >= 0) { ip = n; pf[n++] = (struct pollfd){.fd = infd, .events = POLLOUT}; }
    if (!exited && pidfd >= 0) { pp = n; pf[n++] = (struct pollfd){.fd = pidfd, .events = POLLIN}; }
    int wait_ms = -1;
    if (!exited && pidfd < 0) wait_ms = 10;  // no pidfd (old kernel): poll the child
    uint64_t next = !exited && deadline && !timed_out ? deadline : !exited && timed_out && !killed ? kill_at : 0;
    if (next) {
      uint64_t now = now_ns(CLOCK_MONOTONIC);
      int left = now >= next ? 0 : (int)((next - now) / 1000000ull) + 1;
      if (wait_ms < 0 || left < wait_ms) wait_ms = left;
    }
    int rc = poll(pf, (nfds_t)n, wait_ms);
    if (rc < 0 && errno != EINTR) break;
    if (op >= 0 && pf[op].revents) drain(&so);
    if (ep >= 0 && pf[ep].revents) drain(&se);
    if (ip >= 0 && pf[ip].revents) {
      if (pf[ip].revents & (POLLERR | POLLHUP)) { close(infd); infd = -1; }
      else {
        ssize_t w = write(infd, r.in + in_off, r.in_len - in_off);
        if (w > 0) in_off += (uint32_t)w;
        if ((w < 0 && errno != EAGAIN && errno != EINTR) || in_off == r.in_len) { close(infd); infd = -1; }
      }
    }
    if (!exited && (pidfd < 0 || (pp >= 0 && pf[pp].revents))) {
      pid_t w = wait4(pid, &status, WNOHANG, &ru);
      if (w == pid) {
        exited = 1;
        // The command is over: whatever it left running in its cgroup goes with it, so that
        // the pipes reach end of file. (With a root the kernel has already killed the rest of
        // the PID namespace when its reaper exited.)
        kill_cgroup(cg, 0);
      }
    }
    if (!exited && deadline && !timed_out && now_ns(CLOCK_MONOTONIC) >= deadline) {
      timed_out = 1;
      if (r.term_grace_ms) {
        term_cgroup(cg, pid, r.root != NULL);
        kill_at = now_ns(CLOCK_MONOTONIC) + (uint64_t)r.term_grace_ms * 1000000ull;
      } else {
        kill_at = now_ns(CLOCK_MONOTONIC);
      }
    }
    if (!exited && timed_out && !killed && now_ns(CLOCK_MONOTONIC) >= kill_at) {
      killed = 1;
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      kill_cgroup(cg, 0);
    }
  }
  if (!exited) {  // poll failed: make sure
    kill(pid, SIGKILL);
    wait4(pid, &status, 0, &ru);
  }
  if (statp[0] >= 0) {
    // The reaper's report of the command's own wait status (absent when the reaper was killed,
    // at the deadline, or failed before the command started: then its own status stands).
    int st;
    if (read(statp[0], &st, sizeof st) == (ssize_t)sizeof st) status = st;
    close(statp[0]);
  }
  if (infd >= 0) close(infd);
  if (pidfd >= 0) close(pidfd);
  uint64_t wall = (now_ns(CLOCK_MONOTONIC) - t0) / 1000;

  uint64_t cpu = (uint64_t)ru.ru_utime.tv_sec * 1000000ull + (uint64_t)ru.ru_utime.tv_usec +
                 (uint64_t)ru.ru_stime.tv_sec * 1000000ull + (uint64_t)ru.ru_stime.tv_usec;
  uint64_t peak = (uint64_t)ru.ru_maxrss * 1024ull, ooms = 0;
  if (cg[0]) {
    char path[256];
    if (g_cgroup_v2) {
      snprintf(path, sizeof path, "%s/cpu.stat", cg);
      uint64_t c = keyed_value(path, "usage_usec");
      if (c) cpu = c;
      snprintf(path, sizeof path, "%s/memory.peak", cg);
      uint64_t p = number_file(path);
      if (p) peak = p;
      snprintf(path, sizeof path, "%s/memory.events", cg);
      ooms = keyed_value(path, "oom_kill");
    } else {
      snprintf(path, sizeof path, "%s/memory.max_usage_in_bytes", cg);
      uint64_t p = number_file(path);
      if (p) peak = p;
      snprintf(path, sizeof path, "%s/memory.oom_control", cg);
      ooms = keyed_value(path, "oom_kill");
    }
    kill_cgroup(cg, 1);
  }
  while (waitpid(-1, NULL, WNOHANG) > 0) {}

  struct buf b = {0};
  if (start_err[0]) {
    char msg[300];
    const char* e = strerror(start_err[1]);
    switch (start_err[0]) {
      case S_CGROUP: snprintf(msg, sizeof msg, "cannot join the command's cgroup %s: %s", cg, e); break;
      case S_CWD: snprintf(msg, sizeof msg, "cannot change to %s: %s", r.cwd, e); break;
      case S_PROC: snprintf(msg, sizeof msg, "cannot mount proc on %s/proc: %s", r.root, e); break;
      case S_ROOT: snprintf(msg, sizeof msg, "cannot change root to %s: %s", r.root, e); break;
      case S_NOFILE: snprintf(msg, sizeof msg, "cannot set RLIMIT_NOFILE to %u: %s", r.nofile, e); break;
      case S_IDS: snprintf(msg, sizeof msg, "cannot switch to uid %u gid %u: %s", r.uid, r.gid, e); break;
      case S_FORK: snprintf(msg, sizeof msg, "cannot fork the command in its namespace: %s", e); break;
      default: snprintf(msg, sizeof msg, "cannot start %s: %s", r.argv[0], e); break;
    }
    field_str(&b, kStartError, msg);
  }
  if (WIFEXITED(status)) field_u32(&b, kExitCode, (uint32_t)WEXITSTATUS(status));
  else if (WIFSIGNALED(status)) field_u32(&b, kSignal, (uint32_t)WTERMSIG(status));
  field(&b, kStdout, so.b.p, so.b.len);
  field(&b, kStderr, se.b.p, se.b.len);
  field_u8(&b, kStdoutTruncated, (unsigned)so.truncated);
  field_u8(&b, kStderrTruncated, (unsigned)se.truncated);
  field_u64(&b, kCpuUsec, cpu);
  field_u64(&b, kPeakMemory, peak);
  field_u8(&b, kOom, ooms > 0);
  field_u8(&b, kTimedOut, (unsigned)timed_out);
  field_u64(&b, kWallUsec, wall);
  struct statvfs sv;
  if (r.root && g_has_root && statvfs(SCRATCH, &sv) == 0) {
    // The root's scratch space after the command (the host reports a full one as the disk
    // quota's breach).
    field_u64(&b, kDiskFree, (uint64_t)sv.f_bavail * sv.f_frsize);
    field_u64(&b, kDiskUsed, (uint64_t)(sv.f_blocks - sv.f_bfree) * sv.f_frsize);
  }
  if (b.failed) send_error(id, "out of memory building the result");
  else send_frame(kExecResult, id, &b);
  free(b.p);
  free(so.b.p);
  free(se.b.p);
  free_req(&r);
}

static void do_set_clock(uint32_t id, const struct fieldref* f, int nf) {
  uint64_t ns = 0;
  const unsigned char* seed = NULL;
  uint32_t seed_len = 0;
  int have_ns = 0;
  for (int i = 0; i < nf; i++) {
    if (f[i].tag == kRealtimeNs && f[i].n == 8 && !have_ns) {
      ns = get_le(f[i].d, 8);
      have_ns = 1;
    } else if (f[i].tag == kSeed && !seed) {
      seed = f[i].d;
      seed_len = f[i].n;
    } else {
      send_error(id, "bad set_clock request: field %u (length %u) unknown, repeated or of the wrong size",
                 f[i].tag, f[i].n);
      return;
    }
  }
  if (!have_ns) { send_error(id, "bad set_clock request: no realtime_ns"); return; }
  if (seed && (seed_len < 16 || seed_len > 512)) {
    send_error(id, "bad set_clock request: seed of %u bytes (want 16..512)", seed_len);
    return;
  }
  if (ns > (uint64_t)INT64_MAX) { send_error(id, "bad set_clock request: realtime_ns out of range"); return; }
  uint64_t before = now_ns(CLOCK_REALTIME);
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull), .tv_nsec = (long)(ns % 1000000000ull)};
  if (clock_settime(CLOCK_REALTIME, &ts) < 0) { send_error(id, "clock_settime: %s", strerror(errno)); return; }
  int reseeded = 0;
  if (seed) {
    int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
    if (fd < 0) { send_error(id, "open /dev/urandom: %s", strerror(errno)); return; }
    struct {
      struct rand_pool_info info;
      unsigned char bytes[512];
    } in;
    in.info.entropy_count = (int)seed_len * 8;
    in.info.buf_size = (int)seed_len;
    memcpy(in.bytes, seed, seed_len);
    // Credit the host's bytes and force a reseed of the CRNG now: every clone restored from
    // the template starts with the same pool, and must not keep producing the same stream.
    if (ioctl(fd, RNDADDENTROPY, &in) < 0 || ioctl(fd, RNDRESEEDCRNG) < 0) {
      int e = errno;
      close(fd);
      send_error(id, "reseeding the RNG: %s", strerror(e));
      return;
    }
    close(fd);
    reseeded = 1;
  }
  struct buf b = {0};
  field_u64(&b, kGuestNsBefore, before);
  field_u8(&b, kReseeded, (unsigned)reseeded);
  send_frame(kClockSet, id, &b);
  free(b.p);
}

// A directory that is the root of a mount (its device differs from its parent's).
static int is_mount_point(const char* path) {
  struct stat a, b;
  char parent[300];
  snprintf(parent, sizeof parent, "%s/..", path);
  return stat(path, &a) == 0 && S_ISDIR(a.st_mode) && stat(parent, &b) == 0 && a.st_dev != b.st_dev;
}

static int is_dir(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

// /sandbox (a second newc archive the host appends: the tool image's rootfs) as the commands'
// root: read-only, with tmpfs where commands write and a tiny /dev. A mount whose directory the
// image lacks is skipped (the root is read-only: nothing is created in it). 1 when done.
static int prepare_root(void) {
  const char* R = SANDBOX_ROOT;
  if (!is_dir(R)) return 0;
  if (mount(R, R, NULL, MS_BIND | MS_REC, NULL) < 0 ||
      mount(NULL, R, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0) {
    klog("sbx-agent: making %s a read-only bind mount: %s", R, strerror(errno));
    umount2(R, MNT_DETACH);
    return 0;
  }
  // Where commands write: ONE tmpfs (outside the root), a directory of it bind-mounted on each
  // writable place, so the disk quota (CONFIGURE's size) holds for all of them together, as
  // the native backend's one scratch quota does.
  static const struct {
    const char* dir;
    const char* sub;
    mode_t mode;
    uid_t owner;
  } writable[] = {
      {"/work", "work", 0755, 1000},
      {"/tmp", "tmp", 01777, 0},
      {"/var/tmp", "var-tmp", 01777, 0},
      {"/run", "run", 0755, 0},
      {"/home/sandbox", "home", 0700, 1000},
  };
  if ((mkdir(SCRATCH, 0700) < 0 && errno != EEXIST) ||
      mount("tmpfs", SCRATCH, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") < 0) {
    klog("sbx-agent: tmpfs on %s: %s", SCRATCH, strerror(errno));
    return 0;
  }
  char path[128], src[128];
  for (size_t i = 0; i < sizeof writable / sizeof writable[0]; i++) {
    snprintf(path, sizeof path, "%s%s", R, writable[i].dir);
    if (!is_dir(path)) continue;
    snprintf(src, sizeof src, "%s/%s", SCRATCH, writable[i].sub);
    if (mkdir(src, 0700) < 0 || chown(src, writable[i].owner, writable[i].owner) < 0 ||
        chmod(src, writable[i].mode) < 0 || mount(src, path, NULL, MS_BIND, NULL) < 0 ||
        mount(NULL, path, NULL, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV, NULL) < 0) {
      klog("sbx-agent: scratch %s on %s: %s", src, path, strerror(errno));
      return 0;
    }
  }
  snprintf(path, sizeof path, "%s/dev", R);
  if (is_dir(path)) {
    if (mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=1m,nr_inodes=64") < 0) {
      klog("sbx-agent: tmpfs on %s: %s", path, strerror(errno));
      return 0;
    }
    static const struct {
      const char* name;
      unsigned minor;
    } devs[] = {{"null", 3}, {"zero", 5}, {"full", 7}, {"random", 8}, {"urandom", 9}};
    static const struct {
      const char* name;
      const char* target;
    } links[] = {{"fd", "/proc/self/fd"},
                 {"stdin", "/proc/self/fd/0"},
                 {"stdout", "/proc/self/fd/1"},
                 {"stderr", "/proc/self/fd/2"}};
    char p[160];
    for (size_t i = 0; i < sizeof devs / sizeof devs[0]; i++) {
      snprintf(p, sizeof p, "%s/%s", path, devs[i].name);
      if (mknod(p, S_IFCHR | 0666, makedev(1, devs[i].minor)) < 0 || chmod(p, 0666) < 0) {
        klog("sbx-agent: mknod %s: %s", p, strerror(errno));
        return 0;
      }
    }
    snprintf(p, sizeof p, "%s/shm", path);
    if (mkdir(p, 01777) < 0 || chmod(p, 01777) < 0) {
      klog("sbx-agent: mkdir %s: %s", p, strerror(errno));
      return 0;
    }
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
      snprintf(p, sizeof p, "%s/%s", path, links[i].name);
      if (symlink(links[i].target, p) < 0) {
        klog("sbx-agent: symlink %s: %s", p, strerror(errno));
        return 0;
      }
    }
  }
  return 1;
}

// ---- network (ioctls on an AF_INET socket; no netlink, no busybox) ----
static int set_addr(int s, const char* ifname, unsigned long req, in_addr_t a) {
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname);
  struct sockaddr_in* sin = (struct sockaddr_in*)&ifr.ifr_addr;
  sin->sin_family = AF_INET;
  sin->sin_addr.s_addr = a;
  return ioctl(s, req, &ifr);
}
static int set_up(int s, const char* ifname) {
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname);
  if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) return -1;
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  return ioctl(s, SIOCSIFFLAGS, &ifr);
}
static int add_route(int s, in_addr_t dst, in_addr_t mask, in_addr_t gw, const char* dev) {
  struct rtentry rt;
  memset(&rt, 0, sizeof rt);
  struct sockaddr_in* d = (struct sockaddr_in*)&rt.rt_dst;
  struct sockaddr_in* m = (struct sockaddr_in*)&rt.rt_genmask;
  struct sockaddr_in* g = (struct sockaddr_in*)&rt.rt_gateway;
  d->sin_family = m->sin_family = g->sin_family = AF_INET;
  d->sin_addr.s_addr = dst;
  m->sin_addr.s_addr = mask;
  g->sin_addr.s_addr = gw;
  rt.rt_flags = RTF_UP | (gw ? RTF_GATEWAY : 0) | (mask == 0xffffffffu ? RTF_HOST : 0);
  rt.rt_dev = (char*)dev;
  return ioctl(s, SIOCADDRT, &rt);
}

// lo up with 127.0.0.1/8 (at boot).
static void loopback_up(void) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) { klog("sbx-agent: socket: %s", strerror(errno)); return; }
  if (set_addr(s, "lo", SIOCSIFADDR, htonl(INADDR_LOOPBACK)) < 0 ||
      set_addr(s, "lo", SIOCSIFNETMASK, htonl(0xff000000u)) < 0 || set_up(s, "lo") < 0)
    klog("sbx-agent: bringing lo up: %s", strerror(errno));
  close(s);
}

static int parse_ipv4(const struct fieldref* f, in_addr_t* out) {
  char s[16];
  if (f->n == 0 || f->n >= sizeof s || memchr(f->d, 0, f->n)) return -1;
  memcpy(s, f->d, f->n);
  s[f->n] = 0;
  struct in_addr a;
  if (inet_pton(AF_INET, s, &a) != 1) return -1;
  *out = a.s_addr;
  return 0;
}

static void do_configure(uint32_t id, const struct fieldref* f, int nf) {
  in_addr_t addr = 0, gw = 0;
  uint32_t prefix = 32;
  uint64_t disk = 0;
  char host[65] = "";
  int have[6] = {0};
  for (int i = 0; i < nf; i++) {
    unsigned t = f[i].tag;
    if (t < kAddress || t > kHostname) {
      send_error(id, "bad configure request: unknown field %u", t);
      return;
    }
    if (have[t]++) { send_error(id, "bad configure request: field %u given twice", t); return; }
    switch (t) {
      case kAddress:
      case kGateway:
        if (parse_ipv4(&f[i], t == kAddress ? &addr : &gw) < 0) {
          send_error(id, "bad configure request: %s is not a dotted IPv4 address",
                     t == kAddress ? "address" : "gateway");
          return;
        }
        break;
      case kPrefix:
        if (f[i].n != 4 || (prefix = (uint32_t)get_le(f[i].d, 4)) > 32) {
          send_error(id, "bad configure request: prefix: want one u32 of at most 32");
          return;
        }
        break;
      case kDiskBytes:
        if (f[i].n != 8) { send_error(id, "bad configure request: disk_bytes: want one u64"); return; }
        disk = get_le(f[i].d, 8);
        break;
      case kHostname:
        if (f[i].n == 0 || f[i].n > 64 || memchr(f[i].d, 0, f[i].n)) {
          send_error(id, "bad configure request: hostname of 1..64 bytes without NUL wanted");
          return;
        }
        memcpy(host, f[i].d, f[i].n);
        host[f[i].n] = 0;
        break;
    }
  }
  if ((have[kPrefix] || have[kGateway]) && !have[kAddress]) {
    send_error(id, "bad configure request: prefix or gateway without an address");
    return;
  }
  if (g_configured) { send_error(id, "configure: already configured"); return; }
  g_configured = 1;
  if (have[kAddress]) {
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) { send_error(id, "configure: socket: %s", strerror(errno)); return; }
    // The device appears when virtio_net probes it; it is there long before, but be patient.
    for (int tries = 0; tries < 200 && if_nametoindex("eth0") == 0; tries++) {
      struct timespec ts = {0, 10000000};
      nanosleep(&ts, NULL);
    }
    in_addr_t mask = prefix ? htonl(0xffffffffu << (32 - prefix)) : 0;
    const char* step = "address";
    int ok = set_addr(s, "eth0", SIOCSIFADDR, addr) == 0 &&
             (step = "netmask", set_addr(s, "eth0", SIOCSIFNETMASK, mask) == 0) &&
             // SIOCSIFADDR set a classful broadcast: the subnet's, or none for /31 and /32
             (step = "broadcast",
              set_addr(s, "eth0", SIOCSIFBRDADDR, prefix >= 31 ? 0 : (addr | ~mask)) == 0) &&
             (step = "up", set_up(s, "eth0") == 0);
    if (ok && have[kGateway]) {
      // A link-scope host route to the gateway (it need not be in the address's subnet), then
      // the default route through it.
      step = "route to the gateway";
      ok = add_route(s, gw, 0xffffffffu, 0, "eth0") == 0 || errno == EEXIST;
      if (ok) step = "default route", ok = add_route(s, 0, 0, gw, "eth0") == 0;
    }
    int e = errno;
    close(s);
    if (!ok) { send_error(id, "configure: eth0 %s: %s", step, strerror(e)); return; }
  }
  if (disk) {
    // Where commands write: the root's one scratch tmpfs (every writable place of the root is
    // a directory of it) gets the size; the initramfs's /tmp when no root was prepared.
    char opts[64];
    snprintf(opts, sizeof opts, "size=%llu", (unsigned long long)disk);
    const char* path = g_has_root ? SCRATCH : "/tmp";
    if (is_mount_point(path) &&
        mount("tmpfs", path, "tmpfs", MS_REMOUNT | MS_NOSUID | MS_NODEV, opts) < 0) {
      send_error(id, "configure: remounting %s with %s: %s", path, opts, strerror(errno));
      return;
    }
  }
  if (host[0] && sethostname(host, strlen(host)) < 0) {
    send_error(id, "configure: sethostname: %s", strerror(errno));
    return;
  }
  send_frame(kConfigured, id, NULL);
}

static void handle(unsigned type, uint32_t id, const unsigned char* p, uint32_t n) {
  static struct fieldref f[2 * kMaxArgs + 16];
  const char* why = NULL;
  int nf = split_fields(p, n, f, (int)(sizeof f / sizeof f[0]), &why);
  if (nf < 0) { send_error(id, "bad payload: %s", why); return; }
  switch (type) {
    case kPing:
      if (nf) { send_error(id, "ping takes no fields"); return; }
      send_frame(kPong, id, NULL);
      break;
    case kExec: do_exec(id, f, nf); break;
    case kSetClock: do_set_clock(id, f, nf); break;
    case kConfigure: do_configure(id, f, nf); break;
    default: send_error(id, "unknown request type %u", type); break;
  }
}

// ---- the channel: frames in, resynchronising on the magic after garbage ----
static unsigned char* g_in;
static size_t g_in_len;

static void serve(void) {
  g_in = malloc(kMaxRequestPayload + kHeaderSize);
  if (!g_in) { klog("sbx-agent: out of memory"); return; }
  for (;;) {
    // Parse what we have.
    for (;;) {
      if (g_in_len < kHeaderSize) {
        // Keep only a possible start of the magic.
        if (g_in_len && memcmp(g_in, SBXV_MAGIC, g_in_len < 4 ? g_in_len : 4) != 0) goto garbage;
        break;
      }
      if (memcmp(g_in, SBXV_MAGIC, 4) != 0) goto garbage;
      {
        unsigned ver = g_in[4], type = g_in[5];
        unsigned flags = (unsigned)get_le(g_in + 6, 2);
        uint32_t id = (uint32_t)get_le(g_in + 8, 4), len = (uint32_t)get_le(g_in + 12, 4);
        if (ver != kVersion) { send_error(id, "protocol version %u, this agent speaks %d", ver, kVersion); goto skip1; }
        if (flags) { send_error(id, "flags 0x%x set; none are defined", flags); goto skip1; }
        if (len > kMaxRequestPayload) { send_error(id, "payload of %u bytes, over the %d limit", len, kMaxRequestPayload); goto skip1; }
        if (g_in_len < kHeaderSize + (size_t)len) break;
        handle(type, id, g_in + kHeaderSize, len);
        memmove(g_in, g_in + kHeaderSize + len, g_in_len - kHeaderSize - len);
        g_in_len -= kHeaderSize + len;
        continue;
      }
    garbage : {
      size_t skip = 1;
      while (skip < g_in_len && g_in[skip] != 'S') skip++;
      send_error(0, "bad frame: %zu byte(s) that are not a frame header skipped", skip);
      memmove(g_in, g_in + skip, g_in_len - skip);
      g_in_len -= skip;
      continue;
    }
    skip1:
      memmove(g_in, g_in + 1, g_in_len - 1);
      g_in_len -= 1;
      {
        size_t skip = 0;
        while (skip < g_in_len && g_in[skip] != 'S') skip++;
        memmove(g_in, g_in + skip, g_in_len - skip);
        g_in_len -= skip;
      }
    }
    struct pollfd pf = {.fd = g_port, .events = POLLIN};
    int rc = poll(&pf, 1, -1);
    if (rc < 0) continue;
    if ((pf.revents & POLLHUP) && !(pf.revents & POLLIN)) {
      // No host on the other end (between a snapshot and its restore): wait for one.
      struct timespec ts = {0, 5000000};
      nanosleep(&ts, NULL);
      continue;
    }
    ssize_t r = read(g_port, g_in + g_in_len, kMaxRequestPayload + kHeaderSize - g_in_len);
    if (r < 0) {
      if (errno != EINTR && errno != EAGAIN) {
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
      }
      continue;
    }
    if (r == 0) {
      struct timespec ts = {0, 5000000};
      nanosleep(&ts, NULL);
      continue;
    }
    g_in_len += (size_t)r;
  }
}

// ---- boot ----
static void load_modules(void) {
  FILE* f = fopen("/etc/sbx-modules", "re");
  if (!f) return;
  char name[64];
  while (fscanf(f, "%63s", name) == 1) {
    char path[128];
    snprintf(path, sizeof path, "/lib/modules/%s.ko", name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { klog("sbx-agent: %s: %s", path, strerror(errno)); continue; }
    if (syscall(SYS_finit_module, fd, "", 0) < 0 && errno != EEXIST)
      klog("sbx-agent: loading %s: %s", path, strerror(errno));
    close(fd);
  }
  fclose(f);
}

// The device node of the port named PORT_NAME, waiting for the driver to add it.
static int open_port(void) {
  for (int tries = 0; tries < 2000; tries++) {
    DIR* d = opendir("/sys/class/virtio-ports");
    if (d) {
      struct dirent* e;
      while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[300], name[64];
        snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name", e->d_name);
        if (read_file(path, name, sizeof name) <= 0) continue;
        name[strcspn(name, "\n")] = 0;
        if (strcmp(name, PORT_NAME) != 0) continue;
        snprintf(path, sizeof path, "/dev/%s", e->d_name);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd >= 0) {
          closedir(d);
          return fd;
        }
      }
      closedir(d);
    }
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  return -1;
}

static void setup_cgroups(void) {
  mkdir("/sys/fs/cgroup", 0755);
  if (mount("cgroup2", "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) == 0) {
    if (write_file("/sys/fs/cgroup/cgroup.subtree_control", "+memory +pids") == 0 ||
        write_file("/sys/fs/cgroup/cgroup.subtree_control", "+memory") == 0) {
      g_cgroup_v2 = 1;
      return;
    }
    klog("sbx-agent: cgroup2 has no memory controller: %s", strerror(errno));
    umount("/sys/fs/cgroup");
  }
  if (mount("cgroup", "/sys/fs/cgroup", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=755") == 0 &&
      mkdir("/sys/fs/cgroup/memory", 0755) == 0 &&
      mount("memory", "/sys/fs/cgroup/memory", "cgroup", MS_NOSUID | MS_NODEV | MS_NOEXEC, "memory") == 0) {
    g_cgroup_v2 = 0;
    return;
  }
  klog("sbx-agent: no memory cgroup: commands run without a memory limit");
  g_cgroup_v2 = -1;
}

int main(void) {
  if (getpid() != 1) {
    fprintf(stderr, "sbx-agent: I am the guest's PID 1 (docs/microvm.md); not starting\n");
    return 2;
  }
  mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
  mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
  mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
  mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
  mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
  sethostname("sandbox", 7);
  signal(SIGPIPE, SIG_IGN);
  setup_cgroups();
  // No IPv6 at all (the host side routes IPv4 only): before virtio_net makes eth0, so that the
  // default applies to it, and for every existing device (lo).
  write_file("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
  write_file("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1");
  load_modules();
  loopback_up();
  g_has_root = prepare_root();
  g_port = open_port();
  if (g_port < 0) {
    klog("sbx-agent: no virtio-serial port named %s; powering off", PORT_NAME);
    reboot(RB_POWER_OFF);
    for (;;) pause();
  }
  struct utsname u;
  uname(&u);
  struct buf b = {0};
  field_str(&b, kAgentVersion, AGENT_VERSION);
  field_str(&b, kKernel, u.release);
  field_str(&b, kCgroup, g_cgroup_v2 > 0 ? "v2" : g_cgroup_v2 == 0 ? "v1" : "none");
  field_u8(&b, kHasRoot, (unsigned)g_has_root);
  send_frame(kReady, 0, &b);
  free(b.p);
  serve();
  for (;;) pause();
}
