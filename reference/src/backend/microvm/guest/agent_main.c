// The guest agent (agent.h): PID 1 of the microVM guest. Boot, the request loop, SET_CLOCK.
#include "backend/microvm/guest/agent.h"

int g_port = -1;
int g_cgroup_v2;  // 1: cgroup2 at /sys/fs/cgroup; 0: v1 memory at .../memory; -1: none
unsigned g_exec_seq;
int g_has_root;    // /sandbox prepared at boot (read-only, tmpfs mounts, /dev)
int g_configured;  // CONFIGURE done

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
      send_error(
          id, "bad set_clock request: field %u (length %u) unknown, repeated or of the wrong size",
          f[i].tag, f[i].n);
      return;
    }
  }
  if (!have_ns) {
    send_error(id, "bad set_clock request: no realtime_ns");
    return;
  }
  if (seed && (seed_len < 16 || seed_len > 512)) {
    send_error(id, "bad set_clock request: seed of %u bytes (want 16..512)", seed_len);
    return;
  }
  if (ns > (uint64_t)INT64_MAX) {
    send_error(id, "bad set_clock request: realtime_ns out of range");
    return;
  }
  uint64_t before = now_ns(CLOCK_REALTIME);
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                        .tv_nsec = (long)(ns % 1000000000ull)};
  if (clock_settime(CLOCK_REALTIME, &ts) < 0) {
    send_error(id, "clock_settime: %s", strerror(errno));
    return;
  }
  int reseeded = 0;
  if (seed) {
    int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      send_error(id, "open /dev/urandom: %s", strerror(errno));
      return;
    }
    // The ioctl's argument: the header, then the bytes in its flexible array member.
    _Alignas(struct rand_pool_info) unsigned char raw[sizeof(struct rand_pool_info) + 512];
    struct rand_pool_info* in = (struct rand_pool_info*)raw;
    in->entropy_count = (int)seed_len * 8;
    in->buf_size = (int)seed_len;
    memcpy(in->buf, seed, seed_len);
    // Credit the host's bytes and force a reseed of the CRNG now: every clone restored from
    // the template starts with the same pool, and must not keep producing the same stream.
    if (ioctl(fd, RNDADDENTROPY, in) < 0 || ioctl(fd, RNDRESEEDCRNG) < 0) {
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

static void handle(unsigned type, uint32_t id, const unsigned char* p, uint32_t n) {
  static struct fieldref f[2 * kMaxArgs + 16];
  const char* why = NULL;
  int nf = split_fields(p, n, f, (int)(sizeof f / sizeof f[0]), &why);
  if (nf < 0) {
    send_error(id, "bad payload: %s", why);
    return;
  }
  switch (type) {
    case kPing:
      if (nf) {
        send_error(id, "ping takes no fields");
        return;
      }
      send_frame(kPong, id, NULL);
      break;
    case kExec:
      do_exec(id, f, nf);
      break;
    case kSetClock:
      do_set_clock(id, f, nf);
      break;
    case kConfigure:
      do_configure(id, f, nf);
      break;
    default:
      send_error(id, "unknown request type %u", type);
      break;
  }
}

// ---- the channel: frames in, resynchronising on the magic after garbage ----
static unsigned char* g_in;
static size_t g_in_len;

static void serve(void) {
  g_in = malloc(kMaxRequestPayload + kHeaderSize);
  if (!g_in) {
    klog("sbx-agent: out of memory");
    return;
  }
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
        if (ver != kVersion) {
          send_error(id, "protocol version %u, this agent speaks %d", ver, kVersion);
          goto skip1;
        }
        if (flags) {
          send_error(id, "flags 0x%x set; none are defined", flags);
          goto skip1;
        }
        if (len > kMaxRequestPayload) {
          send_error(id, "payload of %u bytes, over the %d limit", len, kMaxRequestPayload);
          goto skip1;
        }
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
    if (fd < 0) {
      klog("sbx-agent: %s: %s", path, strerror(errno));
      continue;
    }
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
