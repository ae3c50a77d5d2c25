// The guest agent (agent.h): the kernel log, clocks, whole writes and small files.
#include "backend/microvm/guest/agent.h"

void klog(const char* fmt, ...) {
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

uint64_t now_ns(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int write_all(int fd, const unsigned char* p, size_t n) {
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

int write_file(const char* path, const char* s) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t w = write(fd, s, strlen(s));
  int e = errno;
  close(fd);
  errno = e;
  return w == (ssize_t)strlen(s) ? 0 : -1;
}

int read_file(const char* path, char* out, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t r = read(fd, out, cap - 1);
  close(fd);
  if (r < 0) return -1;
  out[r] = 0;
  return (int)r;
}

// Value of "key N" in a flat-keyed cgroup file; 0 if absent.
uint64_t keyed_value(const char* path, const char* key) {
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
uint64_t number_file(const char* path) {
  char text[64];
  if (read_file(path, text, sizeof text) < 0) return 0;
  return strtoull(text, NULL, 10);
}
