/* What the WASI imports share (wasi_host.c, wasi_host_fd.c, wasi_host_path.c): WASI's numbers
 * (witx), the import scope, errno mapping, checked access to the module's memory, the
 * descriptor table, and paths resolved beneath a directory the module holds. Internal to the
 * host; every helper is static inline, so each file compiles only what it uses. */
#pragma once

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

#include "backend/wasm/host/wasi_host.h"

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
static inline uint32_t Werr(int e) {
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
static inline int InMem(W* w, uint64_t ptr, uint64_t len) {
  return w->memory && ptr <= w->memory->size && len <= w->memory->size - ptr;
}
static inline uint8_t* P(W* w, uint32_t ptr) { return w->memory->data + ptr; }
static inline void Put8(W* w, uint32_t p, uint8_t v) { P(w, p)[0] = v; }
static inline void Put16(W* w, uint32_t p, uint16_t v) { memcpy(P(w, p), &v, 2); }
static inline void Put32(W* w, uint32_t p, uint32_t v) { memcpy(P(w, p), &v, 4); }
static inline void Put64(W* w, uint32_t p, uint64_t v) { memcpy(P(w, p), &v, 8); }
static inline uint32_t Get32(W* w, uint32_t p) {
  uint32_t v;
  memcpy(&v, P(w, p), 4);
  return v;
}
static inline uint64_t Get64(W* w, uint32_t p) {
  uint64_t v;
  memcpy(&v, P(w, p), 8);
  return v;
}

/* ---- descriptors ---- */
static inline struct sbx_wasi_fd* Fd(W* w, uint32_t fd) {
  if (fd >= SBX_WASI_MAX_FDS || w->fds[fd].host_fd < 0) return NULL;
  return &w->fds[fd];
}
static inline int NewFd(W* w, int host_fd, int is_dir) {
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

/* ---- paths: resolved beneath a directory the module holds, by the kernel ---- */
#define MAX_PATH 4096

/* Copies the module's path into buf (NUL-terminated); 0 or a WASI errno. */
static inline uint32_t Path(W* w, uint32_t ptr, uint32_t len, char* buf) {
  if (!InMem(w, ptr, len)) return W_FAULT;
  if (len >= MAX_PATH) return W_NAMETOOLONG;
  memcpy(buf, P(w, ptr), len);
  buf[len] = 0;
  if (memchr(buf, 0, len)) return W_INVAL; /* a NUL inside the path */
  return 0;
}

static inline int Openat2(int dirfd, const char* path, int flags, mode_t mode, uint64_t resolve) {
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
static inline int Parent(int dirfd, char* path, const char** last) {
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

static inline uint8_t FileType(mode_t m) {
  if (S_ISDIR(m)) return FT_DIR;
  if (S_ISREG(m)) return FT_REG;
  if (S_ISLNK(m)) return FT_SYMLINK;
  if (S_ISCHR(m)) return FT_CHAR;
  if (S_ISBLK(m)) return FT_BLOCK;
  return FT_UNKNOWN;
}

static inline uint64_t Ns(struct timespec t) {
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static inline void PutFilestat(W* w, uint32_t p, const struct stat* st) {
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

static inline void Times(uint64_t atim, uint64_t mtim, uint32_t flags, struct timespec ts[2]) {
  /* fstflags: 1 atim, 2 atim_now, 4 mtim, 8 mtim_now */
  ts[0].tv_sec = (time_t)(atim / 1000000000u);
  ts[0].tv_nsec = (flags & 2) ? UTIME_NOW : (flags & 1) ? (long)(atim % 1000000000u) : UTIME_OMIT;
  ts[1].tv_sec = (time_t)(mtim / 1000000000u);
  ts[1].tv_nsec = (flags & 8) ? UTIME_NOW : (flags & 4) ? (long)(mtim % 1000000000u) : UTIME_OMIT;
}
