// The guest agent (agent.h): reply buffers, frames to the host, request fields.
#include "backend/microvm/guest/agent.h"

// ---- output buffer for a reply ----
static void buf_reserve(struct buf* b, size_t extra) {
  if (b->failed) return;
  if (b->len + extra <= b->cap) return;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra) cap *= 2;
  unsigned char* np = realloc(b->p, cap);
  if (!np) {
    b->failed = 1;
    return;
  }
  b->p = np;
  b->cap = cap;
}
void buf_put(struct buf* b, const void* d, size_t n) {
  buf_reserve(b, n);
  if (b->failed) return;
  if (n) memcpy(b->p + b->len, d, n);
  b->len += n;
}
static void put_le(unsigned char* p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}
uint64_t get_le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}
void field(struct buf* b, unsigned tag, const void* d, size_t n) {
  unsigned char h[6];
  put_le(h, tag, 2);
  put_le(h + 2, n, 4);
  buf_put(b, h, 6);
  buf_put(b, d, n);
}
void field_u64(struct buf* b, unsigned tag, uint64_t v) {
  unsigned char d[8];
  put_le(d, v, 8);
  field(b, tag, d, 8);
}
void field_u32(struct buf* b, unsigned tag, uint32_t v) {
  unsigned char d[4];
  put_le(d, v, 4);
  field(b, tag, d, 4);
}
void field_u8(struct buf* b, unsigned tag, unsigned v) {
  unsigned char d = (unsigned char)v;
  field(b, tag, &d, 1);
}
void field_str(struct buf* b, unsigned tag, const char* s) { field(b, tag, s, strlen(s)); }

void send_frame(unsigned type, uint32_t id, struct buf* payload) {
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

void send_error(uint32_t id, const char* fmt, ...) {
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
// Splits a payload into fields; returns the count or -1 with *why set.
int split_fields(const unsigned char* p, uint32_t n, struct fieldref* out, int max,
                 const char** why) {
  int k = 0;
  uint32_t off = 0;
  while (off < n) {
    if (n - off < 6) {
      *why = "truncated field header";
      return -1;
    }
    unsigned tag = (unsigned)get_le(p + off, 2);
    uint32_t len = (uint32_t)get_le(p + off + 2, 4);
    off += 6;
    if (len > n - off) {
      *why = "field longer than the payload";
      return -1;
    }
    if (k == max) {
      *why = "too many fields";
      return -1;
    }
    out[k].tag = tag;
    out[k].d = p + off;
    out[k].n = len;
    k++;
    off += len;
  }
  return k;
}

// A copy of a string field, NUL-terminated; NULL if it holds a NUL byte or memory runs out.
char* field_cstr(const struct fieldref* f) {
  if (memchr(f->d, 0, f->n)) return NULL;
  char* s = malloc((size_t)f->n + 1);
  if (!s) return NULL;
  memcpy(s, f->d, f->n);
  s[f->n] = 0;
  return s;
}
