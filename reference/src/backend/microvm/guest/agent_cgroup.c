// The guest agent (agent.h): the guest's cgroup file system (mounted at boot) and one cgroup
// per command with its limits.
#include "backend/microvm/guest/agent.h"

// The command's cgroup: path in cg (v2: /sys/fs/cgroup/sbx-cmd-N; v1: .../memory/sbx-cmd-N).
int make_cgroup(const struct exec_req* r, char* cg, size_t n) {
  if (g_cgroup_v2 < 0) {
    cg[0] = 0;
    if (r->pids_limit) {
      errno = ENOTSUP;
      return -1;
    }
    return 0;
  }
  snprintf(cg, n, "%s/sbx-cmd-%u", g_cgroup_v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory",
           ++g_exec_seq);
  if (mkdir(cg, 0755) < 0 && errno != EEXIST) return -1;
  char path[256], val[32];
  if (r->mem_limit) snprintf(val, sizeof val, "%llu", (unsigned long long)r->mem_limit);
  if (g_cgroup_v2) {
    snprintf(path, sizeof path, "%s/memory.max", cg);
    if (write_file(path, r->mem_limit ? val : "max") < 0) return -1;
    snprintf(path, sizeof path, "%s/memory.swap.max", cg);
    write_file(path, "0");  // no swap in the guest anyway
    snprintf(path, sizeof path, "%s/memory.oom.group", cg);
    write_file(path, "1");
    if (r->pids_limit) {
      // With a root the namespace's reaper is one of the cgroup's processes: it does not count
      // against the command's allowance.
      snprintf(path, sizeof path, "%s/pids.max", cg);
      snprintf(val, sizeof val, "%llu", (unsigned long long)r->pids_limit + (r->root ? 1 : 0));
      if (write_file(path, val) < 0) return -1;
    }
  } else if (r->pids_limit) {
    errno = ENOTSUP;  // cgroup v1 fallback: memory controller only
    return -1;
  } else if (r->mem_limit) {
    snprintf(path, sizeof path, "%s/memory.limit_in_bytes", cg);
    if (write_file(path, val) < 0) return -1;
  }
  return 0;
}

// Kills every process of the cgroup and waits until it is empty; removes it.
void kill_cgroup(const char* cg, int remove) {
  char path[256];
  if (!cg[0]) return;
  if (g_cgroup_v2) {
    snprintf(path, sizeof path, "%s/cgroup.kill", cg);
    write_file(path, "1");
  }
  snprintf(path, sizeof path, "%s/cgroup.procs", cg);
  for (int round = 0; round < 2000; round++) {
    char text[8192];
    int n = read_file(path, text, sizeof text);
    if (n <= 0) break;
    for (char* s = text; *s;) {
      long pid = strtol(s, &s, 10);
      if (pid > 1) kill((pid_t)pid, SIGKILL);
      while (*s == '\n') s++;
    }
    // (No reaping here: the command's own status is collected by wait4 on its pid; a task
    // leaves cgroup.procs when it exits, zombie or not.)
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  if (remove) rmdir(cg);
}

// SIGTERM to every process of the command (at the deadline, when a grace is asked for). With a
// root the namespace's reaper (our child, pid) is skipped: it has nothing to stop.
void term_cgroup(const char* cg, pid_t pid, int skip_pid) {
  if (!cg[0]) {
    kill(-pid, SIGTERM);
    return;
  }
  char path[256], text[8192];
  snprintf(path, sizeof path, "%s/cgroup.procs", cg);
  if (read_file(path, text, sizeof text) <= 0) return;
  for (char* s = text; *s;) {
    long p = strtol(s, &s, 10);
    if (p > 1 && !(skip_pid && p == pid)) kill((pid_t)p, SIGTERM);
    while (*s == '\n') s++;
  }
}

void setup_cgroups(void) {
  mkdir("/sys/fs/cgroup", 0755);
  if (mount("cgroup2", "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) == 0) {
    if (write_file("/sys/fs/cgroup/cgroup.subtree_control", "+memory +pids") == 0 ||
        write_file("/sys/fs/cgroup/cgroup.subtree_control", "+memory") == 0) {
      g_cgroup_v2 = 1;
      return;
    }
    klog("sbx-agent: cgroup2 has no memory controller: %s", strerror(errno));
    umount("/sys/fs/cgroup");
  }
  if (mount("cgroup", "/sys/fs/cgroup", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=755") ==
          0 &&
      mkdir("/sys/fs/cgroup/memory", 0755) == 0 &&
      mount("memory", "/sys/fs/cgroup/memory", "cgroup", MS_NOSUID | MS_NODEV | MS_NOEXEC,
            "memory") == 0) {
    g_cgroup_v2 = 0;
    return;
  }
  klog("sbx-agent: no memory cgroup: commands run without a memory limit");
  g_cgroup_v2 = -1;
}
