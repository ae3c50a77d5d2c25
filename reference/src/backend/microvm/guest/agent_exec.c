// The guest agent (agent.h): EXEC. The request is parsed and checked (agent_exec_request.c),
// the command forked (only async-signal-safe work in the child), watched to its deadline, and
// reported.
#include "backend/microvm/guest/agent.h"

// ---- exec ----

struct out_stream {
  int fd;
  struct buf b;
  uint32_t limit;
  int truncated;
};

static void drain(struct out_stream* s) {
  char tmp[16384];
  for (;;) {
    ssize_t r = read(s->fd, tmp, sizeof tmp);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EAGAIN) return;
    if (r <= 0) {
      close(s->fd);
      s->fd = -1;
      return;
    }
    size_t room = s->b.len < s->limit ? s->limit - s->b.len : 0;
    size_t take = (size_t)r < room ? (size_t)r : room;
    buf_put(&s->b, tmp, take);
    if (take < (size_t)r) s->truncated = 1;
  }
}

// ---- the forked side of EXEC (only async-signal-safe work, plus fork in the reaper) ----
enum {
  S_CGROUP = 1,
  S_CWD = 2,
  S_EXEC = 3,
  S_PROC = 4,
  S_ROOT = 5,
  S_NOFILE = 6,
  S_IDS = 7,
  S_FORK = 8
};
struct child_ctx {
  const struct exec_req* r;
  const char* cg;
  char** envp;
  const char* path_env;
  int in, out, err;  // the command's stdio (pipe ends)
  int errfd;         // start errors: {stage, errno}, CLOEXEC
  int statfd;        // with a root: the reaper writes the command's wait status here
  int agent_fds[5];  // the agent's ends of those pipes: the reaper, which never execs, closes them
};

static void child_fail(const struct child_ctx* c, int stage) {
  int e[2] = {stage, errno};
  ssize_t w = write(c->errfd, e, sizeof e);
  (void)w;
  _exit(127);
}

static void join_cgroup(const struct child_ctx* c) {
  if (!c->cg[0]) return;
  char p[256];
  snprintf(p, sizeof p, "%s/cgroup.procs", c->cg);
  if (write_file(p, "0") < 0) child_fail(c, S_CGROUP);
}

static void command_stdio(const struct child_ctx* c) {
  dup2(c->in, 0);
  dup2(c->out, 1);
  dup2(c->err, 2);
}

// RLIMIT_NOFILE, then the identity: no supplementary groups, gid, uid; with uid != 0 the
// capability bounding set is emptied too (setuid already clears the permitted and effective
// sets), and no_new_privs is set so that nothing the command runs gains privileges.
static void drop_privileges(const struct child_ctx* c) {
  const struct exec_req* r = c->r;
  if (r->nofile) {
    struct rlimit rl = {.rlim_cur = r->nofile, .rlim_max = r->nofile};
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) child_fail(c, S_NOFILE);
  }
  // SECURITY: the bounding set first, while we still hold CAP_SETPCAP: after the uid change
  // no exec can bring a capability back (file capabilities are capped by the bounding set).
  if (r->uid != 0)
    for (int cap = 0; cap < 64; cap++)
      if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
        if (errno == EINVAL) break;  // past the last capability
        child_fail(c, S_IDS);
      }
  // SECURITY: groups, then gid, then uid (after setresuid we could no longer change the
  // others); all three ids of each, so no saved id lets the command switch back. Any failure
  // ends the child: a command never runs with more than it asked for.
  if (r->root || r->have_uid || r->have_gid) {
    if (setgroups(0, NULL) < 0 || setresgid(r->gid, r->gid, r->gid) < 0 ||
        setresuid(r->uid, r->uid, r->uid) < 0)
      child_fail(c, S_IDS);
  }
  // SECURITY: no_new_privs: no setuid binary or file capability in the root gains anything.
  if ((r->root || r->uid != 0) && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) child_fail(c, S_IDS);
}

static void exec_command(const struct child_ctx* c) {
  signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  if (!strchr(c->r->argv[0], '/')) setenv("PATH", c->path_env, 1);  // execvpe's search path
  execvpe(c->r->argv[0], c->r->argv, c->envp);
  child_fail(c, S_EXEC);
}

// PID 1 of the command's PID namespace, in its own mount namespace: mounts a fresh proc in the
// root, changes root, drops privileges (so it holds nothing the command could use), forks the
// command, reaps every orphan, and when the command exits reports its wait status and exits:
// the kernel then kills whatever is left in the namespace.
static void reaper(const struct child_ctx* c) {
  const struct exec_req* r = c->r;
  setsid();
  join_cgroup(c);
  if (g_port >= 0) close(g_port);
  for (int i = 0; i < 5; i++)
    if (c->agent_fds[i] >= 0) close(c->agent_fds[i]);
  mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);  // nothing we mount leaks out
  char proc[256];
  snprintf(proc, sizeof proc, "%s/proc", r->root);
  if (mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
    child_fail(c, S_PROC);
  // SECURITY: chroot, not pivot_root (the guest's root is an initramfs, which cannot be
  // pivoted away). A chroot holds only against a process without CAP_SYS_CHROOT: the sandbox
  // user (uid != 0) loses it in drop_privileges below. A command run as uid 0 keeps it and
  // could leave the chroot for the rest of the guest; the VM, not the chroot, is the boundary
  // then (docs/microvm.md).
  if (chroot(r->root) < 0 || chdir("/") < 0) child_fail(c, S_ROOT);
  drop_privileges(c);
  if (r->cwd && chdir(r->cwd) < 0) child_fail(c, S_CWD);
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, NULL);  // PID 1 of the namespace: only the agent's SIGKILL ends it
  pid_t cmd = fork();
  if (cmd < 0) child_fail(c, S_FORK);
  if (cmd == 0) {
    setsid();
    command_stdio(c);
    exec_command(c);
  }
  close(c->errfd);
  close(c->in);
  close(c->out);
  close(c->err);
  for (;;) {
    int st;
    pid_t w = waitpid(-1, &st, 0);
    if (w == cmd) {
      ssize_t n = write(c->statfd, &st, sizeof st);
      (void)n;
      _exit(0);
    }
    if (w < 0 && errno != EINTR) _exit(127);
  }
}

// One command from its fork to its end (do_exec's parts share it).
struct running {
  pid_t pid;
  int pidfd;         // -1 without pidfd_open (old kernel): the child is polled
  int infd;          // the command's stdin (our end), -1 once all is written or refused
  int statfd;        // with a root: the reaper's report of the command's wait status
  int start_err[2];  // {stage (S_*), errno}: why the command did not start, or {0, 0}
  struct out_stream so, se;
  uint64_t t0;  // CLOCK_MONOTONIC at the fork
  int exited, timed_out, killed, status;
  struct rusage ru;
};

// Forks the command (with a root: its namespace's reaper) and waits for its start: on return
// 0 it runs, or start_err says why it could not; -1 with errno when the fork itself failed.
static int start_command(const struct exec_req* r, const char* cg, struct running* run) {
  int outp[2] = {-1, -1}, errp[2] = {-1, -1}, inp[2] = {-1, -1}, errpipe[2] = {-1, -1},
      statp[2] = {-1, -1};
  if (pipe2(outp, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0 || pipe2(inp, O_CLOEXEC) < 0 ||
      pipe2(errpipe, O_CLOEXEC) < 0 || (r->root && pipe2(statp, O_CLOEXEC | O_NONBLOCK) < 0)) {
    int e = errno;
    // The pipes made before the one that failed (PID 1 must not leak under EMFILE).
    int* all[] = {outp, errp, inp, errpipe, statp};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
      for (int j = 0; j < 2; j++)
        if (all[i][j] >= 0) close(all[i][j]);
    errno = e;
    return -2;
  }
  static char* default_env[] = {"PATH=/bin:/sbin:/usr/bin:/usr/sbin", "HOME=/root", NULL};
  struct child_ctx c = {
      .r = r,
      .cg = cg,
      .envp = r->envc ? r->env : default_env,
      .path_env = "/bin:/sbin:/usr/bin:/usr/sbin",
      .in = inp[0],
      .out = outp[1],
      .err = errp[1],
      .errfd = errpipe[1],
      .statfd = statp[1],
      .agent_fds = {outp[0], errp[0], inp[1], errpipe[0], statp[0]},
  };
  for (int i = 0; i < r->envc; i++)
    if (strncmp(r->env[i], "PATH=", 5) == 0) c.path_env = r->env[i] + 5;
  run->t0 = now_ns(CLOCK_MONOTONIC);
  pid_t pid;
  if (r->root) {
    // A fork that is PID 1 of a new PID namespace, in a new mount namespace: the reaper.
    pid = (pid_t)syscall(SYS_clone, CLONE_NEWPID | CLONE_NEWNS | SIGCHLD, NULL, NULL, NULL, NULL);
    if (pid == 0) reaper(&c);
  } else {
    pid = fork();
    if (pid == 0) {
      // The command: its own session, in its cgroup, stdio on the pipes.
      setsid();
      join_cgroup(&c);
      command_stdio(&c);
      drop_privileges(&c);
      if (r->cwd && chdir(r->cwd) < 0) child_fail(&c, S_CWD);
      exec_command(&c);
    }
  }
  close(outp[1]);
  close(errp[1]);
  close(inp[0]);
  close(errpipe[1]);
  if (statp[1] >= 0) close(statp[1]);
  if (pid < 0) {
    int e = errno;
    close(outp[0]);
    close(errp[0]);
    close(inp[1]);
    close(errpipe[0]);
    if (statp[0] >= 0) close(statp[0]);
    errno = e;
    return -1;
  }
  run->pid = pid;
  run->start_err[0] = run->start_err[1] = 0;
  {
    ssize_t n;
    do n = read(errpipe[0], run->start_err, sizeof run->start_err);
    while (n < 0 && errno == EINTR);
    if (n != sizeof run->start_err) run->start_err[0] = run->start_err[1] = 0;
    close(errpipe[0]);
  }
  run->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  run->so = (struct out_stream){.fd = outp[0], .limit = r->out_limit};
  run->se = (struct out_stream){.fd = errp[0], .limit = r->out_limit};
  fcntl(run->so.fd, F_SETFL, O_NONBLOCK);
  fcntl(run->se.fd, F_SETFL, O_NONBLOCK);
  run->infd = inp[1];
  if (run->infd >= 0) fcntl(run->infd, F_SETFL, O_NONBLOCK);
  if (run->infd >= 0 && r->in_len == 0) {
    close(run->infd);
    run->infd = -1;
  }
  run->statfd = statp[0];
  return 0;
}

// Feeds stdin, collects stdout and stderr, and ends the command at its deadline (SIGTERM to
// its cgroup, then SIGKILL after the grace), until it has exited and both pipes are closed.
static void watch_command(const struct exec_req* r, const char* cg, struct running* run) {
  uint64_t deadline = r->timeout_ms ? run->t0 + (uint64_t)r->timeout_ms * 1000000ull : 0;
  uint64_t kill_at = 0;  // after the deadline: end of the SIGTERM grace
  uint32_t in_off = 0;
  struct out_stream* so = &run->so;
  struct out_stream* se = &run->se;
  while (!run->exited || so->fd >= 0 || se->fd >= 0) {
    struct pollfd pf[4];
    int n = 0, ip = -1, op = -1, ep = -1, pp = -1;
    if (so->fd >= 0) {
      op = n;
      pf[n++] = (struct pollfd){.fd = so->fd, .events = POLLIN};
    }
    if (se->fd >= 0) {
      ep = n;
      pf[n++] = (struct pollfd){.fd = se->fd, .events = POLLIN};
    }
    if (run->infd >= 0) {
      ip = n;
      pf[n++] = (struct pollfd){.fd = run->infd, .events = POLLOUT};
    }
    if (!run->exited && run->pidfd >= 0) {
      pp = n;
      pf[n++] = (struct pollfd){.fd = run->pidfd, .events = POLLIN};
    }
    int wait_ms = -1;
    if (!run->exited && run->pidfd < 0) wait_ms = 10;  // no pidfd (old kernel): poll the child
    uint64_t next = !run->exited && deadline && !run->timed_out      ? deadline
                    : !run->exited && run->timed_out && !run->killed ? kill_at
                                                                     : 0;
    if (next) {
      uint64_t now = now_ns(CLOCK_MONOTONIC);
      int left = now >= next ? 0 : (int)((next - now) / 1000000ull) + 1;
      if (wait_ms < 0 || left < wait_ms) wait_ms = left;
    }
    int rc = poll(pf, (nfds_t)n, wait_ms);
    if (rc < 0 && errno != EINTR) break;
    if (op >= 0 && pf[op].revents) drain(so);
    if (ep >= 0 && pf[ep].revents) drain(se);
    if (ip >= 0 && pf[ip].revents) {
      if (pf[ip].revents & (POLLERR | POLLHUP)) {
        close(run->infd);
        run->infd = -1;
      } else {
        ssize_t w = write(run->infd, r->in + in_off, r->in_len - in_off);
        if (w > 0) in_off += (uint32_t)w;
        if ((w < 0 && errno != EAGAIN && errno != EINTR) || in_off == r->in_len) {
          close(run->infd);
          run->infd = -1;
        }
      }
    }
    if (!run->exited && (run->pidfd < 0 || (pp >= 0 && pf[pp].revents))) {
      pid_t w = wait4(run->pid, &run->status, WNOHANG, &run->ru);
      if (w == run->pid) {
        run->exited = 1;
        // The command is over: whatever it left running in its cgroup goes with it, so that
        // the pipes reach end of file. (With a root the kernel has already killed the rest of
        // the PID namespace when its reaper exited.)
        kill_cgroup(cg, 0);
      }
    }
    if (!run->exited && deadline && !run->timed_out && now_ns(CLOCK_MONOTONIC) >= deadline) {
      run->timed_out = 1;
      if (r->term_grace_ms) {
        term_cgroup(cg, run->pid, r->root != NULL);
        kill_at = now_ns(CLOCK_MONOTONIC) + (uint64_t)r->term_grace_ms * 1000000ull;
      } else {
        kill_at = now_ns(CLOCK_MONOTONIC);
      }
    }
    if (!run->exited && run->timed_out && !run->killed && now_ns(CLOCK_MONOTONIC) >= kill_at) {
      run->killed = 1;
      kill(-run->pid, SIGKILL);
      kill(run->pid, SIGKILL);
      kill_cgroup(cg, 0);
    }
  }
  if (!run->exited) {  // poll failed: make sure
    kill(run->pid, SIGKILL);
    wait4(run->pid, &run->status, 0, &run->ru);
  }
  if (run->statfd >= 0) {
    // The reaper's report of the command's own wait status (absent when the reaper was killed,
    // at the deadline, or failed before the command started: then its own status stands).
    int st;
    if (read(run->statfd, &st, sizeof st) == (ssize_t)sizeof st) run->status = st;
    close(run->statfd);
    run->statfd = -1;
  }
  if (run->infd >= 0) close(run->infd);
  if (run->pidfd >= 0) close(run->pidfd);
  run->infd = run->pidfd = -1;
}

// CPU time, peak memory and OOM kills of the command: from its cgroup where it has one, else
// from wait4's rusage.
static void command_usage(const char* cg, const struct rusage* ru, uint64_t* cpu, uint64_t* peak,
                          uint64_t* ooms) {
  *cpu = (uint64_t)ru->ru_utime.tv_sec * 1000000ull + (uint64_t)ru->ru_utime.tv_usec +
         (uint64_t)ru->ru_stime.tv_sec * 1000000ull + (uint64_t)ru->ru_stime.tv_usec;
  *peak = (uint64_t)ru->ru_maxrss * 1024ull;
  *ooms = 0;
  if (!cg[0]) return;
  char path[256];
  if (g_cgroup_v2) {
    snprintf(path, sizeof path, "%s/cpu.stat", cg);
    uint64_t usage = keyed_value(path, "usage_usec");
    if (usage) *cpu = usage;
    snprintf(path, sizeof path, "%s/memory.peak", cg);
    uint64_t p = number_file(path);
    if (p) *peak = p;
    snprintf(path, sizeof path, "%s/memory.events", cg);
    *ooms = keyed_value(path, "oom_kill");
  } else {
    snprintf(path, sizeof path, "%s/memory.max_usage_in_bytes", cg);
    uint64_t p = number_file(path);
    if (p) *peak = p;
    snprintf(path, sizeof path, "%s/memory.oom_control", cg);
    *ooms = keyed_value(path, "oom_kill");
  }
}

// Why the command did not start, in words (start_err from the forked side).
static void start_error_text(const struct exec_req* r, const char* cg, const int start_err[2],
                             char* msg, size_t n) {
  const char* e = strerror(start_err[1]);
  switch (start_err[0]) {
    case S_CGROUP:
      snprintf(msg, n, "cannot join the command's cgroup %s: %s", cg, e);
      break;
    case S_CWD:
      snprintf(msg, n, "cannot change to %s: %s", r->cwd, e);
      break;
    case S_PROC:
      snprintf(msg, n, "cannot mount proc on %s/proc: %s", r->root, e);
      break;
    case S_ROOT:
      snprintf(msg, n, "cannot change root to %s: %s", r->root, e);
      break;
    case S_NOFILE:
      snprintf(msg, n, "cannot set RLIMIT_NOFILE to %u: %s", r->nofile, e);
      break;
    case S_IDS:
      snprintf(msg, n, "cannot switch to uid %u gid %u: %s", r->uid, r->gid, e);
      break;
    case S_FORK:
      snprintf(msg, n, "cannot fork the command in its namespace: %s", e);
      break;
    default:
      snprintf(msg, n, "cannot start %s: %s", r->argv[0], e);
      break;
  }
}

// EXEC: checks the request, makes the command's cgroup, runs the command to its end, and
// answers EXEC_RESULT (or ERROR when it could not be started at all).
void do_exec(uint32_t id, const struct fieldref* f, int nf) {
  struct exec_req r;
  char why[256];
  if (parse_exec_req(f, nf, &r, why, sizeof why) < 0) {
    send_error(id, "bad exec request: %s", why);
    free_exec_req(&r);
    return;
  }
  if (r.pids_limit && g_cgroup_v2 != 1) {
    send_error(id, "pids_limit needs cgroup v2 (this guest has %s)",
               g_cgroup_v2 == 0 ? "v1" : "none");
    free_exec_req(&r);
    return;
  }
  char cg[128];
  if (make_cgroup(&r, cg, sizeof cg) < 0) {
    send_error(id, "cannot make the command's cgroup %s: %s", cg, strerror(errno));
    kill_cgroup(cg, 1);
    free_exec_req(&r);
    return;
  }
  struct running run;
  memset(&run, 0, sizeof run);
  int started = start_command(&r, cg, &run);
  if (started < 0) {
    send_error(id, "%s: %s", started == -2 ? "pipe" : r.root ? "clone" : "fork", strerror(errno));
    kill_cgroup(cg, 1);
    free_exec_req(&r);
    return;
  }
  watch_command(&r, cg, &run);
  uint64_t wall = (now_ns(CLOCK_MONOTONIC) - run.t0) / 1000;
  uint64_t cpu, peak, ooms;
  command_usage(cg, &run.ru, &cpu, &peak, &ooms);
  if (cg[0]) kill_cgroup(cg, 1);
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }

  struct buf b = {0};
  if (run.start_err[0]) {
    char msg[300];
    start_error_text(&r, cg, run.start_err, msg, sizeof msg);
    field_str(&b, kStartError, msg);
  }
  if (WIFEXITED(run.status))
    field_u32(&b, kExitCode, (uint32_t)WEXITSTATUS(run.status));
  else if (WIFSIGNALED(run.status))
    field_u32(&b, kSignal, (uint32_t)WTERMSIG(run.status));
  field(&b, kStdout, run.so.b.p, run.so.b.len);
  field(&b, kStderr, run.se.b.p, run.se.b.len);
  field_u8(&b, kStdoutTruncated, (unsigned)run.so.truncated);
  field_u8(&b, kStderrTruncated, (unsigned)run.se.truncated);
  field_u64(&b, kCpuUsec, cpu);
  field_u64(&b, kPeakMemory, peak);
  field_u8(&b, kOom, ooms > 0);
  field_u8(&b, kTimedOut, (unsigned)run.timed_out);
  field_u64(&b, kWallUsec, wall);
  struct statvfs sv;
  if (r.root && g_has_root && statvfs(SCRATCH, &sv) == 0) {
    // The root's scratch space after the command (the host reports a full one as the disk
    // quota's breach).
    field_u64(&b, kDiskFree, (uint64_t)sv.f_bavail * sv.f_frsize);
    field_u64(&b, kDiskUsed, (uint64_t)(sv.f_blocks - sv.f_bfree) * sv.f_frsize);
  }
  if (b.failed)
    send_error(id, "out of memory building the result");
  else
    send_frame(kExecResult, id, &b);
  free(b.p);
  free(run.so.b.p);
  free(run.se.b.p);
  free_exec_req(&r);
}
