/* The host of one wasm2c-compiled module (BK-2; docs/wasm.md): linked with the module's C (wasm2c
 * -n module), Debian's wasm2c runtime (wasm-rt-impl.c) and the WASI imports (wasi_host.c) into
 * one static executable, /wasm/host in the module's image. The wasm backend runs it as the
 * sandbox's pre-spawned command process (the native backend's machinery: namespaces, cgroup,
 * seccomp), so:
 *
 *   wasm-host [--max-pages N] [--dir DIR] --script-fd FD   instantiate first, then wait for
 *                                                         the command on FD (until EOF)
 *   wasm-host [--max-pages N] [--dir DIR] -c COMMAND       instantiate and run COMMAND
 *     (both also take --deadline-ms N and --cpu-ms N: the in-engine interruption below)
 *   wasm-host [--dir DIR] --bench-instantiate N            instantiate and free N times; print
 *                                                         p50/p95/max in µs (NFR-3's own
 *                                                         figure, docs/performance.md)
 *
 * A command is the text the agent gives a pre-spawned shell: `export NAME='value'` lines (the
 * environment beyond the base one), then the command line, split into argv like a shell does
 * for plain words ('single', "double" quotes and backslashes) but with no shell behind it: a
 * pipe, redirection, `;`, `&`, `$` or a backquote outside quotes is refused (exit 127). argv is
 * the module's (argv[0] picks the tool of a multi-call module). /work (DIR) is the one
 * preopened directory.
 *
 * Limits, beside the sandbox's cgroup: the linear memory may not grow past --max-pages (64 KiB
 * each, the request's memory limit): a memory.grow past it ends the run as the cgroup's OOM
 * killer would, by SIGKILL... from the host itself, which the module cannot cause any other way
 * (it has no signals): the backend reads that death as resource_exceeded. A trap (out of
 * bounds, unreachable, stack exhaustion, ...) ends the run with exit 134 and its reason on
 * stderr.
 *
 * In-engine interruption (RES-1, RES-5; wasm2c has no fuel or epoch counter, so the host
 * interrupts the instance from a signal, the way wasm2c itself turns a guard-page fault into a
 * trap): a deadline (--deadline-ms, wall clock: Wasmtime's epoch deadline in effect), a CPU-time
 * budget (--cpu-ms, the process's CPU clock: what fuel bounds) and SIGTERM (the sandbox's
 * timeout) each trap the running instance. While a WASI import runs, the trap waits for the
 * import to return (wasi_host.h), so host state is never cut in half. The host then says why on
 * stderr ("wasm: interrupted: ...") and dies by a signal the module cannot raise: SIGALRM for
 * the deadline, SIGXCPU for the CPU budget, SIGTERM for SIGTERM; the backend reports the first
 * as timeout and the second as resource_exceeded. The backend sets both per command with a
 * first line `#sbx-wasm deadline_ms=N cpu_ms=N` after the exports (0: none).
 *
 * Exit: the module's proc_exit code, 0 when _start returns, 134 on a trap, 127 for a command
 * that cannot run, 126 when the module cannot be instantiated; killed by SIGALRM, SIGXCPU or
 * SIGTERM when interrupted.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <module.h> /* wasm2c -n module: Z_module_*, generated in the build tree */
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <wasm-rt-impl.h>

#include "backend/wasm/host/wasi_host.h"

extern char** environ;

static uint32_t g_max_pages = UINT32_MAX;

/* The memory limit (RES-2) on the linear memory: every allocation and growth goes through these
 * (linked with -Wl,--wrap). */
void __real_wasm_rt_allocate_memory(wasm_rt_memory_t* m, uint32_t initial, uint32_t max);
uint32_t __real_wasm_rt_grow_memory(wasm_rt_memory_t* m, uint32_t delta);

static void LimitBreached(const char* what, uint64_t pages) {
  char msg[160];
  int n =
      snprintf(msg, sizeof msg, "wasm: memory limit: %s %llu pages of 64 KiB, the limit is %u\n",
               what, (unsigned long long)pages, g_max_pages);
  if (n > 0 && write(2, msg, (size_t)n) < 0) {
  }
  /* SECURITY: a death by SIGKILL of the host itself is the one outcome a module cannot cause
   * (proc_raise is refused, traps exit 134): the backend can trust it as resource_exceeded. */
  kill(getpid(), SIGKILL);
  _exit(137);
}

void __wrap_wasm_rt_allocate_memory(wasm_rt_memory_t* m, uint32_t initial, uint32_t max) {
  if (initial > g_max_pages) LimitBreached("the module starts with", initial);
  __real_wasm_rt_allocate_memory(m, initial, max);
}

uint32_t __wrap_wasm_rt_grow_memory(wasm_rt_memory_t* m, uint32_t delta) {
  if ((uint64_t)m->pages + delta > g_max_pages)
    LimitBreached("growing to", (uint64_t)m->pages + delta);
  return __real_wasm_rt_grow_memory(m, delta);
}

/* wabt 1.0.32's wasm_rt_free_memory unmaps only the pages in use (memory->size) of the 8 GiB it
 * reserved (wasm-rt-impl.c, WASM_RT_MEMCHECK_GUARD_PAGES): the rest of the reservation stayed
 * mapped, 8 GiB of address space lost per instance, which a serving host that makes an
 * instance per command would run out of after ~16,000 commands. Unmap the whole reservation. */
#define SBX_WASM_RESERVATION 0x200000000ul /* what wasm_rt_allocate_memory reserves */
void __wrap_wasm_rt_free_memory(wasm_rt_memory_t* m) {
  if (m->data && munmap(m->data, SBX_WASM_RESERVATION) != 0) abort();
  m->data = NULL;
  m->size = 0;
  m->pages = 0;
}

/* Serving (--serve-fd): a command that cannot run ends that command, not the host. */
static int g_serving = 0;
static sigjmp_buf g_command_failed;
enum { kFailedBase = 0x400 };

static void Die(int code, const char* fmt, const char* arg) {
  fprintf(stderr, "wasm: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  fflush(stderr);
  if (g_serving) siglongjmp(g_command_failed, kFailedBase + code);
  exit(code);
}

/* What one command allocates (its words, environment): freed when it ends, so a serving host
 * does not grow with the commands it has run. */
struct Allocation {
  void* p;
  size_t n;
};
static struct Allocation* g_arena = NULL;
static size_t g_arena_len = 0, g_arena_cap = 0;
static void* Alloc(size_t n) {
  if (g_arena_len == g_arena_cap) {
    g_arena_cap = g_arena_cap ? g_arena_cap * 2 : 64;
    g_arena = realloc(g_arena, g_arena_cap * sizeof *g_arena);
    if (!g_arena) abort();
  }
  if (n == 0) n = 1;
  void* m = calloc(1, n);
  if (!m) abort();
  g_arena[g_arena_len++] = (struct Allocation){m, n};
  return m;
}
/* Zeroed first (LC-8): the environment may carry secrets, and a serving host lives on. */
static void FreeArena(void) {
  for (size_t i = 0; i < g_arena_len; i++) {
    explicit_bzero(g_arena[i].p, g_arena[i].n);
    free(g_arena[i].p);
  }
  g_arena_len = 0;
}

/* Reads FD to EOF (the agent closes its end after the command). */
static char* ReadAll(int fd) {
  size_t cap = 4096, len = 0;
  char* buf = malloc(cap);
  for (;;) {
    if (len + 1 >= cap) buf = realloc(buf, cap *= 2);
    ssize_t n = read(fd, buf + len, cap - len - 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
  }
  buf[len] = 0;
  close(fd);
  return buf;
}

/* One word of a command line: quotes and backslashes as in sh, no expansion. Advances *p past
 * it; returns NULL at the end. Refuses shell syntax outside quotes. */
static char* Word(const char** p) {
  const char* s = *p;
  while (*s == ' ' || *s == '\t' || *s == '\n') s++;
  if (!*s) {
    *p = s;
    return NULL;
  }
  char* out = Alloc(strlen(s) + 1);
  size_t n = 0;
  while (*s && *s != ' ' && *s != '\t' && *s != '\n') {
    if (*s == '\'') {
      s++;
      while (*s && *s != '\'') out[n++] = *s++;
      if (*s != '\'') Die(127, "unterminated quote in: %s", *p);
      s++;
    } else if (*s == '"') {
      s++;
      while (*s && *s != '"') {
        if (*s == '\\' && (s[1] == '"' || s[1] == '\\')) s++;
        if (*s == '$' || *s == '`') Die(127, "no shell: no expansion in %s", *p);
        out[n++] = *s++;
      }
      if (*s != '"') Die(127, "unterminated quote in: %s", *p);
      s++;
    } else if (*s == '\\' && s[1]) {
      out[n++] = s[1];
      s += 2;
    } else if (strchr("|&;<>()$`*?[]{}~", *s)) {
      char c[2] = {*s, 0};
      Die(127, "the wasm backend runs a module's command, not a shell: '%s' is not supported", c);
    } else {
      out[n++] = *s++;
    }
  }
  out[n] = 0;
  *p = s;
  return out;
}

/* `export NAME='value'` (the agent's form: single quotes, '\'' for a quote inside). */
static char* ExportLine(const char* line, size_t len) {
  const char* eq = memchr(line, '=', len);
  if (!eq) return NULL;
  size_t name_len = (size_t)(eq - line);
  char* out = Alloc(len + 1);
  memcpy(out, line, name_len + 1);
  size_t n = name_len + 1;
  const char* s = eq + 1;
  const char* end = line + len;
  while (s < end) {
    if (*s == '\'') {
      s++;
      while (s < end && *s != '\'') out[n++] = *s++;
      s++;
    } else if (*s == '\\' && s + 1 < end) {
      out[n++] = s[1];
      s += 2;
    } else {
      out[n++] = *s++;
    }
  }
  out[n] = 0;
  return out;
}

static Z_module_instance_t g_instance;
static sbx_wasi_t g_wasi;

static double NowUs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int CompareDoubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* NFR-3 measured where it happens: one instantiation (the linear memory reserved and its
 * initial pages made, the data segments copied, the tables filled) and the instance freed. */
static int BenchInstantiate(int n) {
  if (n < 1 || n > 1000000) Die(126, "%s", "--bench-instantiate needs 1..1000000");
  double* us = calloc((size_t)n, sizeof(double));
  for (int i = 0; i < n; i++) {
    double t0 = NowUs();
    Z_module_instantiate(&g_instance, &g_wasi);
    us[i] = NowUs() - t0;
    Z_module_free(&g_instance);
  }
  qsort(us, (size_t)n, sizeof(double), CompareDoubles);
  printf("instantiate_us n=%d p50=%.1f p95=%.1f max=%.1f\n", n, us[n / 2],
         us[(int)((n - 1) * 0.95)], us[n - 1]);
  return 0;
}

/* ---- In-engine interruption (see the top of this file) ---- */
enum { kInterruptTrapBase = 0x100 }; /* beyond wasm_rt_trap_t's values */
static uint64_t g_deadline_ms = 0, g_cpu_ms = 0;
static volatile sig_atomic_t g_running = 0; /* module code may be trapped */
static volatile sig_atomic_t g_why = 0;     /* the signal that interrupted */

static void TrapInterrupted(void) {
  g_running = 0;
  WASM_RT_LONGJMP(wasm_rt_jmp_buf, kInterruptTrapBase + g_why);
}

static void OnInterrupt(int sig) {
  if (!g_running) return;
  g_why = sig;
  if (sbx_wasi_in_import) {
    sbx_wasi_interrupt = 1; /* trapped when the import returns */
    return;
  }
  TrapInterrupted();
}

static void InstallHandlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnInterrupt;
  sa.sa_flags = SA_ONSTACK; /* no SA_RESTART: a blocking import gives up */
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGALRM);
  sigaddset(&sa.sa_mask, SIGPROF);
  sigaddset(&sa.sa_mask, SIGTERM);
  sigaction(SIGALRM, &sa, NULL);
  sigaction(SIGPROF, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sbx_wasi_on_interrupt = TrapInterrupted;
}

static void Arm(void) {
  InstallHandlers();
  if (g_deadline_ms) {
    struct itimerval t = {
        {0, 0}, {(time_t)(g_deadline_ms / 1000), (suseconds_t)(g_deadline_ms % 1000) * 1000}};
    setitimer(ITIMER_REAL, &t, NULL);
  }
  if (g_cpu_ms) { /* ITIMER_PROF: the process's user + system CPU time */
    struct itimerval t = {{0, 0},
                          {(time_t)(g_cpu_ms / 1000), (suseconds_t)(g_cpu_ms % 1000) * 1000}};
    setitimer(ITIMER_PROF, &t, NULL);
  }
}

/* Says why on the command's stderr; returns the signal that tells the backend what happened
 * (SIGALRM: the deadline, SIGXCPU: the CPU budget, SIGTERM). */
static int SayInterrupted(int sig) {
  char msg[200];
  int n = sig == SIGALRM   ? snprintf(msg, sizeof msg,
                                      "wasm: interrupted: the deadline of %llu ms passed (in-engine "
                                        "interruption)\n",
                                      (unsigned long long)g_deadline_ms)
          : sig == SIGPROF ? snprintf(msg, sizeof msg,
                                      "wasm: interrupted: the CPU budget of %llu ms is spent "
                                      "(in-engine interruption)\n",
                                      (unsigned long long)g_cpu_ms)
                           : snprintf(msg, sizeof msg,
                                      "wasm: interrupted: terminated (SIGTERM: the sandbox's "
                                      "timeout)\n");
  if (n > 0 && write(2, msg, (size_t)n) < 0) {
  }
  return sig == SIGPROF ? SIGXCPU : sig;
}

/* One-shot: dies by that signal (a module cannot raise one). */
static void Interrupted(int die) {
  struct rlimit none = {0, 0}; /* SIGXCPU would dump core */
  setrlimit(RLIMIT_CORE, &none);
  signal(die, SIG_DFL);
  sigset_t all;
  sigemptyset(&all);
  sigaddset(&all, die);
  sigprocmask(SIG_UNBLOCK, &all, NULL);
  raise(die);
  _exit(128 + die);
}

/* `#sbx-wasm deadline_ms=N cpu_ms=N`: the backend's per-command settings. */
static void Directive(const char* line, size_t len) {
  char buf[200];
  if (len >= sizeof buf) Die(127, "%s", "#sbx-wasm line too long");
  memcpy(buf, line, len);
  buf[len] = 0;
  char* save = NULL;
  for (char* kv = strtok_r(buf, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
    char* end = NULL;
    if (strncmp(kv, "deadline_ms=", 12) == 0) {
      g_deadline_ms = strtoull(kv + 12, &end, 10);
    } else if (strncmp(kv, "cpu_ms=", 7) == 0) {
      g_cpu_ms = strtoull(kv + 7, &end, 10);
    } else {
      Die(127, "unknown #sbx-wasm setting: %s", kv);
    }
    if (!end || *end) Die(127, "bad #sbx-wasm setting: %s", kv);
  }
}

/* One command's text: `export NAME='value'` lines, an optional `#sbx-wasm ...` line, the command
 * line. Sets the instance's argv and environment (the base one this process has, then the
 * exports); allocations go to the arena. */
static void ParseCommand(const char* text) {
  int envc = 0;
  while (environ[envc]) envc++;
  int exports = 0;
  for (const char* q = text; strncmp(q, "export ", 7) == 0 && strchr(q, '\n');
       q = strchr(q, '\n') + 1)
    exports++;
  char** envp = Alloc(((size_t)envc + (size_t)exports + 1) * sizeof(char*));
  int en = 0;
  for (int i = 0; i < envc; i++) envp[en++] = environ[i];
  const char* p = text;
  while (strncmp(p, "export ", 7) == 0) {
    const char* nl = strchr(p, '\n');
    if (!nl) break;
    char* kv = ExportLine(p + 7, (size_t)(nl - p - 7));
    if (kv) envp[en++] = kv;
    p = nl + 1;
  }
  envp[en] = NULL;
  if (strncmp(p, "#sbx-wasm ", 10) == 0) {
    const char* nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    Directive(p + 10, len - 10);
    p += len + (nl ? 1 : 0);
  }
  char** args = Alloc((strlen(p) / 2 + 2) * sizeof(char*));
  int an = 0;
  char* w;
  while ((w = Word(&p)) != NULL) args[an++] = w;
  if (an == 0) Die(127, "%s", "empty command");
  g_wasi.argc = an;
  g_wasi.argv = args;
  g_wasi.envc = en;
  g_wasi.envp = envp;
}

/* proc_exit inside an import: back to the command's trap point with the code. */
enum { kExitBase = 0x200 };
static void OnProcExit(int code) {
  g_running = 0;
  WASM_RT_LONGJMP(wasm_rt_jmp_buf, kExitBase + (code & 0xff));
}

/* How a command ended: an exit code, or the signal of an interruption (SIGALRM, SIGPROF,
 * SIGTERM). */
typedef struct {
  int signaled;
  int value;
} Outcome;

/* Runs `_start` of the ready instance with the argv and environment set. */
static Outcome RunStart(void) {
  sbx_wasi_in_import = 0;
  sbx_wasi_interrupt = 0;
  g_why = 0;
  sbx_wasi_on_exit = OnProcExit;
  int trap = (int)wasm_rt_impl_try();
  if (trap == WASM_RT_TRAP_NONE) {
    g_running = 1;
    Arm();
    Z_moduleZ__start(&g_instance);
    trap = kExitBase;
  }
  g_running = 0;
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  setitimer(ITIMER_PROF, &off, NULL);
  sbx_wasi_in_import = 0; /* a jump out of an import skipped its scope's end */
  sbx_wasi_interrupt = 0;
  if (trap >= kExitBase) return (Outcome){0, trap - kExitBase};
  if (trap > kInterruptTrapBase) return (Outcome){1, SayInterrupted(trap - kInterruptTrapBase)};
  fprintf(stderr, "wasm: trap: %s\n", wasm_rt_strerror((wasm_rt_trap_t)trap));
  fflush(stderr);
  return (Outcome){0, 134};
}

/* A fresh instance on a fresh WASI table (the preopened directory opened again). */
static void Instantiate(const char* dir) {
  if (sbx_wasi_init(&g_wasi, dir, "/work") != 0)
    Die(126, "cannot open the preopened directory %s", dir);
  Z_module_instantiate(&g_instance, &g_wasi);
  g_wasi.memory = Z_moduleZ_memory(&g_instance);
}

/* ---- Serving (--serve-fd FD; docs/wasm.md "The serving host") ----
 * One host per sandbox runs every command, each in a fresh instance made ahead of it, so a
 * command costs no process start, exit or reap. FD is a SOCK_SEQPACKET socket; per command the
 * runtime sends one packet, the command's text (as on --script-fd), with exactly three
 * descriptors (SCM_RIGHTS): the command's stdin, stdout and stderr. The host answers one
 * packet, struct {int32 signaled; int32 value} (value: the exit code, or the signal of an
 * interruption), after it has closed the command's descriptors (so the runtime has seen their
 * EOF first), then makes the next instance. EOF on FD: the host exits 0. A memory cap breach
 * still ends the host (and the sandbox) by SIGKILL; anything else ends only the command. */
static void CloseAllBut(int keep) {
  if (syscall(SYS_close_range, 0u, (unsigned)keep - 1, 0u) != 0)
    for (int f = 0; f < keep; f++) close(f);
  if (syscall(SYS_close_range, (unsigned)keep + 1, ~0u, 0u) != 0)
    for (int f = keep + 1; f < 4096; f++) close(f);
}

static int Serve(int fd, const char* dir) {
  /* Kept where it was given (>= 3: 0-2 are each command's), not moved up: the sandbox's
   * RLIMIT_NOFILE may be small. */
  if (fd < 3) Die(126, "%s", "--serve-fd must be 3 or above");
  const int kServeFd = fd;
  signal(SIGPIPE, SIG_IGN); /* a closed stdout is EPIPE to the module, not the host's death */
  InstallHandlers();        /* a SIGTERM between commands is ignored (g_running is 0) */
  g_serving = 1;
  static char text[256 * 1024];
  for (;;) {
    CloseAllBut(kServeFd);
    FreeArena();
    g_deadline_ms = g_cpu_ms = 0;
    int failed = sigsetjmp(g_command_failed, 1);
    if (failed) _exit(failed - kFailedBase); /* cannot instantiate: nothing can be served */
    Instantiate(dir);                        /* ahead of the command (POOL-8) */

    char cbuf[CMSG_SPACE(sizeof(int) * 4)];
    struct iovec iov = {text, sizeof text - 1};
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = cbuf;
    m.msg_controllen = sizeof cbuf;
    ssize_t n;
    do n = recvmsg(kServeFd, &m, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n <= 0) return 0; /* the runtime closed its end */
    int fds[4], nfds = 0;
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      for (int j = 0; j < k && nfds < 4; j++)
        memcpy(&fds[nfds++], CMSG_DATA(c) + j * sizeof(int), sizeof(int));
    }
    Outcome o = {0, 127};
    if (nfds != 3 || (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
      /* Not the runtime's packet: nothing to report on, the descriptors are closed above. */
      o.value = 126;
    } else {
      /* Out of the way of 0-2 first (they may have arrived as 0-2 in another order). */
      int high[3];
      for (int j = 0; j < 3; j++) high[j] = fcntl(fds[j], F_DUPFD_CLOEXEC, 3);
      for (int j = 0; j < 3; j++) close(fds[j]);
      for (int j = 0; j < 3; j++) {
        dup2(high[j], j);
        close(high[j]);
      }
      text[n] = 0;
      failed = sigsetjmp(g_command_failed, 1);
      if (!failed) {
        ParseCommand(text);
        o = RunStart();
      } else {
        o.value = failed - kFailedBase;
      }
    }
    Z_module_free(&g_instance);
    explicit_bzero(text, (size_t)(n > 0 ? n : 0)); /* LC-8: the exports may be secrets */
    FreeArena();
    CloseAllBut(kServeFd); /* the command's stdio: its EOF reaches the runtime before the answer */
    int32_t answer[2] = {o.signaled, o.value};
    ssize_t w;
    do w = send(kServeFd, answer, sizeof answer, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    if (w != (ssize_t)sizeof answer) return 0;
  }
}

int main(int argc, char** argv) {
  int script_fd = -1, serve_fd = -1;
  const char* command = NULL;
  const char* dir = "/work";
  int bench = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--max-pages") == 0 && i + 1 < argc) {
      g_max_pages = (uint32_t)strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
      dir = argv[++i];
    } else if (strcmp(argv[i], "--script-fd") == 0 && i + 1 < argc) {
      script_fd = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--serve-fd") == 0 && i + 1 < argc) {
      serve_fd = atoi(argv[++i]);
    } else if (strcmp(argv[i], "-c") == 0 && i + 1 < argc) {
      command = argv[++i];
    } else if (strcmp(argv[i], "--deadline-ms") == 0 && i + 1 < argc) {
      g_deadline_ms = strtoull(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--cpu-ms") == 0 && i + 1 < argc) {
      g_cpu_ms = strtoull(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--bench-instantiate") == 0 && i + 1 < argc) {
      bench = atoi(argv[++i]);
    } else {
      Die(126,
          "usage: host [--max-pages N] [--dir DIR] (--script-fd FD | --serve-fd FD | -c COMMAND): "
          "%s",
          argv[i]);
    }
  }
  if (script_fd < 0 && serve_fd < 0 && !command && !bench)
    Die(126, "%s", "no command (--script-fd FD, --serve-fd FD or -c COMMAND)");

  wasm_rt_init();
  Z_module_init_module();
  if (serve_fd >= 0) return Serve(serve_fd, dir);
  if (bench) {
    if (sbx_wasi_init(&g_wasi, dir, "/work") != 0)
      Die(126, "cannot open the preopened directory %s", dir);
    return BenchInstantiate(bench);
  }
  /* Instantiate ahead of the command (POOL-8): a pre-spawned host has its instance ready. */
  Instantiate(dir);
  char* text = command ? strdup(command) : ReadAll(script_fd);
  if (!command && !*text) exit(0); /* dropped before it got a command (init_client.h) */
  ParseCommand(text);
  Outcome o = RunStart();
  if (o.signaled) Interrupted(o.value);
  exit(o.value);
}
