#include "backend/common/command_watch.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace sbx::backend {
namespace {

using Clock = CommandWatch::Clock;

constexpr auto kDiskCheckEvery = std::chrono::milliseconds(50);

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

CommandWatch::CommandWatch(const ExecSpec& exec, host::Cgroup* cgroup, WatchHooks hooks,
                           CommandPipes pipes, ExecResult* r)
    : exec_(exec), cgroup_(cgroup), hooks_(std::move(hooks)), pipes_(std::move(pipes)), r_(r) {
  const auto now = Clock::now();
  deadline_ = now + Seconds(exec.timeout_s);
  last_disk_check_ = now;
  if (exec.stdin_data.empty()) {
    pipes_.in_w.Reset();
  } else {
    fcntl(pipes_.in_w.get(), F_SETFL, O_NONBLOCK);
  }
  (void)cgroup_->TakeOomEvent();  // a wake-up left from an earlier command is not this one's
}

void CommandWatch::ReadSome(host::UniqueFd& fd, std::string* tail, int64_t* total) {
  char buf[65536];
  ssize_t n = read(fd.get(), buf, sizeof buf);
  if (n > 0) {
    *total += n;
    tail->append(buf, static_cast<size_t>(n));
    if (tail->size() > kOutputTailBytes) tail->erase(0, tail->size() - kOutputTailBytes);
  } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    fd.Reset();
  }
}

void CommandWatch::CheckDisk() {
  if (disk_full_) return;
  int64_t free_bytes = hooks_.disk_free(nullptr);
  if (free_bytes >= 0 && free_bytes < kDiskFullBelow) {
    disk_full_ = true;  // RES-3, RES-8: the scratch quota is exhausted: end the sandbox.
    hooks_.end_sandbox();
  }
}

Status CommandWatch::Run(const std::function<std::vector<WatchSource>()>& sources,
                         const std::function<bool()>& finished) {
  const int oom_fd = cgroup_->OomEventFd();
  while (!finished()) {
    auto now = Clock::now();
    if (!timed_out_ && now >= deadline_) {
      // RES-5: SIGTERM to what the command started, SIGKILL after the grace period.
      timed_out_ = true;
      hooks_.terminate();
      grace_end_ = kill_at_ = Clock::now() + Seconds(exec_.grace_s);
    }
    if (now >= kill_at_) {
      auto again = hooks_.kill();
      kill_at_ = again ? Clock::now() + *again : Clock::time_point::max();
    }
    if (now - last_disk_check_ > kDiskCheckEvery) {
      last_disk_check_ = now;
      CheckDisk();
    }
    auto until = std::min(timed_out_ ? kill_at_ : deadline_, now + kDiskCheckEvery);
    int wait_ms = static_cast<int>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1));

    std::vector<WatchSource> extra = sources();
    std::vector<struct pollfd> p;
    p.reserve(4 + extra.size());
    auto add = [&](int fd, short events) {
      if (fd < 0) return -1;
      p.push_back({fd, events, 0});
      return static_cast<int>(p.size() - 1);
    };
    const int i_out = add(pipes_.out_r.get(), POLLIN);
    const int i_err = add(pipes_.err_r.get(), POLLIN);
    const int i_oom = oom_ ? -1 : add(oom_fd, POLLIN);
    const int i_in = add(pipes_.in_w.get(), POLLOUT);
    std::vector<int> i_extra;
    for (const WatchSource& s : extra) i_extra.push_back(add(s.fd, s.events));

    int rc = poll(p.data(), p.size(), wait_ms);
    if (rc < 0 && errno != EINTR) {
      Status failed = ErrnoStatus("poll");
      (void)hooks_.kill();  // nothing of a command we stopped watching keeps running
      return failed;
    }
    if (rc <= 0) continue;
    if (i_out >= 0 && (p[i_out].revents & (POLLIN | POLLHUP)))
      ReadSome(pipes_.out_r, &r_->stdout_tail, &r_->stdout_bytes);
    if (i_err >= 0 && (p[i_err].revents & (POLLIN | POLLHUP)))
      ReadSome(pipes_.err_r, &r_->stderr_tail, &r_->stderr_bytes);
    if (i_in >= 0 && (p[i_in].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t n = write(pipes_.in_w.get(), exec_.stdin_data.data() + stdin_off_,
                        exec_.stdin_data.size() - stdin_off_);
      if (n > 0) stdin_off_ += static_cast<size_t>(n);
      if (n < 0 || stdin_off_ >= exec_.stdin_data.size()) pipes_.in_w.Reset();
    }
    if (i_oom >= 0 && (p[i_oom].revents & POLLIN)) {
      (void)cgroup_->TakeOomEvent();
      // RES-2, RES-8, FAIL-3: the limit was breached. v1: the breaching task waits in the
      // kernel (the OOM killer is disabled for the cgroup) and nothing of the sandbox runs past
      // it; v2: the kernel killed the whole group. Either way the sandbox ends whole, now.
      if (hooks_.oom_breached()) {
        oom_ = true;
        hooks_.end_sandbox();
      }
    }
    for (size_t k = 0; k < extra.size(); ++k) {
      if (i_extra[k] < 0 || p[i_extra[k]].revents == 0) continue;
      Status handled = extra[k].on_ready(p[i_extra[k]].revents);
      if (!handled.ok()) return handled;
    }
  }
  return Status::Ok();
}

void CommandWatch::Drain() {
  auto drain_until = Clock::now() + std::chrono::milliseconds(20);
  for (auto* fd : {&pipes_.out_r, &pipes_.err_r}) {
    if (fd->valid()) fcntl(fd->get(), F_SETFL, O_NONBLOCK);
  }
  while ((pipes_.out_r.valid() || pipes_.err_r.valid()) && Clock::now() < drain_until) {
    struct pollfd p[2];
    nfds_t np = 0;
    if (pipes_.out_r.valid()) p[np++] = {pipes_.out_r.get(), POLLIN, 0};
    if (pipes_.err_r.valid()) p[np++] = {pipes_.err_r.get(), POLLIN, 0};
    if (poll(p, np, 5) <= 0) continue;
    if (pipes_.out_r.valid()) ReadSome(pipes_.out_r, &r_->stdout_tail, &r_->stdout_bytes);
    if (pipes_.err_r.valid()) ReadSome(pipes_.err_r, &r_->stderr_tail, &r_->stderr_bytes);
  }
}

void CommandWatch::CollectUsage(const host::CgroupUsage& before, int64_t* oom_kills_seen,
                                bool disk_readable) {
  host::CgroupUsage u = cgroup_->Usage();
  r_->usage.cpu_seconds = u.cpu_seconds - before.cpu_seconds;
  r_->usage.memory_peak_bytes = u.memory_peak_bytes;
  r_->usage.oom_kills = u.oom_kills - *oom_kills_seen;
  r_->usage.pids_peak = u.pids_peak;
  r_->usage.throttled_seconds = u.throttled_seconds - before.throttled_seconds;
  int64_t used = 0;
  int64_t free_bytes = disk_readable ? hooks_.disk_free(&used) : -1;
  r_->usage.disk_used_bytes = used;
  if (free_bytes >= 0 && free_bytes < kDiskFullBelow) disk_full_ = true;
  if (r_->usage.oom_kills > 0) oom_ = true;  // the OOM wake-up can lose the race with the exit
  // A process the command left behind waits in OOM (v1): the limit was breached all the same.
  if (cgroup_->UnderOom()) oom_ = true;
  *oom_kills_seen = u.oom_kills;
}

int64_t WorkDiskFree(pid_t init_pid, int64_t* used) {
  struct statfs st;
  std::string p = fmt::format("/proc/{}/root/work", init_pid);
  if (statfs(p.c_str(), &st) != 0) return -1;
  if (used) *used = static_cast<int64_t>((st.f_blocks - st.f_bfree) * st.f_bsize);
  return static_cast<int64_t>(st.f_bavail * st.f_bsize);
}

void SetExit(int wait_status, ExecResult* r) {
  if (WIFEXITED(wait_status)) {
    r->exit_code = WEXITSTATUS(wait_status);
  } else if (WIFSIGNALED(wait_status)) {
    r->signal = WTERMSIG(wait_status);
    r->exit_code = 128 + r->signal;
  }
}

void SetMemoryExceeded(int64_t limit_bytes, ExecResult* r) {
  r->status = ExecStatus::kResourceExceeded;
  r->reason = fmt::format("memory limit {} bytes exceeded: OOM kill (RES-2)", limit_bytes);
  r->error_code = "memory_limit";
}

void SetDiskExceeded(int64_t limit_bytes, ExecResult* r) {
  r->status = ExecStatus::kResourceExceeded;
  r->reason = fmt::format("disk quota {} bytes exhausted (RES-3)", limit_bytes);
  r->error_code = "disk_limit";
}

void SetExecFailed(const ExecSpec& exec, int err, ExecResult* r) {
  r->status = ExecStatus::kToolError;
  r->exit_code = 127;
  r->reason = fmt::format("cannot execute '{}': {}", exec.argv.empty() ? "/bin/sh" : exec.argv[0],
                          std::strerror(err));
  r->error_code = "exec_failed";
  r->stderr_tail = r->reason + "\n";
}

void SetTimedOut(const ExecSpec& exec, ExecResult* r) {
  r->status = ExecStatus::kTimeout;
  r->reason = fmt::format("timeout after {:.3g} s: SIGTERM, then SIGKILL after {:.3g} s (RES-5)",
                          exec.timeout_s, exec.grace_s);
  r->error_code = "timeout";
}

}  // namespace sbx::backend
