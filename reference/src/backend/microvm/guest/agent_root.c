// The guest agent (agent.h): the /sandbox tree (the tool image the host appends to the
// initramfs), made read-only at boot with tmpfs mounts where commands write.
#include "backend/microvm/guest/agent.h"

// A directory that is the root of a mount (its device differs from its parent's).
int is_mount_point(const char* path) {
  struct stat a, b;
  char parent[300];
  snprintf(parent, sizeof parent, "%s/..", path);
  return stat(path, &a) == 0 && S_ISDIR(a.st_mode) && stat(parent, &b) == 0 && a.st_dev != b.st_dev;
}

static int is_dir(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

// /sandbox (a second newc archive the host appends: the tool image's rootfs) as the commands'
// root: read-only, with tmpfs where commands write and a tiny /dev. A mount whose directory the
// image lacks is skipped (the root is read-only: nothing is created in it). 1 when done.
int prepare_root(void) {
  const char* R = SANDBOX_ROOT;
  if (!is_dir(R)) return 0;
  if (mount(R, R, NULL, MS_BIND | MS_REC, NULL) < 0 ||
      mount(NULL, R, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0) {
    klog("sbx-agent: making %s a read-only bind mount: %s", R, strerror(errno));
    umount2(R, MNT_DETACH);
    return 0;
  }
  // Where commands write: ONE tmpfs (outside the root), a directory of it bind-mounted on each
  // writable place, so the disk quota (CONFIGURE's size) holds for all of them together, as
  // the native backend's one scratch quota does.
  static const struct {
    const char* dir;
    const char* sub;
    mode_t mode;
    uid_t owner;
  } writable[] = {
      {"/work", "work", 0755, 1000},         {"/tmp", "tmp", 01777, 0},
      {"/var/tmp", "var-tmp", 01777, 0},     {"/run", "run", 0755, 0},
      {"/home/sandbox", "home", 0700, 1000},
  };
  if ((mkdir(SCRATCH, 0700) < 0 && errno != EEXIST) ||
      mount("tmpfs", SCRATCH, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") < 0) {
    klog("sbx-agent: tmpfs on %s: %s", SCRATCH, strerror(errno));
    return 0;
  }
  char path[128], src[128];
  for (size_t i = 0; i < sizeof writable / sizeof writable[0]; i++) {
    snprintf(path, sizeof path, "%s%s", R, writable[i].dir);
    if (!is_dir(path)) continue;
    snprintf(src, sizeof src, "%s/%s", SCRATCH, writable[i].sub);
    if (mkdir(src, 0700) < 0 || chown(src, writable[i].owner, writable[i].owner) < 0 ||
        chmod(src, writable[i].mode) < 0 || mount(src, path, NULL, MS_BIND, NULL) < 0 ||
        mount(NULL, path, NULL, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV, NULL) < 0) {
      klog("sbx-agent: scratch %s on %s: %s", src, path, strerror(errno));
      return 0;
    }
  }
  snprintf(path, sizeof path, "%s/dev", R);
  if (is_dir(path)) {
    if (mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=1m,nr_inodes=64") <
        0) {
      klog("sbx-agent: tmpfs on %s: %s", path, strerror(errno));
      return 0;
    }
    static const struct {
      const char* name;
      unsigned minor;
    } devs[] = {{"null", 3}, {"zero", 5}, {"full", 7}, {"random", 8}, {"urandom", 9}};
    static const struct {
      const char* name;
      const char* target;
    } links[] = {{"fd", "/proc/self/fd"},
                 {"stdin", "/proc/self/fd/0"},
                 {"stdout", "/proc/self/fd/1"},
                 {"stderr", "/proc/self/fd/2"}};
    char p[160];
    for (size_t i = 0; i < sizeof devs / sizeof devs[0]; i++) {
      snprintf(p, sizeof p, "%s/%s", path, devs[i].name);
      if (mknod(p, S_IFCHR | 0666, makedev(1, devs[i].minor)) < 0 || chmod(p, 0666) < 0) {
        klog("sbx-agent: mknod %s: %s", p, strerror(errno));
        return 0;
      }
    }
    snprintf(p, sizeof p, "%s/shm", path);
    if (mkdir(p, 01777) < 0 || chmod(p, 01777) < 0) {
      klog("sbx-agent: mkdir %s: %s", p, strerror(errno));
      return 0;
    }
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
      snprintf(p, sizeof p, "%s/%s", path, links[i].name);
      if (symlink(links[i].target, p) < 0) {
        klog("sbx-agent: symlink %s: %s", p, strerror(errno));
        return 0;
      }
    }
  }
  return 1;
}
