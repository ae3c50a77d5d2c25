/* WASI preview-1 on Linux for wasm2c modules (wasi_host.h). Layouts and numbers are those of
 * the witx definitions (wasi-libc's wasi/api.h asserts the same offsets). The imports by family:
 * this file the descriptor table's set-up, args and environment, clocks, random, scheduling and
 * exit; wasi_host_fd.c the descriptors (and sockets: none); wasi_host_path.c the paths. */
#define _GNU_SOURCE
#include "backend/wasm/host/wasi_host_internal.h"

void (*sbx_wasi_on_exit)(int code) = NULL;
void (*sbx_wasi_on_interrupt)(void) = NULL;
volatile sig_atomic_t sbx_wasi_in_import = 0;
volatile sig_atomic_t sbx_wasi_interrupt = 0;

int sbx_wasi_init(W* w, const char* preopen_path, const char* preopen_name) {
  for (int i = 0; i < SBX_WASI_MAX_FDS; i++) w->fds[i].host_fd = -1;
  for (int i = 0; i < 3; i++) {
    w->fds[i].host_fd = i;
    w->fds[i].is_dir = 0;
    w->fds[i].preopen = NULL;
    w->fds[i].fdflags = 0;
  }
  int d0 = open(preopen_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d0 < 0) return -1;
  /* Above 0-2 whatever is open now: a serving host opens it while 0-2 are closed, before the
   * command's stdio arrives. */
  int d = fcntl(d0, F_DUPFD_CLOEXEC, 3);
  close(d0);
  if (d < 0) return -1;
  w->fds[3].host_fd = d;
  w->fds[3].is_dir = 1;
  w->fds[3].preopen = preopen_name;
  w->fds[3].fdflags = 0;
  return 0;
}

void sbx_wasi_close_all(W* w) {
  for (int i = 3; i < SBX_WASI_MAX_FDS; i++) {
    if (w->fds[i].host_fd >= 0) close(w->fds[i].host_fd);
    w->fds[i].host_fd = -1;
  }
}

/* ---- args and environment ---- */
static uint32_t StringsSizes(W* w, int n, char** v, uint32_t count_ptr, uint32_t size_ptr) {
  if (!InMem(w, count_ptr, 4) || !InMem(w, size_ptr, 4)) return W_FAULT;
  uint64_t size = 0;
  for (int i = 0; i < n; i++) size += strlen(v[i]) + 1;
  if (size > UINT32_MAX) return W_2BIG;
  Put32(w, count_ptr, (uint32_t)n);
  Put32(w, size_ptr, (uint32_t)size);
  return 0;
}
static uint32_t StringsGet(W* w, int n, char** v, uint32_t ptrs, uint32_t buf) {
  if (!InMem(w, ptrs, (uint64_t)n * 4)) return W_FAULT;
  uint64_t off = buf;
  for (int i = 0; i < n; i++) {
    size_t len = strlen(v[i]) + 1;
    if (!InMem(w, off, len)) return W_FAULT;
    memcpy(P(w, (uint32_t)off), v[i], len);
    Put32(w, ptrs + 4u * (uint32_t)i, (uint32_t)off);
    off += len;
  }
  return 0;
}

uint32_t Z_wasi_snapshot_preview1Z_args_sizes_get(W* w, uint32_t count, uint32_t size) {
  SBX_IMPORT_SCOPE;
  return StringsSizes(w, w->argc, w->argv, count, size);
}
uint32_t Z_wasi_snapshot_preview1Z_args_get(W* w, uint32_t ptrs, uint32_t buf) {
  SBX_IMPORT_SCOPE;
  return StringsGet(w, w->argc, w->argv, ptrs, buf);
}
uint32_t Z_wasi_snapshot_preview1Z_environ_sizes_get(W* w, uint32_t count, uint32_t size) {
  SBX_IMPORT_SCOPE;
  return StringsSizes(w, w->envc, w->envp, count, size);
}
uint32_t Z_wasi_snapshot_preview1Z_environ_get(W* w, uint32_t ptrs, uint32_t buf) {
  SBX_IMPORT_SCOPE;
  return StringsGet(w, w->envc, w->envp, ptrs, buf);
}

/* ---- clocks, random, scheduling, exit ---- */
static int ClockId(uint32_t id, clockid_t* out) {
  switch (id) {
    case 0:
      *out = CLOCK_REALTIME;
      return 1;
    case 1:
      *out = CLOCK_MONOTONIC;
      return 1;
    case 2:
      *out = CLOCK_PROCESS_CPUTIME_ID;
      return 1;
    case 3:
      *out = CLOCK_THREAD_CPUTIME_ID;
      return 1;
    default:
      return 0;
  }
}
uint32_t Z_wasi_snapshot_preview1Z_clock_res_get(W* w, uint32_t id, uint32_t res) {
  SBX_IMPORT_SCOPE;
  clockid_t c;
  struct timespec t;
  if (!ClockId(id, &c)) return W_INVAL;
  if (!InMem(w, res, 8)) return W_FAULT;
  if (clock_getres(c, &t) != 0) return Werr(errno);
  Put64(w, res, Ns(t));
  return 0;
}
uint32_t Z_wasi_snapshot_preview1Z_clock_time_get(W* w, uint32_t id, uint64_t precision,
                                                  uint32_t out) {
  SBX_IMPORT_SCOPE;
  (void)precision;
  clockid_t c;
  struct timespec t;
  if (!ClockId(id, &c)) return W_INVAL;
  if (!InMem(w, out, 8)) return W_FAULT;
  if (clock_gettime(c, &t) != 0) return Werr(errno);
  Put64(w, out, Ns(t));
  return 0;
}
uint32_t Z_wasi_snapshot_preview1Z_random_get(W* w, uint32_t buf, uint32_t len) {
  SBX_IMPORT_SCOPE;
  if (!InMem(w, buf, len)) return W_FAULT;
  uint32_t done = 0;
  while (done < len) {
    ssize_t n = getrandom(P(w, buf + done), len - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Werr(errno);
    }
    done += (uint32_t)n;
  }
  return 0;
}
uint32_t Z_wasi_snapshot_preview1Z_sched_yield(W* w) {
  SBX_IMPORT_SCOPE;
  (void)w;
  sched_yield();
  return 0;
}
void Z_wasi_snapshot_preview1Z_proc_exit(W* w, uint32_t code) {
  SBX_IMPORT_SCOPE;
  w->exited = 1;
  w->exit_code = (int)code;
  if (sbx_wasi_on_exit) sbx_wasi_on_exit((int)code);
  _exit((int)(code & 0xff));
}
uint32_t Z_wasi_snapshot_preview1Z_proc_raise(W* w, uint32_t sig) {
  SBX_IMPORT_SCOPE;
  (void)w;
  (void)sig;
  return W_NOSYS; /* no signals between a module and its host */
}

/* poll_oneoff: clock subscriptions (sleeps) only; a descriptor subscription is NOTSUP. */
uint32_t Z_wasi_snapshot_preview1Z_poll_oneoff(W* w, uint32_t in, uint32_t out, uint32_t n,
                                               uint32_t nevents) {
  SBX_IMPORT_SCOPE;
  if (n == 0) return W_INVAL;
  if (!InMem(w, in, (uint64_t)n * 48) || !InMem(w, out, (uint64_t)n * 32) || !InMem(w, nevents, 4))
    return W_FAULT;
  uint64_t soonest = UINT64_MAX;
  uint32_t which = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t s = in + 48 * i;
    if (P(w, s + 8)[0] != 0) return W_NOTSUP; /* not a clock */
    clockid_t c;
    if (!ClockId(Get32(w, s + 16), &c)) return W_INVAL;
    uint64_t timeout = Get64(w, s + 24);
    uint16_t flags;
    memcpy(&flags, P(w, s + 40), 2);
    if (flags & 1) { /* absolute */
      struct timespec now;
      clock_gettime(c, &now);
      timeout = timeout > Ns(now) ? timeout - Ns(now) : 0;
    }
    if (timeout < soonest) {
      soonest = timeout;
      which = i;
    }
  }
  struct timespec t = {(time_t)(soonest / 1000000000u), (long)(soonest % 1000000000u)};
  while (nanosleep(&t, &t) != 0 && errno == EINTR && !sbx_wasi_interrupt) {
  }
  uint32_t e = out;
  memset(P(w, e), 0, 32);
  Put64(w, e, Get64(w, in + 48 * which));
  Put16(w, e + 8, 0);
  Put8(w, e + 10, 0); /* clock */
  Put32(w, nevents, 1);
  return 0;
}
