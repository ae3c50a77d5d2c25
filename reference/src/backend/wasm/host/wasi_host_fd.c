/* The WASI descriptor imports: read, write, seek, stat, close, renumber, readdir; and the socket
 * imports, which refuse (BK-2). See wasi_host.c. */
#define _GNU_SOURCE
#include "backend/wasm/host/wasi_host_internal.h"

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
enum vec_op { VEC_READ, VEC_WRITE, VEC_PREAD, VEC_PWRITE };

/* The four vectored calls: the module's iovecs checked against its memory, the call made, the
 * count stored at `count_ptr`. read and write refuse a directory (pread and pwrite leave that
 * to the kernel). */
static uint32_t Vectored(W* w, uint32_t fd, uint32_t iovs, uint32_t n, uint64_t off,
                         uint32_t count_ptr, enum vec_op op) {
  struct sbx_wasi_fd* f = Fd(w, fd);
  if (!f) return W_BADF;
  if ((op == VEC_READ || op == VEC_WRITE) && f->is_dir) return W_ISDIR;
  static struct iovec v[1024];
  uint32_t e = Iovecs(w, iovs, n, v);
  if (e) return e;
  if (!InMem(w, count_ptr, 4)) return W_FAULT;
  ssize_t r = -1;
  switch (op) {
    case VEC_READ:
      r = readv(f->host_fd, v, (int)n);
      break;
    case VEC_WRITE:
      r = writev(f->host_fd, v, (int)n);
      break;
    case VEC_PREAD:
      r = preadv(f->host_fd, v, (int)n, (off_t)off);
      break;
    case VEC_PWRITE:
      r = pwritev(f->host_fd, v, (int)n, (off_t)off);
      break;
  }
  if (r < 0) return Werr(errno);
  Put32(w, count_ptr, (uint32_t)r);
  return 0;
}
uint32_t Z_wasi_snapshot_preview1Z_fd_write(W* w, uint32_t fd, uint32_t iovs, uint32_t n,
                                            uint32_t nwritten) {
  SBX_IMPORT_SCOPE;
  return Vectored(w, fd, iovs, n, 0, nwritten, VEC_WRITE);
}
uint32_t Z_wasi_snapshot_preview1Z_fd_read(W* w, uint32_t fd, uint32_t iovs, uint32_t n,
                                           uint32_t nread) {
  SBX_IMPORT_SCOPE;
  return Vectored(w, fd, iovs, n, 0, nread, VEC_READ);
}
uint32_t Z_wasi_snapshot_preview1Z_fd_pwrite(W* w, uint32_t fd, uint32_t iovs, uint32_t n,
                                             uint64_t off, uint32_t nwritten) {
  SBX_IMPORT_SCOPE;
  return Vectored(w, fd, iovs, n, off, nwritten, VEC_PWRITE);
}
uint32_t Z_wasi_snapshot_preview1Z_fd_pread(W* w, uint32_t fd, uint32_t iovs, uint32_t n,
                                            uint64_t off, uint32_t nread) {
  SBX_IMPORT_SCOPE;
  return Vectored(w, fd, iovs, n, off, nread, VEC_PREAD);
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
