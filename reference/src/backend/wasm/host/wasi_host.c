/* Over 600 lines: the WASI preview-1 imports a module may call, one function each; the host is
 * compiled with every module, so it stays one C file with one header (issue 36 may split it by
 * import family). */
/* WASI preview-1 on Linux for wasm2c modules (wasi_host.h). Layouts and numbers are those of
 * the witx definitions (wasi-libc's wasi/api.h asserts the same offsets). */
#define _GNU_SOURCE
#include "backend/wasm/host/wasi_host.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* errno values of WASI (witx `errno`). */
enum {
  W_SUCCESS = 0,
  W_2BIG = 1,
  W_ACCES = 2,
  W_AGAIN = 6,
  W_BADF = 8,
  W_BUSY = 10,
  W_EXIST = 20,
  W_FAULT = 21,
  W_FBIG = 22,
  W_INTR = 27,
  W_INVAL = 28,
  W_IO = 29,
  W_ISDIR = 31,
  W_LOOP = 32,
  W_MFILE = 33,
  W_MLINK = 34,
  W_NAMETOOLONG = 37,
  W_NFILE = 41,
  W_NOENT = 44,
  W_NOMEM = 48,
  W_NOSPC = 51,
  W_NOSYS = 52,
  W_NOTDIR = 54,
  W_NOTEMPTY = 55,
  W_NOTSUP = 58,
  W_NOTTY = 59,
  W_NXIO = 60,
  W_OVERFLOW = 61,
  W_PERM = 63,
  W_PIPE = 64,
  W_RANGE = 68,
  W_ROFS = 69,
  W_SPIPE = 70,
  W_TXTBSY = 74,
  W_XDEV = 75,
  W_NOTCAPABLE = 76,
};
/* filetype */
enum { FT_UNKNOWN = 0, FT_BLOCK = 1, FT_CHAR = 2, FT_DIR = 3, FT_REG = 4, FT_SYMLINK = 7 };
/* oflags, fdflags, lookupflags */
enum { OF_CREAT = 1, OF_DIRECTORY = 2, OF_EXCL = 4, OF_TRUNC = 8 };
enum { FDF_APPEND = 1, FDF_DSYNC = 2, FDF_NONBLOCK = 4, FDF_RSYNC = 8, FDF_SYNC = 16 };
enum { LOOKUP_SYMLINK_FOLLOW = 1 };
/* rights: the module gets every right on what it opens; the walls are the paths it can name. */
#define ALL_RIGHTS UINT64_C(0x1FFFFFFF)

void (*sbx_wasi_on_exit)(int code) = NULL;
void (*sbx_wasi_on_interrupt)(void) = NULL;
volatile sig_atomic_t sbx_wasi_in_import = 0;
volatile sig_atomic_t sbx_wasi_interrupt = 0;

/* Every import runs inside this scope (the first statement of each): an interruption that
 * arrives while host code runs is deferred to the import's end (wasi_host.h), where the host's
 * hook traps the instance. A blocking call inside gives up on EINTR when one is pending. */
static inline void ImportLeave(int* unused) {
  (void)unused;
  if (--sbx_wasi_in_import == 0 && sbx_wasi_interrupt && sbx_wasi_on_interrupt)
    sbx_wasi_on_interrupt();
}
#define SBX_IMPORT_SCOPE \
  __attribute__((cleanup(ImportLeave), unused)) int sbx_import_scope_ = (++sbx_wasi_in_import, 0)

typedef struct Z_wasi_snapshot_preview1_instance_t W;

/* ---- errno mapping: the one place ---- */
static uint32_t Werr(int e) {
  switch (e) {
    case 0:
      return W_SUCCESS;
    case E2BIG:
      return W_2BIG;
    case EACCES:
      return W_ACCES;
    case EAGAIN:
      return W_AGAIN;
    case EBADF:
      return W_BADF;
    case EBUSY:
      return W_BUSY;
    case EEXIST:
      return W_EXIST;
    case EFAULT:
      return W_FAULT;
    case EFBIG:
      return W_FBIG;
    case EINTR:
      return W_INTR;
    case EINVAL:
      return W_INVAL;
    case EISDIR:
      return W_ISDIR;
    case ELOOP:
      return W_LOOP;
    case EMFILE:
      return W_MFILE;
    case EMLINK:
      return W_MLINK;
    case ENAMETOOLONG:
      return W_NAMETOOLONG;
    case ENFILE:
      return W_NFILE;
    case ENOENT:
      return W_NOENT;
    case ENOMEM:
      return W_NOMEM;
    case ENOSPC:
      return W_NOSPC;
    case EDQUOT:
      return W_NOSPC;
    case ENOSYS:
      return W_NOSYS;
    case ENOTDIR:
      return W_NOTDIR;
    case ENOTEMPTY:
      return W_NOTEMPTY;
    case EOPNOTSUPP:
      return W_NOTSUP;
    case ENOTTY:
      return W_NOTTY;
    case ENXIO:
      return W_NXIO;
    case EOVERFLOW:
      return W_OVERFLOW;
    case EPERM:
      return W_PERM;
    case EPIPE:
      return W_PIPE;
    case ERANGE:
      return W_RANGE;
    case EROFS:
      return W_ROFS;
    case ESPIPE:
      return W_SPIPE;
    case ETXTBSY:
      return W_TXTBSY;
    /* openat2 RESOLVE_BENEATH: the path leaves the directory it is resolved in. */
    case EXDEV:
      return W_NOTCAPABLE;
    default:
      return W_IO;
  }
}

/* ---- the module's memory: every access checked ---- */
static int InMem(W* w, uint64_t ptr, uint64_t len) {
  return w->memory && ptr <= w->memory->size && len <= w->memory->size - ptr;
}
static uint8_t* P(W* w, uint32_t ptr) { return w->memory->data + ptr; }
static void Put8(W* w, uint32_t p, uint8_t v) { P(w, p)[0] = v; }
static void Put16(W* w, uint32_t p, uint16_t v) { memcpy(P(w, p), &v, 2); }
static void Put32(W* w, uint32_t p, uint32_t v) { memcpy(P(w, p), &v, 4); }
static void Put64(W* w, uint32_t p, uint64_t v) { memcpy(P(w, p), &v, 8); }
static uint32_t Get32(W* w, uint32_t p) {
  uint32_t v;
  memcpy(&v, P(w, p), 4);
  return v;
}
static uint64_t Get64(W* w, uint32_t p) {
  uint64_t v;
  memcpy(&v, P(w, p), 8);
  return v;
}

/* ---- descriptors ---- */
static struct sbx_wasi_fd* Fd(W* w, uint32_t fd) {
  if (fd >= SBX_WASI_MAX_FDS || w->fds[fd].host_fd < 0) return NULL;
  return &w->fds[fd];
}
static int NewFd(W* w, int host_fd, int is_dir) {
  for (int i = 3; i < SBX_WASI_MAX_FDS; i++) {
    if (w->fds[i].host_fd < 0) {
      w->fds[i].host_fd = host_fd;
      w->fds[i].is_dir = is_dir;
      w->fds[i].preopen = NULL;
      w->fds[i].fdflags = 0;
      return i;
    }
  }
  return -1;
}

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

/* ---- paths: resolved beneath a directory the module holds, by the kernel ---- */
#define MAX_PATH 4096

/* Copies the module's path into buf (NUL-terminated); 0 or a WASI errno. */
static uint32_t Path(W* w, uint32_t ptr, uint32_t len, char* buf) {
  if (!InMem(w, ptr, len)) return W_FAULT;
  if (len >= MAX_PATH) return W_NAMETOOLONG;
  memcpy(buf, P(w, ptr), len);
  buf[len] = 0;
  if (memchr(buf, 0, len)) return W_INVAL; /* a NUL inside the path */
  return 0;
}

static int Openat2(int dirfd, const char* path, int flags, mode_t mode, uint64_t resolve) {
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = (uint64_t)flags;
  how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
  /* SECURITY (BK-2): the kernel refuses `..` past dirfd, absolute paths and any symlink whose
   * target lies outside it, and /proc-style magic links: the module cannot name a file outside
   * the directories it was given. */
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | resolve;
  return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

/* For the *at calls that have no RESOLVE flags (mkdirat, unlinkat, renameat, symlinkat,
 * readlinkat, fstatat without following): the parent directory is opened beneath dirfd, and the
 * last component must be a plain name. Returns the parent's fd (or -errno) and the name. */
static int Parent(int dirfd, char* path, const char** last) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') path[--n] = 0; /* "a/b/" names b */
  char* slash = strrchr(path, '/');
  const char* name = slash ? slash + 1 : path;
  if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return -EINVAL;
  *last = name;
  if (!slash) {
    int fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
    return fd < 0 ? -errno : fd;
  }
  if (slash == path) return -EXDEV; /* "/name": absolute */
  *slash = 0;
  int fd = Openat2(dirfd, path, O_PATH | O_DIRECTORY | O_CLOEXEC, 0, 0);
  return fd < 0 ? -errno : fd;
}

static uint8_t FileType(mode_t m) {
  if (S_ISDIR(m)) return FT_DIR;
  if (S_ISREG(m)) return FT_REG;
  if (S_ISLNK(m)) return FT_SYMLINK;
  if (S_ISCHR(m)) return FT_CHAR;
  if (S_ISBLK(m)) return FT_BLOCK;
  return FT_UNKNOWN;
}

static uint64_t Ns(struct timespec t) {
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void PutFilestat(W* w, uint32_t p, const struct stat* st) {
  memset(P(w, p), 0, 64);
  Put64(w, p + 0, st->st_dev);
  Put64(w, p + 8, st->st_ino);
  Put8(w, p + 16, FileType(st->st_mode));
  Put64(w, p + 24, st->st_nlink);
  Put64(w, p + 32, (uint64_t)st->st_size);
  Put64(w, p + 40, Ns(st->st_atim));
  Put64(w, p + 48, Ns(st->st_mtim));
  Put64(w, p + 56, Ns(st->st_ctim));
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

/* ---- descriptors: read, write, seek, stat, close ---- */
static uint32_t Iovecs(W* w, uint32_t iovs, uint32_t n, struct iovec* out) {
  if (n > 1024) return W_INVAL;
  if (!InMem(w, iovs, (uint64_t)n * 8)) return W_FAULT;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t buf = Get32(w, iovs + 8 * i), len = Get32(w, iovs + 8 * i + 4);
    if (!InMem(w, buf, len)) return W_FAULT;
    out[i].iov_base = P(w, buf);
    out[i].iov_len = len;
  }
  return 0;
}
uint32_t Z_wasi_snapshot_preview1Z_fd_write(W* w, uint32_t fd, uint32_t iovs, uint32_t n,
                                            uint32_t nwritten) {
  SBX_IMPORT_SCOPE;
  struct sbx_wasi_fd* f = Fd(w, fd);
  if (!f) return W_BADF;
  if (f->is_dir) return W_ISDIR;
  static struct iovec v[1024];
  uint32_t e = Iovecs(w, iovs, n, v);
  if (e) return e;
  if (!InMem(w, nwritten, 4)) return W_FAULT;
  ssize_t r = writev(f->host_fd, v, (int)n);
  if (r < 0) return Werr(errno);
  Put32(w, nwritten, (uint32_t)r);
  return 0;
}
uint32_t Z_wasi_snapshot_preview1Z_fd_read(W* w, uint32_t fd, uint32_t iovs, uint32_t n,
                                           uint32_t nread) {
  SBX_IMPORT_SCOPE;
  struct sbx_wasi_fd* f = Fd(w, fd);
  if (!f) return W_BADF;
  if (f->is_dir) return W_ISDIR;
  static struct iovec v[1024];
  uint32_t e = Iovecs(w, iovs, n, v);
  if (e) return e;
  if (!InMem(w, nread, 4)) return W_FAULT;
  ssize_t r = readv(f->host_fd, v, (int)n);
  if (r < 0) return Werr(errno);
  Put32(w, nread, (uint32_t)r);
  return 0;
}
uint32_t Z_wasi_snapshot_preview1Z_fd_pwrite(W* w, uint32_t fd, uint32_t iovs, uint32_t n,
                                             uint64_t off, uint32_t nwritten) {
  SBX_IMPORT_SCOPE;
  struct sbx_wasi_fd* f = Fd(w, fd);
  if (!f) return W_BADF;
  static struct iovec v[1024];
  uint32_t e = Iovecs(w, iovs, n, v);
  if (e) return e;
  if (!InMem(w, nwritten, 4)) return W_FAULT;
  ssize_t r = pwritev(f->host_fd, v, (int)n, (off_t)off);
  if (r < 0) return Werr(errno);
  Put32(w, nwritten, (uint32_t)r);
  return 0;
}
uint32_t Z_wasi_snapshot_preview1Z_fd_pread(W* w, uint32_t fd, uint32_t iovs, uint32_t n,
                                            uint64_t off, uint32_t nread) {
  SBX_IMPORT_SCOPE;
  struct sbx_wasi_fd* f = Fd(w, fd);
  if (!f) return W_BADF;
  static struct iovec v[1024];
  uint32_t e = Iovecs(w, iovs, n, v);
  if (e) return e;
  if (!InMem(w, nread, 4)) return W_FAULT;
  ssize_t r = preadv(f->host_fd, v, (int)n, (off_t)off);
  if (r < 0) return Werr(errno);
  Put32(w, nread, (uint32_t)r);
  return 0;
}
uint32_t Z_wasi_snapshot_preview1Z_fd_seek(W* w, uint32_t fd, uint64_t off, uint32_t whence,
                                           uint32_t newoff) {
  SBX_IMPORT_SCOPE;
  struct sbx_wasi_fd* f = Fd(w, fd);
  if (!f) return W_BADF;
  if (whence > 2) return W_INVAL;
  if (!InMem(w, newoff, 8)) return W_FAULT;
  static const int kWhence[3] = {SEEK_SET, SEEK_CUR, SEEK_END};
  off_t r = lseek(f->host_fd, (off_t)off, kWhence[whence]);
  if (r < 0) return Werr(errno);
  Put64(w, newoff, (uint64_t)r);
  return 0;
}
uint32_t Z_wasi_snapshot_preview1Z_fd_tell(W* w, uint32_t fd, uint32_t out) {
  SBX_IMPORT_SCOPE;
  return Z_wasi_snapshot_preview1Z_fd_seek(w, fd, 0, 1, out);
}
uint32_t Z_wasi_snapshot_preview1Z_fd_close(W* w, uint32_t fd) {
  SBX_IMPORT_SCOPE;
  struct sbx_wasi_fd* f = Fd(w, fd);
  if (!f) return W_BADF;
  if (fd < 3 || f->preopen) return W_NOTSUP; /* stdio and the preopen stay */
  close(f->host_fd);
  f->host_fd = -1;
  return 0;
}
uint32_t Z_wasi_snapshot_preview1Z_fd_sync(W* w, uint32_t fd) {
  SBX_IMPORT_SCOPE;
  struct sbx_wasi_fd* f = Fd(w, fd);
  if (!f) return W_BADF;
  return fsync(f->host_fd) == 0 ? 0 : Werr(errno);
}
uint32_t Z_wasi_snapshot_preview1Z_fd_datasync(W* w, uint32_t fd) {
  SBX_IMPORT_SCOPE;
  struct sbx_wasi_fd* f = Fd(w, fd);
  if (!f) return W_BADF;
  return fdatasync(f->host_fd) == 0 ? 0 : Werr(errno);
}
uint32_t Z_wasi_snapshot_preview1Z_fd_advise(W* w, uint32_t fd, uint64_t off, uint64_t len,
                                             uint32_t advice) {
  SBX_IMPORT_SCOPE;
  (void)off, (void)len, (void)advice;
  return Fd(w, fd) ? 0 : W_BADF;
}
uint32_t Z_wasi_snapshot_preview1Z_fd_allocate(W* w, uint32_t fd, uint64_t off, uint64_t len) {
  SBX_IMPORT_SCOPE;
  struct sbx_wasi_fd* f = Fd(w, fd);
  if (!f) return W_BADF;
  int e = posix_fallocate(f->host_fd, (off_t)off, (off_t)len);
  return e == 0 ? 0 : Werr(e);
}
uint32_t Z_wasi_snapshot_preview1Z_fd_fdstat_get(W* w, uint32_t fd, uint32_t out) {
  SBX_IMPORT_SCOPE;
  struct sbx_wasi_fd* f = Fd(w, fd);
  if (!f) return W_BADF;
  if (!InMem(w, out, 24)) return W_FAULT;
  struct stat st;
  if (fstat(f->host_fd, &st) != 0) return Werr(errno);
  memset(P(w, out), 0, 24);
  Put8(w, out, FileType(st.st_mode));
  Put16(w, out + 2, f->fdflags);
  Put64(w, out + 8, ALL_RIGHTS);
  Put64(w, out + 16, ALL_RIGHTS);
  return 0;
}
uint32_t Z_wasi_snapshot_preview1Z_fd_fdstat_set_flags(W* w, uint32_t fd, uint32_t flags) {
  SBX_IMPORT_SCOPE;
  struct sbx_wasi_fd* f = Fd(w, fd);
  if (!f) return W_BADF;
  int fl = fcntl(f->host_fd, F_GETFL);
  if (fl < 0) return Werr(errno);
  fl = (flags & FDF_APPEND) ? (fl | O_APPEND) : (fl & ~O_APPEND);
  fl = (flags & FDF_NONBLOCK) ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
  if (fcntl(f->host_fd, F_SETFL, fl) != 0) return Werr(errno);
  f->fdflags = (uint16_t)flags;
  return 0;
}
uint32_t Z_wasi_snapshot_preview1Z_fd_fdstat_set_rights(W* w, uint32_t fd, uint64_t base,
                                                        uint64_t inheriting) {
  SBX_IMPORT_SCOPE;
  (void)base, (void)inheriting;
  return Fd(w, fd) ? 0 : W_BADF;
}
uint32_t Z_wasi_snapshot_preview1Z_fd_filestat_get(W* w, uint32_t fd, uint32_t out) {
  SBX_IMPORT_SCOPE;
  struct sbx_wasi_fd* f = Fd(w, fd);
  if (!f) return W_BADF;
  if (!InMem(w, out, 64)) return W_FAULT;
  struct stat st;
  if (fstat(f->host_fd, &st) != 0) return Werr(errno);
  PutFilestat(w, out, &st);
  return 0;
}
uint32_t Z_wasi_snapshot_preview1Z_fd_filestat_set_size(W* w, uint32_t fd, uint64_t size) {
  SBX_IMPORT_SCOPE;
  struct sbx_wasi_fd* f = Fd(w, fd);
  if (!f) return W_BADF;
  return ftruncate(f->host_fd, (off_t)size) == 0 ? 0 : Werr(errno);
}
static void Times(uint64_t atim, uint64_t mtim, uint32_t flags, struct timespec ts[2]) {
  /* fstflags: 1 atim, 2 atim_now, 4 mtim, 8 mtim_now */
  ts[0].tv_sec = (time_t)(atim / 1000000000u);
  ts[0].tv_nsec = (flags & 2) ? UTIME_NOW : (flags & 1) ? (long)(atim % 1000000000u) : UTIME_OMIT;
  ts[1].tv_sec = (time_t)(mtim / 1000000000u);
  ts[1].tv_nsec = (flags & 8) ? UTIME_NOW : (flags & 4) ? (long)(mtim % 1000000000u) : UTIME_OMIT;
}
uint32_t Z_wasi_snapshot_preview1Z_fd_filestat_set_times(W* w, uint32_t fd, uint64_t atim,
                                                         uint64_t mtim, uint32_t flags) {
  SBX_IMPORT_SCOPE;
  struct sbx_wasi_fd* f = Fd(w, fd);
  if (!f) return W_BADF;
  struct timespec ts[2];
  Times(atim, mtim, flags, ts);
  return futimens(f->host_fd, ts) == 0 ? 0 : Werr(errno);
}
uint32_t Z_wasi_snapshot_preview1Z_fd_prestat_get(W* w, uint32_t fd, uint32_t out) {
  SBX_IMPORT_SCOPE;
  struct sbx_wasi_fd* f = Fd(w, fd);
  if (!f || !f->preopen) return W_BADF;
  if (!InMem(w, out, 8)) return W_FAULT;
  memset(P(w, out), 0, 8);
  Put8(w, out, 0); /* dir */
  Put32(w, out + 4, (uint32_t)strlen(f->preopen));
  return 0;
}
uint32_t Z_wasi_snapshot_preview1Z_fd_prestat_dir_name(W* w, uint32_t fd, uint32_t buf,
                                                       uint32_t len) {
  SBX_IMPORT_SCOPE;
  struct sbx_wasi_fd* f = Fd(w, fd);
  if (!f || !f->preopen) return W_BADF;
  size_t n = strlen(f->preopen);
  if (len < n) return W_NAMETOOLONG;
  if (!InMem(w, buf, n)) return W_FAULT;
  memcpy(P(w, buf), f->preopen, n);
  return 0;
}
uint32_t Z_wasi_snapshot_preview1Z_fd_renumber(W* w, uint32_t from, uint32_t to) {
  SBX_IMPORT_SCOPE;
  struct sbx_wasi_fd* a = Fd(w, from);
  struct sbx_wasi_fd* b = Fd(w, to);
  if (!a || !b) return W_BADF;
  if (from < 3 || to < 3 || a->preopen || b->preopen) return W_NOTSUP;
  close(b->host_fd);
  *b = *a;
  a->host_fd = -1;
  return 0;
}
uint32_t Z_wasi_snapshot_preview1Z_fd_readdir(W* w, uint32_t fd, uint32_t buf, uint32_t len,
                                              uint64_t cookie, uint32_t used) {
  SBX_IMPORT_SCOPE;
  struct sbx_wasi_fd* f = Fd(w, fd);
  if (!f) return W_BADF;
  if (!f->is_dir) return W_NOTDIR;
  if (!InMem(w, buf, len) || !InMem(w, used, 4)) return W_FAULT;
  /* A fresh stream per call, positioned by the cookie (the entry's index): simple and
   * stateless; directories in /work are small. */
  int d = openat(f->host_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d < 0) return Werr(errno);
  DIR* dir = fdopendir(d);
  if (!dir) {
    close(d);
    return Werr(errno);
  }
  uint32_t off = 0;
  uint64_t index = 0;
  struct dirent* e;
  while ((e = readdir(dir)) != NULL && off < len) {
    if (index++ < cookie) continue;
    size_t nlen = strlen(e->d_name);
    uint8_t head[24];
    memset(head, 0, sizeof head);
    uint64_t next = index;
    uint64_t ino = e->d_ino;
    uint32_t namlen = (uint32_t)nlen;
    uint8_t type = e->d_type == DT_DIR   ? FT_DIR
                   : e->d_type == DT_REG ? FT_REG
                   : e->d_type == DT_LNK ? FT_SYMLINK
                   : e->d_type == DT_CHR ? FT_CHAR
                   : e->d_type == DT_BLK ? FT_BLOCK
                                         : FT_UNKNOWN;
    memcpy(head, &next, 8);
    memcpy(head + 8, &ino, 8);
    memcpy(head + 16, &namlen, 4);
    head[20] = type;
    /* Truncated entries are allowed: the module sees buf full and asks again. */
    uint32_t take = len - off < 24 ? len - off : 24;
    memcpy(P(w, buf + off), head, take);
    off += take;
    take = len - off < namlen ? len - off : namlen;
    memcpy(P(w, buf + off), e->d_name, take);
    off += take;
  }
  closedir(dir);
  Put32(w, used, off);
  return 0;
}

/* ---- paths ---- */
uint32_t Z_wasi_snapshot_preview1Z_path_open(W* w, uint32_t dirfd, uint32_t lookup, uint32_t path,
                                             uint32_t path_len, uint32_t oflags, uint64_t rights,
                                             uint64_t inheriting, uint32_t fdflags, uint32_t out) {
  SBX_IMPORT_SCOPE;
  (void)rights, (void)inheriting;
  struct sbx_wasi_fd* d = Fd(w, dirfd);
  if (!d) return W_BADF;
  if (!d->is_dir) return W_NOTDIR;
  if (!InMem(w, out, 4)) return W_FAULT;
  char p[MAX_PATH];
  uint32_t e = Path(w, path, path_len, p);
  if (e) return e;
  int flags = O_CLOEXEC;
  if (oflags & OF_DIRECTORY) flags |= O_DIRECTORY;
  if (oflags & OF_CREAT) flags |= O_CREAT;
  if (oflags & OF_EXCL) flags |= O_EXCL;
  if (oflags & OF_TRUNC) flags |= O_TRUNC;
  if (fdflags & FDF_APPEND) flags |= O_APPEND;
  if (fdflags & FDF_NONBLOCK) flags |= O_NONBLOCK;
  if (fdflags & (FDF_SYNC | FDF_RSYNC)) flags |= O_SYNC;
  if (fdflags & FDF_DSYNC) flags |= O_DSYNC;
  if (!(lookup & LOOKUP_SYMLINK_FOLLOW)) flags |= O_NOFOLLOW;
  /* Read and write where the file allows it: a directory or a read-only file opens read-only. */
  int fd = -1;
  if (oflags & OF_DIRECTORY) {
    fd = Openat2(d->host_fd, p, flags | O_RDONLY, 0, 0);
  } else {
    fd = Openat2(d->host_fd, p, flags | O_RDWR, 0644, 0);
    if (fd < 0 && (errno == EISDIR || errno == EACCES || errno == EROFS || errno == ETXTBSY) &&
        !(oflags & (OF_CREAT | OF_TRUNC)))
      fd = Openat2(d->host_fd, p, flags | O_RDONLY, 0, 0);
  }
  if (fd < 0) return Werr(errno);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return Werr(err);
  }
  int slot = NewFd(w, fd, S_ISDIR(st.st_mode));
  if (slot < 0) {
    close(fd);
    return W_MFILE;
  }
  w->fds[slot].fdflags = (uint16_t)fdflags;
  Put32(w, out, (uint32_t)slot);
  return 0;
}

/* The parent of `p` beneath directory `dirfd` of the module: its fd (or a WASI errno as
 * negative) and the last component. */
static int ParentOf(W* w, uint32_t dirfd, char* p, const char** last, uint32_t* err) {
  struct sbx_wasi_fd* d = Fd(w, dirfd);
  if (!d) {
    *err = W_BADF;
    return -1;
  }
  if (!d->is_dir) {
    *err = W_NOTDIR;
    return -1;
  }
  int fd = Parent(d->host_fd, p, last);
  if (fd < 0) {
    *err = Werr(-fd);
    return -1;
  }
  return fd;
}

uint32_t Z_wasi_snapshot_preview1Z_path_filestat_get(W* w, uint32_t dirfd, uint32_t lookup,
                                                     uint32_t path, uint32_t len, uint32_t out) {
  SBX_IMPORT_SCOPE;
  char p[MAX_PATH];
  uint32_t e = Path(w, path, len, p);
  if (e) return e;
  if (!InMem(w, out, 64)) return W_FAULT;
  struct sbx_wasi_fd* d = Fd(w, dirfd);
  if (!d) return W_BADF;
  struct stat st;
  if (lookup & LOOKUP_SYMLINK_FOLLOW) {
    int fd = Openat2(d->host_fd, p, O_PATH | O_CLOEXEC, 0, 0);
    if (fd < 0) return Werr(errno);
    int r = fstat(fd, &st);
    int err = errno;
    close(fd);
    if (r != 0) return Werr(err);
  } else {
    int fd = Openat2(d->host_fd, p, O_PATH | O_NOFOLLOW | O_CLOEXEC, 0, 0);
    if (fd < 0) return Werr(errno);
    int r = fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
    int err = errno;
    close(fd);
    if (r != 0) return Werr(err);
  }
  PutFilestat(w, out, &st);
  return 0;
}
uint32_t Z_wasi_snapshot_preview1Z_path_filestat_set_times(W* w, uint32_t dirfd, uint32_t lookup,
                                                           uint32_t path, uint32_t len,
                                                           uint64_t atim, uint64_t mtim,
                                                           uint32_t flags) {
  SBX_IMPORT_SCOPE;
  char p[MAX_PATH];
  uint32_t e = Path(w, path, len, p);
  if (e) return e;
  struct sbx_wasi_fd* d = Fd(w, dirfd);
  if (!d) return W_BADF;
  int fd =
      Openat2(d->host_fd, p,
              O_RDONLY | O_CLOEXEC | ((lookup & LOOKUP_SYMLINK_FOLLOW) ? 0 : O_NOFOLLOW), 0, 0);
  if (fd < 0) return Werr(errno);
  struct timespec ts[2];
  Times(atim, mtim, flags, ts);
  int r = futimens(fd, ts);
  int err = errno;
  close(fd);
  return r == 0 ? 0 : Werr(err);
}
uint32_t Z_wasi_snapshot_preview1Z_path_create_directory(W* w, uint32_t dirfd, uint32_t path,
                                                         uint32_t len) {
  SBX_IMPORT_SCOPE;
  char p[MAX_PATH];
  uint32_t e = Path(w, path, len, p);
  if (e) return e;
  const char* last;
  int parent = ParentOf(w, dirfd, p, &last, &e);
  if (parent < 0) return e;
  int r = mkdirat(parent, last, 0755);
  int err = errno;
  close(parent);
  return r == 0 ? 0 : Werr(err);
}
uint32_t Z_wasi_snapshot_preview1Z_path_remove_directory(W* w, uint32_t dirfd, uint32_t path,
                                                         uint32_t len) {
  SBX_IMPORT_SCOPE;
  char p[MAX_PATH];
  uint32_t e = Path(w, path, len, p);
  if (e) return e;
  const char* last;
  int parent = ParentOf(w, dirfd, p, &last, &e);
  if (parent < 0) return e;
  int r = unlinkat(parent, last, AT_REMOVEDIR);
  int err = errno;
  close(parent);
  return r == 0 ? 0 : Werr(err);
}
uint32_t Z_wasi_snapshot_preview1Z_path_unlink_file(W* w, uint32_t dirfd, uint32_t path,
                                                    uint32_t len) {
  SBX_IMPORT_SCOPE;
  char p[MAX_PATH];
  uint32_t e = Path(w, path, len, p);
  if (e) return e;
  const char* last;
  int parent = ParentOf(w, dirfd, p, &last, &e);
  if (parent < 0) return e;
  int r = unlinkat(parent, last, 0);
  int err = errno;
  close(parent);
  return r == 0 ? 0 : Werr(err);
}
uint32_t Z_wasi_snapshot_preview1Z_path_rename(W* w, uint32_t fd, uint32_t old_path,
                                               uint32_t old_len, uint32_t new_fd, uint32_t new_path,
                                               uint32_t new_len) {
  SBX_IMPORT_SCOPE;
  char a[MAX_PATH], b[MAX_PATH];
  uint32_t e = Path(w, old_path, old_len, a);
  if (!e) e = Path(w, new_path, new_len, b);
  if (e) return e;
  const char *la, *lb;
  int pa = ParentOf(w, fd, a, &la, &e);
  if (pa < 0) return e;
  int pb = ParentOf(w, new_fd, b, &lb, &e);
  if (pb < 0) {
    close(pa);
    return e;
  }
  int r = renameat(pa, la, pb, lb);
  int err = errno;
  close(pa);
  close(pb);
  return r == 0 ? 0 : Werr(err);
}
uint32_t Z_wasi_snapshot_preview1Z_path_link(W* w, uint32_t fd, uint32_t lookup, uint32_t old_path,
                                             uint32_t old_len, uint32_t new_fd, uint32_t new_path,
                                             uint32_t new_len) {
  SBX_IMPORT_SCOPE;
  (void)lookup;
  char a[MAX_PATH], b[MAX_PATH];
  uint32_t e = Path(w, old_path, old_len, a);
  if (!e) e = Path(w, new_path, new_len, b);
  if (e) return e;
  const char *la, *lb;
  int pa = ParentOf(w, fd, a, &la, &e);
  if (pa < 0) return e;
  int pb = ParentOf(w, new_fd, b, &lb, &e);
  if (pb < 0) {
    close(pa);
    return e;
  }
  int r = linkat(pa, la, pb, lb, 0); /* never follows: a link to a symlink is a link to it */
  int err = errno;
  close(pa);
  close(pb);
  return r == 0 ? 0 : Werr(err);
}
uint32_t Z_wasi_snapshot_preview1Z_path_symlink(W* w, uint32_t old_path, uint32_t old_len,
                                                uint32_t dirfd, uint32_t new_path,
                                                uint32_t new_len) {
  SBX_IMPORT_SCOPE;
  char target[MAX_PATH], p[MAX_PATH];
  uint32_t e = Path(w, old_path, old_len, target);
  if (!e) e = Path(w, new_path, new_len, p);
  if (e) return e;
  /* A link may say anything (even "/etc/passwd"): what it names is resolved beneath the
   * directory when it is followed, and a target outside is refused then. */
  const char* last;
  int parent = ParentOf(w, dirfd, p, &last, &e);
  if (parent < 0) return e;
  int r = symlinkat(target, parent, last);
  int err = errno;
  close(parent);
  return r == 0 ? 0 : Werr(err);
}
uint32_t Z_wasi_snapshot_preview1Z_path_readlink(W* w, uint32_t dirfd, uint32_t path, uint32_t len,
                                                 uint32_t buf, uint32_t buf_len, uint32_t used) {
  SBX_IMPORT_SCOPE;
  char p[MAX_PATH];
  uint32_t e = Path(w, path, len, p);
  if (e) return e;
  if (!InMem(w, buf, buf_len) || !InMem(w, used, 4)) return W_FAULT;
  const char* last;
  int parent = ParentOf(w, dirfd, p, &last, &e);
  if (parent < 0) return e;
  char target[MAX_PATH];
  ssize_t n = readlinkat(parent, last, target, sizeof target);
  int err = errno;
  close(parent);
  if (n < 0) return Werr(err);
  uint32_t take = (uint32_t)n < buf_len ? (uint32_t)n : buf_len;
  memcpy(P(w, buf), target, take);
  Put32(w, used, take);
  return 0;
}

/* ---- sockets: none (BK-2: no ambient authority; egress is denied by construction) ---- */
uint32_t Z_wasi_snapshot_preview1Z_sock_accept(W* w, uint32_t fd, uint32_t flags, uint32_t out) {
  SBX_IMPORT_SCOPE;
  (void)w, (void)fd, (void)flags, (void)out;
  return W_NOTSUP;
}
uint32_t Z_wasi_snapshot_preview1Z_sock_recv(W* w, uint32_t fd, uint32_t iovs, uint32_t n,
                                             uint32_t flags, uint32_t nread, uint32_t oflags) {
  SBX_IMPORT_SCOPE;
  (void)w, (void)fd, (void)iovs, (void)n, (void)flags, (void)nread, (void)oflags;
  return W_NOTSUP;
}
uint32_t Z_wasi_snapshot_preview1Z_sock_send(W* w, uint32_t fd, uint32_t iovs, uint32_t n,
                                             uint32_t flags, uint32_t nwritten) {
  SBX_IMPORT_SCOPE;
  (void)w, (void)fd, (void)iovs, (void)n, (void)flags, (void)nwritten;
  return W_NOTSUP;
}
uint32_t Z_wasi_snapshot_preview1Z_sock_shutdown(W* w, uint32_t fd, uint32_t how) {
  SBX_IMPORT_SCOPE;
  (void)w, (void)fd, (void)how;
  return W_NOTSUP;
}
