/* The WASI path imports: every path resolved beneath a directory the module holds, by the
 * kernel (openat2 RESOLVE_BENEATH). See wasi_host.c. */
#define _GNU_SOURCE
#include "backend/wasm/host/wasi_host_internal.h"

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
/* A call on the last component of a path beneath dirfd, made in its parent (ParentOf):
 * mkdir, rmdir, unlink. */
static uint32_t AtParent(W* w, uint32_t dirfd, uint32_t path, uint32_t len,
                         int (*op)(int parent, const char* last)) {
  char p[MAX_PATH];
  uint32_t e = Path(w, path, len, p);
  if (e) return e;
  const char* last;
  int parent = ParentOf(w, dirfd, p, &last, &e);
  if (parent < 0) return e;
  int r = op(parent, last);
  int err = errno;
  close(parent);
  return r == 0 ? 0 : Werr(err);
}
static int MkdirIn(int parent, const char* last) { return mkdirat(parent, last, 0755); }
static int RmdirIn(int parent, const char* last) { return unlinkat(parent, last, AT_REMOVEDIR); }
static int UnlinkIn(int parent, const char* last) { return unlinkat(parent, last, 0); }
uint32_t Z_wasi_snapshot_preview1Z_path_create_directory(W* w, uint32_t dirfd, uint32_t path,
                                                         uint32_t len) {
  SBX_IMPORT_SCOPE;
  return AtParent(w, dirfd, path, len, MkdirIn);
}
uint32_t Z_wasi_snapshot_preview1Z_path_remove_directory(W* w, uint32_t dirfd, uint32_t path,
                                                         uint32_t len) {
  SBX_IMPORT_SCOPE;
  return AtParent(w, dirfd, path, len, RmdirIn);
}
uint32_t Z_wasi_snapshot_preview1Z_path_unlink_file(W* w, uint32_t dirfd, uint32_t path,
                                                    uint32_t len) {
  SBX_IMPORT_SCOPE;
  return AtParent(w, dirfd, path, len, UnlinkIn);
}
/* A call from the last component of one path to the last component of another, each made in
 * its own parent (ParentOf): rename, link. */
static uint32_t AtTwoParents(W* w, uint32_t fd, uint32_t old_path, uint32_t old_len,
                             uint32_t new_fd, uint32_t new_path, uint32_t new_len,
                             int (*op)(int pa, const char* la, int pb, const char* lb)) {
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
  int r = op(pa, la, pb, lb);
  int err = errno;
  close(pa);
  close(pb);
  return r == 0 ? 0 : Werr(err);
}
static int RenameIn(int pa, const char* la, int pb, const char* lb) {
  return renameat(pa, la, pb, lb);
}
static int LinkIn(int pa, const char* la, int pb, const char* lb) {
  return linkat(pa, la, pb, lb, 0); /* never follows: a link to a symlink is a link to it */
}
uint32_t Z_wasi_snapshot_preview1Z_path_rename(W* w, uint32_t fd, uint32_t old_path,
                                               uint32_t old_len, uint32_t new_fd, uint32_t new_path,
                                               uint32_t new_len) {
  SBX_IMPORT_SCOPE;
  return AtTwoParents(w, fd, old_path, old_len, new_fd, new_path, new_len, RenameIn);
}
uint32_t Z_wasi_snapshot_preview1Z_path_link(W* w, uint32_t fd, uint32_t lookup, uint32_t old_path,
                                             uint32_t old_len, uint32_t new_fd, uint32_t new_path,
                                             uint32_t new_len) {
  SBX_IMPORT_SCOPE;
  (void)lookup;
  return AtTwoParents(w, fd, old_path, old_len, new_fd, new_path, new_len, LinkIn);
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
