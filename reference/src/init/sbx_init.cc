// sbx-init: PID 1 of a native sandbox (BK-1). Runs on the sandbox's side of clone(): it builds
// the sandbox's file system in its private mount namespace (FS-1..FS-4), pivots into it, and then
// serves the supervisor as a zygote: it forks each command, which drops every privilege before
// exec. Being PID 1 it reaps every orphan (subreaper), and when it exits the kernel kills every
// process of the sandbox's PID namespace — so a dead supervisor (EOF on the control socket)
// ends the whole sandbox.
//
// Usage (by the supervisor only): sbx-init LOWER DISK_BYTES NETMODE HOSTNAME SBDIR [PROCS...]
//   LOWER     the image's unpacked rootfs (read-only lower layer)
//   DISK      scratch quota in bytes (tmpfs size: RES-3)
//   NETMODE   "new" (fresh netns with only lo: SNAP-5) or "joined" (the egress namespace)
//   SBDIR     host directory with empty "scratch" and "root" mount points
//   PROCS     files a command writes "0" to before exec, to join the sandbox's cgroup
//             (RES-1, RES-2, RES-4): v1 `tasks` (the child is single-threaded), v2 cgroup.procs
// Statically linked: nothing of the host's libraries is needed after pivot_root.
//
// Agent mode (by the oci and gvisor backends only): sbx-init --agent | --agent-stdin
//   PID 1 of a crun/runc container (--agent-stdin: of a gVisor container, whose control socket
//   is fd 0, the only way into the Sentry): the OCI runtime built the root, the namespaces and the
//   cgroup, and put this process under the container's seccomp filter (which every command
//   inherits); the control socket is fd 3 (--preserve-fds). It only serves commands: the same
//   protocol, the same ExecChild. It refuses to run without a seccomp filter in place. It holds
//   CAP_SETUID, CAP_SETGID and CAP_SETPCAP only (to drop them in each command), as uid 0: a tool
//   (uid 1000, no capabilities) can neither signal nor ptrace it.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/ipc.h>
#include <sys/mount.h>
#include <sys/msg.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "init/init_protocol.h"

namespace {

using namespace sbx::initproto;

int g_ctl = kControlFd;
std::vector<int> g_procs;           // cgroup.procs fds (close-on-exec)
std::vector<sock_filter> g_filter;  // the seccomp program
std::map<pid_t, uint32_t> g_execs;  // main pid → exec id

[[noreturn]] void Fail(const char* what) {
  char buf[512];
  int err = errno;
  int n = snprintf(buf, sizeof buf, "sbx-init: %s: %s", what, strerror(err));
  Header h{kReady, 0, err == 0 ? EIO : err, 0};
  struct iovec iov[2] = {{&h, sizeof h}, {buf, static_cast<size_t>(n > 0 ? n : 0)}};
  struct msghdr m {};
  m.msg_iov = iov;
  m.msg_iovlen = 2;
  sendmsg(g_ctl, &m, MSG_NOSIGNAL);
  _exit(127);
}

void Must(int rc, const char* what) {
  if (rc < 0) Fail(what);
}

std::string Join(const std::string& a, const char* b) { return a + "/" + b; }

void BindDevice(const std::string& root, const char* name) {
  std::string target = root + "/dev/" + name;
  int fd = open(target.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
  Must(fd, "create device mount point");
  close(fd);
  std::string src = std::string("/dev/") + name;
  Must(mount(src.c_str(), target.c_str(), nullptr, MS_BIND, nullptr), "bind device");
}

// Makes `path` (inside the new root) a read-only bind of itself. MS_REMOUNT|MS_BIND changes
// only this mount's flag, not the superblock.
void ReadOnly(const std::string& path, unsigned long extra) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return;  // absent in this image: nothing to protect
  Must(mount(path.c_str(), path.c_str(), nullptr, MS_BIND | MS_REC, nullptr), "bind ro dir");
  Must(mount(nullptr, path.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | extra, nullptr),
       "remount ro");
}

void Writable(const std::string& path) {
  Must(mount(path.c_str(), path.c_str(), nullptr, MS_BIND, nullptr), "bind rw dir");
  Must(mount(nullptr, path.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV, nullptr),
       "remount rw dir");
}

void BuildRoot(const char* lower, const char* disk, const std::string& sbdir) {
  // SECURITY: nothing we mount propagates back to the host's mount namespace.
  Must(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), "make / private");

  // Scratch: a tmpfs whose size is the disk quota (RES-3). It holds the overlay's upper layer, so
  // every byte a tool writes anywhere counts against the quota, and it vanishes with the
  // namespace (FS-4).
  std::string scratch = Join(sbdir, "scratch");
  std::string opts = std::string("size=") + disk + ",mode=0755";
  Must(mount("sbx-scratch", scratch.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()),
       "mount scratch tmpfs");
  Must(mkdir(Join(scratch, "upper").c_str(), 0755), "mkdir upper");
  Must(mkdir(Join(scratch, "work").c_str(), 0755), "mkdir work");

  // FS-1: the root is an overlay of the content-addressed image (read-only lower) and scratch.
  std::string root = Join(sbdir, "root");
  std::string ov = std::string("lowerdir=") + lower + ",upperdir=" + scratch +
                   "/upper,workdir=" + scratch + "/work";
  Must(mount("sbx-root", root.c_str(), "overlay", MS_NOSUID | MS_NODEV, ov.c_str()),
       "mount overlay root");

  // /proc of the sandbox's own PID namespace (FS-3: host processes are not in it).
  Must(mount("proc", Join(root, "proc").c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr),
       "mount proc");
  // A minimal /dev: a few harmless character devices, nothing else (no disks, no kmsg, no mem).
  Must(mount("sbx-dev", Join(root, "dev").c_str(), "tmpfs", MS_NOSUID | MS_NOEXEC,
             "size=64k,mode=0755"),
       "mount dev");
  for (const char* d : {"null", "zero", "full", "random", "urandom", "tty"}) BindDevice(root, d);
  Must(symlink("/proc/self/fd", Join(root, "dev/fd").c_str()), "dev/fd");
  Must(symlink("/proc/self/fd/0", Join(root, "dev/stdin").c_str()), "dev/stdin");
  Must(symlink("/proc/self/fd/1", Join(root, "dev/stdout").c_str()), "dev/stdout");
  Must(symlink("/proc/self/fd/2", Join(root, "dev/stderr").c_str()), "dev/stderr");
  Must(mount(nullptr, Join(root, "dev").c_str(), nullptr,
             MS_REMOUNT | MS_NOSUID | MS_NOEXEC | MS_RDONLY, "size=64k,mode=0755"),
       "remount dev ro");

  // FS-2: only the scratch directories are writable; /usr, /etc and the rest of / are not.
  for (const char* w : {"work", "tmp", "var/tmp", "home/sandbox"}) {
    struct stat st;
    if (stat(Join(root, w).c_str(), &st) == 0) Writable(Join(root, w));
  }
  for (const char* r : {"usr", "etc", "bin", "sbin", "lib", "lib64"}) {
    ReadOnly(Join(root, r), MS_NOSUID | MS_NODEV);
  }
  Must(mount(nullptr, root.c_str(), nullptr,
             MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr),
       "remount root ro");

  // SECURITY: pivot_root (not chroot) so the host's tree is detached, not merely hidden: after
  // the lazy unmount nothing of the old root is reachable from this namespace.
  Must(chdir(root.c_str()), "chdir new root");
  Must(static_cast<int>(syscall(SYS_pivot_root, ".", ".")), "pivot_root");
  Must(umount2(".", MNT_DETACH), "detach old root");
  Must(chdir("/"), "chdir /");
}

void LoopbackUp() {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  Must(s, "socket for lo");
  struct ifreq ifr {};
  strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  Must(ioctl(s, SIOCGIFFLAGS, &ifr), "get lo flags");
  ifr.ifr_flags |= IFF_UP;
  Must(ioctl(s, SIOCSIFFLAGS, &ifr), "set lo up");
  close(s);
}

void ReadFilter() {
  struct stat st;
  Must(fstat(kSeccompFd, &st), "stat seccomp memfd");
  if (st.st_size <= 0 || st.st_size % sizeof(sock_filter) != 0) {
    errno = EINVAL;
    Fail("seccomp program size");
  }
  g_filter.resize(static_cast<size_t>(st.st_size) / sizeof(sock_filter));
  if (pread(kSeccompFd, g_filter.data(), static_cast<size_t>(st.st_size), 0) != st.st_size) {
    Fail("read seccomp program");
  }
  close(kSeccompFd);
}

void Send(uint32_t type, uint32_t id, int32_t a, int32_t b) {
  Header h{type, id, a, b};
  send(g_ctl, &h, sizeof h, MSG_NOSIGNAL);
}

struct Dirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[1];  // NUL-terminated, d_reclen long
};

// Marks every descriptor above 2 close-on-exec. close_range(CLOSE_RANGE_CLOEXEC) where the
// kernel has it; gVisor 2022-12 does not (EINVAL): there, each fd listed in /proc/self/fd.
// Async-signal-safe (raw getdents64, no allocation).
int MarkCloexecAbove2() {
  if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return 0;
  int dfd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return -1;
  alignas(8) char buf[4096];
  for (;;) {
    long n = syscall(SYS_getdents64, dfd, buf, sizeof buf);
    if (n < 0) {
      close(dfd);
      return -1;
    }
    if (n == 0) break;
    for (long off = 0; off < n;) {
      const auto* d = reinterpret_cast<const Dirent64*>(buf + off);
      off += d->d_reclen;
      int fd = 0;
      bool digits = d->d_name[0] != '\0';
      for (const char* c = d->d_name; *c; ++c) {
        if (*c < '0' || *c > '9')
          digits = false;
        else
          fd = fd * 10 + (*c - '0');
      }
      if (digits && fd > 2 && fd != dfd && fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
        close(dfd);
        return -1;
      }
    }
  }
  close(dfd);
  return 0;
}

// The command's side of fork(): join the cgroup, drop everything, exec. Async-signal-safe only.
[[noreturn]] void ExecChild(const ExecParams& p, char** argv, char** envp, const int* fds, int nfds,
                            int errpipe) {
  // Join the sandbox's cgroups before anything can allocate or fork (RES-1, RES-2, RES-4).
  for (int fd : g_procs) {
    if (write(fd, "0", 1) != 1) goto fail;
  }
  setsid();
  for (int i = 0; i < 3; ++i) {
    if (dup2(fds[i], i) < 0) goto fail;
  }
  // SECURITY: no descriptor of init (the control socket, cgroup files) survives into the tool:
  // every fd above 2 is marked close-on-exec (the error pipe must live until exec).
  if (MarkCloexecAbove2() != 0) goto fail;
  // A pre-spawned entrypoint gets its script on fd 3 (see native_instance.cc).
  if (nfds == 4 && dup2(fds[3], 3) < 0) goto fail;
  {
    struct rlimit nofile = {static_cast<rlim_t>(p.nofile), static_cast<rlim_t>(p.nofile)};
    if (setrlimit(RLIMIT_NOFILE, &nofile) != 0) goto fail;  // RES-6
    struct rlimit core = {0, 0};
    setrlimit(RLIMIT_CORE, &core);
  }
  // SECURITY: empty the capability bounding set, then become the unprivileged sandbox user:
  // setresuid from 0 to non-zero clears the permitted and effective sets.
  for (int cap = 0; cap <= CAP_LAST_CAP; ++cap) prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
  if (setgroups(0, nullptr) != 0) goto fail;
  if (setresgid(p.gid, p.gid, p.gid) != 0) goto fail;
  if (setresuid(p.uid, p.uid, p.uid) != 0) goto fail;
  // RES-4 inside gVisor: the Sentry keeps its own per-user process count, which this bounds.
  // Set after setresuid: gVisor enforces a limit set before it on none of the forks that
  // follow (measured: a fork bomb passed `ulimit -u` 30 set as root, not 30 set as the user).
  if (p.nproc > 0) {
    struct rlimit nproc = {static_cast<rlim_t>(p.nproc), static_cast<rlim_t>(p.nproc)};
    if (setrlimit(RLIMIT_NPROC, &nproc) != 0) goto fail;
  }
  if (chdir("/work") != 0) goto fail;
  umask(022);
  {
    // SECURITY: no_new_privs + the seccomp deny-list (compiled once by the supervisor; in agent
    // mode the container's filter, inherited from init, is already in force).
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) goto fail;
    if (!g_filter.empty()) {
      struct sock_fprog prog = {static_cast<unsigned short>(g_filter.size()), g_filter.data()};
      if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) goto fail;
    }
  }
  {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
  }
  execvpe(argv[0], argv, envp);
fail:
  int err = errno;
  if (write(errpipe, &err, sizeof err) < 0) {
  }
  _exit(127);
}

void HandleExec(const Header& h, const char* payload, size_t len, const int* fds, int nfds) {
  if ((nfds != 3 && nfds != 4) || len < sizeof(ExecParams)) {
    for (int i = 0; i < nfds; ++i) close(fds[i]);
    Send(kStarted, h.id, -1, EINVAL);
    return;
  }
  ExecParams p;
  memcpy(&p, payload, sizeof p);
  std::vector<char> strings(payload + sizeof p, payload + len);
  strings.push_back('\0');
  std::vector<char*> argv, envp;
  size_t off = 0;
  for (int i = 0; i < h.a + h.b && off < strings.size() - 1; ++i) {
    char* s = strings.data() + off;
    (i < h.a ? argv : envp).push_back(s);
    off += strlen(s) + 1;
  }
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  if (argv.size() < 2) {
    for (int i = 0; i < nfds; ++i) close(fds[i]);
    Send(kStarted, h.id, -1, EINVAL);
    return;
  }
  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC) != 0) {
    Send(kStarted, h.id, -1, errno);
    return;
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(errpipe[0]);
    ExecChild(p, argv.data(), envp.data(), fds, nfds, errpipe[1]);
  }
  int fork_err = errno;
  close(errpipe[1]);
  for (int i = 0; i < nfds; ++i) close(fds[i]);
  // LC-8: the environment (it may hold secrets) is zeroed in init as soon as the child has it.
  explicit_bzero(strings.data(), strings.size());
  if (pid < 0) {
    close(errpipe[0]);
    Send(kStarted, h.id, -1, fork_err);
    return;
  }
  int exec_err = 0;
  ssize_t n = read(errpipe[0], &exec_err, sizeof exec_err);  // EOF = exec succeeded
  close(errpipe[0]);
  if (n != sizeof exec_err) exec_err = 0;
  g_execs[pid] = h.id;
  Send(kStarted, h.id, pid, exec_err);
}

void ReapAll() {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    auto it = g_execs.find(pid);
    if (it != g_execs.end()) {
      Send(kExited, it->second, status, 0);
      g_execs.erase(it);
    }
  }
}

// Removes everything below the directory fd (never following a symlink: unlinkat/openat with
// O_NOFOLLOW on names read from the directory itself).
int EmptyDir(int dfd) {
  DIR* d = fdopendir(dfd);
  if (!d) return errno;
  int err = 0;
  while (struct dirent* e = readdir(d)) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (unlinkat(dirfd(d), e->d_name, 0) == 0) continue;
    if (errno != EISDIR && errno != EPERM) {
      err = errno;
      continue;
    }
    int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) {
      err = errno;
      continue;
    }
    int e2 = EmptyDir(sub);  // closes sub
    if (e2) err = e2;
    if (unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR) != 0) err = errno;
  }
  closedir(d);
  return err;
}

// The System V objects of the sandbox's IPC namespace (shared memory, message queues,
// semaphore sets): kernel objects that no file, process or socket holds, so killing every
// process and emptying the scratch keeps them. Walked by index (the *_STAT_ANY commands:
// whatever their permissions), removed by id.
int RemoveSysvIpc() {
  int err = 0;
  struct shm_info shm_info;
  int max = shmctl(0, SHM_INFO, reinterpret_cast<struct shmid_ds*>(&shm_info));
  for (int i = 0; i <= max; ++i) {
    struct shmid_ds ds;
    int id = shmctl(i, SHM_STAT_ANY, &ds);
    if (id >= 0 && shmctl(id, IPC_RMID, nullptr) != 0) err = errno;
  }
  struct msginfo msg_info;
  max = msgctl(0, MSG_INFO, reinterpret_cast<struct msqid_ds*>(&msg_info));
  for (int i = 0; i <= max; ++i) {
    struct msqid_ds ds;
    int id = msgctl(i, MSG_STAT_ANY, &ds);
    if (id >= 0 && msgctl(id, IPC_RMID, nullptr) != 0) err = errno;
  }
  union {
    int val;
    struct semid_ds* buf;
    unsigned short* array;
    struct seminfo* info;
  } arg;
  struct seminfo sem_info;
  arg.info = &sem_info;
  max = semctl(0, 0, SEM_INFO, arg);
  for (int i = 0; i <= max; ++i) {
    struct semid_ds ds;
    arg.buf = &ds;
    int id = semctl(i, 0, SEM_STAT_ANY, arg);
    if (id >= 0 && semctl(id, 0, IPC_RMID) != 0) err = errno;
  }
  return err;
}

// The POSIX message queues of the sandbox's IPC namespace. Listing them takes an mqueue file
// system of this namespace: mounted for the moment over /tmp (just emptied; nothing runs during a
// reset), emptied, unmounted. A failure is the reset's failure: the pool discards the sandbox.
int RemovePosixQueues() {
  if (mount("mqueue", "/tmp", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    return errno;
  int err = 0;
  int fd = open("/tmp", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    err = errno;
  } else {
    err = EmptyDir(fd);
  }
  if (umount2("/tmp", MNT_DETACH) != 0 && !err) err = errno;
  return err;
}

// POOL-7: a pooled sandbox is reset before reuse: no process survives, the scratch is empty, and
// no IPC object of its namespace is left.
void HandleReset(const Header& h) {
  // Kill and reap until no child is left: every process of the namespace is our descendant or
  // an orphan reparented to us, and kill(-1) from PID 1 reaches all of them.
  for (;;) {
    kill(-1, SIGKILL);
    int status;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0 && errno == ECHILD) break;
    if (pid < 0 && errno != EINTR) break;
  }
  g_execs.clear();
  int err = 0;
  for (const char* dir : {"/work", "/tmp", "/var/tmp", "/home/sandbox"}) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    int e = EmptyDir(fd);
    if (e) err = e;
  }
  if (int e = RemoveSysvIpc()) err = e;
  if (int e = RemovePosixQueues()) err = e;
  Send(kResetDone, h.id, err, 0);
}

void HandleControl() {
  alignas(Header) static char buf[kMaxPacket];
  char cbuf[CMSG_SPACE(sizeof(int) * 4)];
  struct iovec iov = {buf, sizeof buf};
  struct msghdr m {};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = cbuf;
  m.msg_controllen = sizeof cbuf;
  ssize_t n = recvmsg(g_ctl, &m, MSG_CMSG_CLOEXEC);
  if (n <= 0) _exit(0);  // supervisor gone: PID 1 exits and the kernel ends the sandbox
  int fds[4];
  int nfds = 0;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      nfds = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      if (nfds > 4) nfds = 4;
      memcpy(fds, CMSG_DATA(c), sizeof(int) * static_cast<size_t>(nfds));
    }
  }
  if (static_cast<size_t>(n) < sizeof(Header) || (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
    for (int i = 0; i < nfds; ++i) close(fds[i]);
    return;
  }
  Header h;
  memcpy(&h, buf, sizeof h);
  switch (h.type) {
    case kExec:
      HandleExec(h, buf + sizeof h, static_cast<size_t>(n) - sizeof h, fds, nfds);
      // LC-8: the packet held the command's environment (secrets too): not left in memory
      // for a later command of the sandbox.
      explicit_bzero(buf, static_cast<size_t>(n));
      return;
    case kReset:
      HandleReset(h);
      break;
    case kSignalAll:
      // From PID 1, kill(-1) reaches every process of this PID namespace but init itself:
      // children that called setsid() or double-forked are included (RES-5, FAIL-4).
      kill(-1, h.a);
      break;
    default:
      break;
  }
  for (int i = 0; i < nfds; ++i) close(fds[i]);
}

int Serve();

}  // namespace

int main(int argc, char** argv) {
  // gVisor (runsc) passes no descriptor but stdio into its sandbox: there the socket is fd 0.
  const bool agent_stdin = argc == 2 && strcmp(argv[1], "--agent-stdin") == 0;
  const bool agent = agent_stdin || (argc == 2 && strcmp(argv[1], "--agent") == 0);
  if (agent_stdin) g_ctl = 0;
  if ((argc < 6 && !agent) || getpid() != 1) {
    fprintf(stderr, "sbx-init: internal program of the sandcheck runtime; not for direct use\n");
    return 2;
  }
  prctl(PR_SET_NAME, "sbx-init", 0, 0, 0);
  fcntl(g_ctl, F_SETFD, FD_CLOEXEC);
  if (agent) {
    // SECURITY: the commands inherit init's filter: without one, refuse to serve.
    if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) != 2) {
      errno = EPERM;
      Fail("agent mode needs the container's seccomp filter");
    }
    return Serve();
  }
  std::string sbdir = argv[5];
  for (int i = 6; i < argc; ++i) {
    int fd = open(argv[i], O_WRONLY | O_CLOEXEC);
    Must(fd, "open the cgroup's join file");
    g_procs.push_back(fd);
  }
  ReadFilter();
  std::string lower = argv[1], disk = argv[2], netmode = argv[3], hostname = argv[4];
  // SECURITY: /proc/1/cmdline is readable inside the sandbox; the host paths in our arguments
  // (state dir, image cache, cgroup paths) are nobody's business there. Overwrite them.
  char* arg_end = argv[argc - 1] + strlen(argv[argc - 1]);
  memset(argv[0], 0, static_cast<size_t>(arg_end - argv[0]));
  strcpy(argv[0], "sbx-init");
  BuildRoot(lower.c_str(), disk.c_str(), sbdir);
  if (netmode == "new") LoopbackUp();
  Must(sethostname(hostname.c_str(), hostname.size()), "sethostname");
  return Serve();
}

namespace {

// Reports ready, then serves the supervisor until it goes away.
int Serve() {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  Must(sfd, "signalfd");
  Send(kReady, 0, 0, 0);

  for (;;) {
    struct pollfd p[2] = {{g_ctl, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      _exit(1);
    }
    if (p[1].revents & POLLIN) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0) {
      }
      ReapAll();
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) HandleControl();
  }
}

}  // namespace
