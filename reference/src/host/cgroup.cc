// CgroupManager and Cgroup: placement below the runtime's own cgroup, creation, attach,
// kill-all and removal — the parts that are the same for v1 and v2. What differs lives in the
// drivers (cgroup_v1.cc, cgroup_v2.cc); discovery in cgroup_layout.cc. See docs/cgroups.md.
#include "host/cgroup.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <string>
#include <vector>

#include "host/cgroup_internal.h"

namespace sbx::host {

using cgroup_internal::CgroupDirs;
using cgroup_internal::CgroupDriver;
using cgroup_internal::CgroupLayout;

namespace cgroup_internal {

const std::string& CgroupDirs::For(std::string_view controller) const {
  static const std::string kNone;
  int i = layout->IndexOf(controller);
  return i < 0 || static_cast<size_t>(i) >= dirs.size() ? kNone : dirs[static_cast<size_t>(i)];
}

const CgroupDriver& CgroupDriver::For(CgroupVersion version) {
  return version == CgroupVersion::kV1 ? V1DriverInstance() : V2DriverInstance();
}

}  // namespace cgroup_internal

namespace {

constexpr double kRmdirTimeoutS = 0.5;
constexpr char kParentPrefix[] = "sandcheck-";

// pidfd syscalls through syscall(2): glibc 2.36 has wrappers, but older hosts do not.
int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }
int PidfdSendSignal(int pidfd, int sig) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

void RemoveDirs(const std::vector<std::string>& dirs) {
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) rmdir(it->c_str());
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Cgroup

struct Cgroup::Impl {
  std::string name;
  CgroupDirs dirs;
  const CgroupDriver* driver = nullptr;
  std::vector<int> procs_fds;  // cgroup.procs per hierarchy, O_WRONLY|O_CLOEXEC
  std::vector<int> join_fds;   // what a child writes "0" to: v1 `tasks`, v2 cgroup.procs
  std::vector<std::string> join_files;
  int dir_fd = -1;             // v2 only
  int oom_fd = -1;
  bool oom_tried = false;

  ~Impl() { CloseFds(); }

  void CloseFds() {
    for (int fd : procs_fds) close(fd);
    procs_fds.clear();
    for (int fd : join_fds) close(fd);
    join_fds.clear();
    if (dir_fd >= 0) close(dir_fd);
    if (oom_fd >= 0) close(oom_fd);
    dir_fd = oom_fd = -1;
  }

  std::vector<pid_t> Pids() const {
    std::vector<pid_t> all;
    for (const std::string& d : dirs.dirs) {
      std::vector<pid_t> p = cgroup_internal::ReadProcsRecursive(d);
      all.insert(all.end(), p.begin(), p.end());
    }
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    return all;
  }

  // Signals the processes of `pids` that are still in this cgroup.
  // SECURITY: a pid read from cgroup.procs may die and be reused by a process outside the
  // sandbox before we signal it. We take a pidfd first (it names one process for good), then
  // re-read the membership: a pidfd whose pid is still listed is that very process, because a
  // pid cannot name two live processes. Only those are signalled.
  void SignalPids(const std::vector<pid_t>& pids, int sig) const {
    std::vector<std::pair<pid_t, int>> targets;
    for (pid_t pid : pids) {
      int fd = PidfdOpen(pid);
      if (fd >= 0) {
        targets.emplace_back(pid, fd);
      } else if (errno == ENOSYS) {  // kernel < 5.3: best effort, the window is tiny
        for (auto& t : targets) close(t.second);
        for (pid_t p : pids) kill(p, sig);
        return;
      }
    }
    std::vector<pid_t> now = Pids();
    for (auto& [pid, fd] : targets) {
      if (std::binary_search(now.begin(), now.end(), pid)) (void)PidfdSendSignal(fd, sig);
      close(fd);
    }
  }

  Status KillAll(double timeout_s) {
    const double deadline = cgroup_internal::MonotonicSeconds() + timeout_s;
    auto remaining = [&] { return std::max(0.0, deadline - cgroup_internal::MonotonicSeconds()); };
    auto empty = [&] { return Pids().empty(); };
    // v2 with cgroup.kill: one write kills the subtree atomically, forks included.
    if (driver->KillAtOnce(dirs).ok() && cgroup_internal::WaitUntil(empty, timeout_s)) {
      return Status::Ok();
    }
    const bool can_freeze = driver->CanFreeze(dirs);
    // Fast path: a sandbox that is not forking right now dies from one round of SIGKILL, and
    // that costs one scheduling delay instead of three (freeze, thaw, exit): destroy p50
    // 1.3-2.8 ms instead of 3.6-3.9 ms under load here (docs/cgroups.md). Emptiness is
    // checked, so nothing is assumed; anything left goes through the freezer loop below.
    SignalPids(Pids(), SIGKILL);
    if (cgroup_internal::WaitUntil(empty, std::min(0.005, remaining()))) return Status::Ok();
    while (true) {
      if (empty()) return Status::Ok();
      // SECURITY: freeze first so that nothing can fork (or double-fork and setsid) between
      // our reading cgroup.procs and the SIGKILLs; frozen tasks die as soon as they thaw, and a
      // pending SIGKILL makes any fork in flight fail. Membership in the cgroup, not the
      // process tree, decides: session leaders and re-parented grandchildren die too.
      if (can_freeze) (void)driver->SetFrozen(dirs, true, std::min(0.25, remaining()));
      SignalPids(Pids(), SIGKILL);
      if (can_freeze) (void)driver->SetFrozen(dirs, false, std::min(0.25, remaining()));
      if (cgroup_internal::WaitUntil(empty, std::min(0.05, remaining()))) return Status::Ok();
      if (remaining() <= 0) break;
    }
    std::vector<pid_t> left = Pids();
    if (left.empty()) return Status::Ok();
    return Internal(fmt::format("kill-all: {} processes (first pid {}) still in {} after {} s",
                                left.size(), left.front(), dirs.dirs.at(0), timeout_s));
  }

  // Kills what is left and removes every directory (deepest first). Returns the first error.
  Status Destroy(double timeout_s) {
    Status kill = Pids().empty() ? Status::Ok() : KillAll(timeout_s);
    CloseFds();
    Status rm = Status::Ok();
    for (const std::string& d : dirs.dirs) {
      Status s = cgroup_internal::RemoveTree(d, kRmdirTimeoutS);
      if (rm.ok()) rm = s;
    }
    return kill.ok() ? rm : kill;
  }
};

Cgroup::Cgroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Cgroup::~Cgroup() {
  if (impl_) (void)impl_->Destroy(2.0);
}

Status Cgroup::SetCpuMillicores(int64_t millicores) {
  ASSIGN_OR_RETURN(cgroup_internal::CpuQuota q, cgroup_internal::CpuQuotaFor(millicores));
  return impl_->driver->SetCpu(impl_->dirs, q).WithContext("setting cpu limit (RES-1)");
}

Status Cgroup::SetMemoryBytes(int64_t bytes) {
  if (bytes < 0) return InvalidArgument(fmt::format("memory limit {} < 0", bytes));
  return impl_->driver->SetMemory(impl_->dirs, bytes).WithContext("setting memory limit (RES-2)");
}

Status Cgroup::SetPidsMax(int64_t pids) {
  if (pids < 0) return InvalidArgument(fmt::format("pids limit {} < 0", pids));
  return impl_->driver->SetPids(impl_->dirs, pids).WithContext("setting pids limit (RES-4)");
}

Status Cgroup::Attach(pid_t pid) {
  if (pid <= 0) return InvalidArgument(fmt::format("attach: bad pid {}", pid));
  const std::string value = std::to_string(pid);
  for (size_t i = 0; i < impl_->procs_fds.size(); ++i) {
    ssize_t n = -1;
    // EAGAIN: the kernel asks to retry while the process is in the middle of exec/fork.
    for (int attempt = 0; attempt < 100; ++attempt) {
      n = write(impl_->procs_fds[i], value.data(), value.size());
      if (n >= 0 || (errno != EINTR && errno != EAGAIN)) break;
    }
    if (n < 0) {
      return ErrnoStatus(fmt::format("attach pid {} to {}/cgroup.procs", pid, impl_->dirs.dirs[i]));
    }
  }
  return Status::Ok();
}

std::vector<int> Cgroup::ProcsFds() const { return impl_->join_fds; }
std::vector<std::string> Cgroup::JoinFiles() const { return impl_->join_files; }

int Cgroup::JoinFromChild(const int* fds, size_t count) noexcept {
  for (size_t i = 0; i < count; ++i) {
    ssize_t n = -1;
    for (int attempt = 0; attempt < 100; ++attempt) {
      n = write(fds[i], "0", 1);
      if (n >= 0 || (errno != EINTR && errno != EAGAIN)) break;
    }
    if (n < 0) return -errno;
  }
  return 0;
}

int Cgroup::DirFd() const { return impl_->dir_fd; }

int Cgroup::OomEventFd() {
  if (impl_->oom_fd < 0 && !impl_->oom_tried) {
    impl_->oom_tried = true;
    StatusOr<int> fd = impl_->driver->OpenOomEventFd(impl_->dirs);
    if (fd.ok()) impl_->oom_fd = *fd;
  }
  return impl_->oom_fd;
}

int64_t Cgroup::OomKills() const { return impl_->driver->OomKills(impl_->dirs); }

bool Cgroup::UnderOom() const { return impl_->driver->UnderOom(impl_->dirs); }

bool Cgroup::TakeOomEvent() {
  if (impl_->oom_fd < 0) return false;
  // An eventfd (v1) reads 8 bytes; an inotify fd (v2) needs room for a whole event.
  alignas(8) char buf[512];
  return read(impl_->oom_fd, buf, sizeof buf) > 0;
}

CgroupUsage Cgroup::Usage() const { return impl_->driver->Usage(impl_->dirs); }

int64_t Cgroup::PidsMaxRefusals() const {
  for (const std::string& dir : impl_->dirs.dirs) {
    StatusOr<std::string> text = cgroup_internal::ReadFile(dir + "/pids.events");
    if (!text.ok()) continue;
    auto pos = text->find("max ");
    if (pos != std::string::npos) return std::atoll(text->c_str() + pos + 4);
  }
  return 0;
}

std::vector<pid_t> Cgroup::Pids() const { return impl_->Pids(); }

bool Cgroup::Empty() const { return impl_->Pids().empty(); }

Status Cgroup::Freeze() {
  if (!impl_->driver->CanFreeze(impl_->dirs)) return Unsupported("no freezer for this cgroup");
  Status s = impl_->driver->SetFrozen(impl_->dirs, true, 1.0);
  if (!s.ok()) (void)impl_->driver->SetFrozen(impl_->dirs, false, 1.0);  // not half-frozen
  return s;
}

Status Cgroup::Thaw() {
  if (!impl_->driver->CanFreeze(impl_->dirs)) return Unsupported("no freezer for this cgroup");
  return impl_->driver->SetFrozen(impl_->dirs, false, 1.0);
}

Status Cgroup::KillAll(double timeout_s) { return impl_->KillAll(timeout_s); }

Status Cgroup::SignalAll(int sig) {
  impl_->SignalPids(impl_->Pids(), sig);
  return Status::Ok();
}

Status Cgroup::ResetPeak() { return impl_->driver->ResetPeak(impl_->dirs); }

const std::string& Cgroup::name() const { return impl_->name; }

std::vector<std::string> Cgroup::Paths() const { return impl_->dirs.dirs; }

// ---------------------------------------------------------------------------------------------
// CgroupManager

struct CgroupManager::Impl {
  std::string runtime_id;
  CgroupOptions options;
  const CgroupDriver* driver = nullptr;
  CgroupDirs parent;  // "<own>/sandcheck-<runtime_id>" per hierarchy
};

CgroupManager::CgroupManager(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CgroupManager::~CgroupManager() {
  // Only if empty: a sandbox whose Cgroup is still alive keeps the parent (and is not ours to
  // kill here). rmdir refuses a cgroup with children, so this never removes one.
  for (const std::string& d : impl_->parent.dirs) rmdir(d.c_str());
}

StatusOr<std::unique_ptr<CgroupManager>> CgroupManager::Open(const std::string& runtime_id) {
  return Open(runtime_id, CgroupOptions{});
}

StatusOr<std::unique_ptr<CgroupManager>> CgroupManager::Open(const std::string& runtime_id,
                                                             const CgroupOptions& options) {
  RETURN_IF_ERROR(cgroup_internal::ValidateName(runtime_id, "runtime id"));
  ASSIGN_OR_RETURN(std::string self, cgroup_internal::ReadFile("/proc/self/cgroup"));
  ASSIGN_OR_RETURN(std::string mountinfo, cgroup_internal::ReadFile("/proc/self/mountinfo"));
  ASSIGN_OR_RETURN(CgroupLayout layout, cgroup_internal::ResolveLayout(self, mountinfo, options));
  if (!options.adopt_own_dirs.empty()) {
    RETURN_IF_ERROR(cgroup_internal::AdoptOwnDirs(options.adopt_own_dirs, &layout));
  }

  auto impl = std::make_unique<Impl>();
  impl->runtime_id = runtime_id;
  impl->options = options;
  impl->driver = &CgroupDriver::For(layout.version);
  impl->parent.layout = std::make_shared<const CgroupLayout>(std::move(layout));

  // SECURITY: placement. Everything we make lies below our own cgroup in each hierarchy,
  // inside a parent named after this runtime; we never write into a cgroup we did not create
  // (and so never at a hierarchy's root), and the sandbox limits nest under whatever limits
  // our own cgroup already has.
  std::vector<std::string> created;
  for (const cgroup_internal::Hierarchy& h : impl->parent.layout->hierarchies) {
    std::string dir = fmt::format("{}/{}{}", h.own_dir, kParentPrefix, runtime_id);
    if (mkdir(dir.c_str(), 0755) == 0) {
      created.push_back(dir);
    } else if (errno != EEXIST) {  // EEXIST: a crashed runtime with our id; adopt it
      Status s = ErrnoStatus(fmt::format("creating the runtime's cgroup {}", dir));
      RemoveDirs(created);
      return s;
    }
    impl->parent.dirs.push_back(std::move(dir));
  }
  if (Status s = impl->driver->PrepareParent(impl->parent, options.require_controllers); !s.ok()) {
    RemoveDirs(created);
    return s;
  }
  return std::unique_ptr<CgroupManager>(new CgroupManager(std::move(impl)));
}

CgroupVersion CgroupManager::version() const { return impl_->parent.layout->version; }

StatusOr<std::unique_ptr<Cgroup>> CgroupManager::Create(const std::string& name) {
  RETURN_IF_ERROR(cgroup_internal::ValidateName(name, "sandbox cgroup name"));
  auto impl = std::make_unique<Cgroup::Impl>();
  impl->name = name;
  impl->driver = impl_->driver;
  impl->dirs.layout = impl_->parent.layout;
  std::vector<std::string> created;
  for (const std::string& p : impl_->parent.dirs) {
    std::string dir = p + "/" + name;
    if (mkdir(dir.c_str(), 0755) != 0) {
      Status s = ErrnoStatus(fmt::format("creating sandbox cgroup {}", dir));
      RemoveDirs(created);
      return s;
    }
    created.push_back(dir);
    impl->dirs.dirs.push_back(std::move(dir));
  }
  // From here on the Impl owns the directories: on error its Destroy removes them.
  auto fail = [&](Status s) {
    (void)impl->Destroy(0.1);
    return s;
  };
  for (const std::string& dir : impl->dirs.dirs) {
    std::string procs = dir + "/cgroup.procs";
    int fd = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return fail(ErrnoStatus(fmt::format("open {}", procs)));
    impl->procs_fds.push_back(fd);
    // v1: a single-threaded process joins by writing "0" to `tasks`: the kernel then moves only
    // the current thread and skips the global cgroup_threadgroup_rwsem, whose first writer of a
    // burst waits for an RCU grace period (measured here: 16.8 ms on the first "0" written to a
    // cgroup.procs, 13 µs on the next). Writing "0" to cgroup.procs moves the whole thread
    // group and takes that lock. v2 has no `tasks`: cgroup.procs.
    std::string join = version() == CgroupVersion::kV1 ? dir + "/tasks" : procs;
    int jfd = open(join.c_str(), O_WRONLY | O_CLOEXEC);
    if (jfd < 0) return fail(ErrnoStatus(fmt::format("open {}", join)));
    impl->join_fds.push_back(jfd);
    impl->join_files.push_back(join);
  }
  if (version() == CgroupVersion::kV2) {
    impl->dir_fd = open(impl->dirs.dirs.at(0).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (impl->dir_fd < 0) return fail(ErrnoStatus(fmt::format("open {}", impl->dirs.dirs[0])));
  }
  return std::make_unique<Cgroup>(std::move(impl));
}

std::vector<std::string> CgroupManager::List() const {
  std::vector<std::string> names;
  for (const std::string& p : impl_->parent.dirs) {
    std::vector<std::string> sub = cgroup_internal::SubDirs(p);
    names.insert(names.end(), sub.begin(), sub.end());
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

Status CgroupManager::Reap(const std::string& name) {
  RETURN_IF_ERROR(cgroup_internal::ValidateName(name, "sandbox cgroup name"));
  Cgroup::Impl leftover;
  leftover.name = name;
  leftover.driver = impl_->driver;
  leftover.dirs.layout = impl_->parent.layout;
  bool any = false;
  for (const std::string& p : impl_->parent.dirs) {
    leftover.dirs.dirs.push_back(p + "/" + name);
    any = any || cgroup_internal::Exists(leftover.dirs.dirs.back());
  }
  if (!any)
    return NotFound(
        fmt::format("no sandbox cgroup \"{}\" under {}", name, impl_->parent.dirs.at(0)));
  return leftover.Destroy(2.0).WithContext(fmt::format("reaping sandbox cgroup \"{}\"", name));
}

std::vector<std::string> CgroupManager::ParentPaths() const { return impl_->parent.dirs; }

std::vector<std::string> CgroupManager::OwnPaths() const {
  std::vector<std::string> out;
  for (const auto& h : impl_->parent.layout->hierarchies) out.push_back(h.own_dir);
  return out;
}

}  // namespace sbx::host
