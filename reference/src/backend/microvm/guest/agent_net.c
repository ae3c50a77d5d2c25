// The guest agent (agent.h): CONFIGURE, by ioctls on an AF_INET socket (no netlink, no busybox).
#include "backend/microvm/guest/agent.h"

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
void loopback_up(void) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    klog("sbx-agent: socket: %s", strerror(errno));
    return;
  }
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

void do_configure(uint32_t id, const struct fieldref* f, int nf) {
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
    if (have[t]++) {
      send_error(id, "bad configure request: field %u given twice", t);
      return;
    }
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
        if (f[i].n != 8) {
          send_error(id, "bad configure request: disk_bytes: want one u64");
          return;
        }
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
  if (g_configured) {
    send_error(id, "configure: already configured");
    return;
  }
  g_configured = 1;
  if (have[kAddress]) {
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
      send_error(id, "configure: socket: %s", strerror(errno));
      return;
    }
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
    if (!ok) {
      send_error(id, "configure: eth0 %s: %s", step, strerror(e));
      return;
    }
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
