// Seccomp deny-list (see seccomp.h and docs/seccomp.md). Built once with libseccomp in the
// supervisor, exported to raw BPF, loaded in each child with two prctl calls.
//
// The filter is a deny-list on top of the other isolation layers (namespaces, no capabilities,
// cgroups): it removes the kernel surface that a tool never needs and that sandbox escapes and
// kernel exploits reach for. Default action ALLOW, native x86_64 only.
#include "host/seccomp.h"

#include <fmt/format.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <memory>

#include "host/fd.h"

// Newer than Debian 12's kernel headers (6.1); the numbers are the x86_64 ABI's and never change.
#ifndef __NR_open_tree_attr
#define __NR_open_tree_attr 467  // Linux 6.15
#endif

namespace sbx::host {
namespace {

// One unconditionally denied syscall (EPERM): its number, and why no tool needs it (the
// reason is the review record; docs/seccomp.md repeats the table).
struct DeniedCall {
  const char* name;
  long nr;
  const char* why;
};

// SECURITY: every entry is kernel surface that a sandboxed tool never needs. Denied calls fail
// with EPERM, as they would for an unprivileged process, so tools see a clean error rather than
// a crash.
constexpr DeniedCall kDenied[] = {
    // File-system namespace: the runtime builds the tool's root before the filter is loaded; a
    // tool that could remount would undo FS-1/FS-2 (read-only /usr) or reach the host's tree.
    {"mount", __NR_mount, "remounting could undo the read-only root (FS-1, FS-2)"},
    {"umount2", __NR_umount2, "unmounting could uncover what a mount hides"},
    {"pivot_root", __NR_pivot_root, "changes the root; only the runtime does this, before load"},
    {"chroot", __NR_chroot, "harmless without CAP_SYS_CHROOT, but a classic escape step"},
    {"fsopen", __NR_fsopen, "new mount API: same power as mount"},
    {"fsconfig", __NR_fsconfig, "new mount API: same power as mount"},
    {"fsmount", __NR_fsmount, "new mount API: same power as mount"},
    {"fspick", __NR_fspick, "new mount API: reconfigures an existing mount"},
    {"move_mount", __NR_move_mount, "new mount API: attaches mounts anywhere"},
    {"open_tree", __NR_open_tree, "new mount API: clones mount trees"},
    {"open_tree_attr", __NR_open_tree_attr, "new mount API (6.15): clone with new attributes"},
    {"mount_setattr", __NR_mount_setattr, "changes mount flags, e.g. read-only to read-write"},
    // Namespaces: a new user namespace gives the tool a full capability set over fresh
    // namespaces, the usual first step of kernel exploits; setns joins someone else's.
    {"unshare", __NR_unshare, "creates namespaces (user namespaces grant capabilities)"},
    {"setns", __NR_setns, "joins another namespace through an inherited or passed fd"},
    // Other processes: PID namespace hides them (FS-3); this is the second wall.
    {"ptrace", __NR_ptrace,
     "reads and writes other processes; gVisor's ptrace platform is "
     "the supervisor's, never the tool's"},
    {"process_vm_readv", __NR_process_vm_readv, "reads another process's memory"},
    {"process_vm_writev", __NR_process_vm_writev, "writes another process's memory"},
    {"kcmp", __NR_kcmp, "compares kernel objects of other processes (an ASLR/kernel-info leak)"},
    {"pidfd_getfd", __NR_pidfd_getfd, "steals a file descriptor from another process"},
    // The kernel itself: modules, kexec, BPF, perf are the big exploit surfaces.
    {"kexec_load", __NR_kexec_load, "replaces the running kernel"},
    {"kexec_file_load", __NR_kexec_file_load, "replaces the running kernel"},
    {"init_module", __NR_init_module, "loads kernel code"},
    {"finit_module", __NR_finit_module, "loads kernel code"},
    {"delete_module", __NR_delete_module, "unloads kernel code"},
    {"create_module", __NR_create_module, "obsolete module call (removed in 2.6)"},
    {"get_kernel_syms", __NR_get_kernel_syms, "obsolete module call (removed in 2.6)"},
    {"query_module", __NR_query_module, "obsolete module call (removed in 2.6)"},
    {"bpf", __NR_bpf, "loads programs into the kernel; a frequent exploit vector"},
    {"perf_event_open", __NR_perf_event_open, "kernel profiling; leaks addresses, exploit vector"},
    {"lookup_dcookie", __NR_lookup_dcookie, "profiling helper (oprofile); kernel info leak"},
    {"userfaultfd", __NR_userfaultfd, "lets an exploit stall the kernel mid-copy (race widening)"},
    {"io_uring_setup", __NR_io_uring_setup,
     "large, exploit-prone surface; also bypasses "
     "per-syscall filtering of the I/O it performs"},
    {"io_uring_enter", __NR_io_uring_enter, "io_uring (see io_uring_setup)"},
    {"io_uring_register", __NR_io_uring_register, "io_uring (see io_uring_setup)"},
    // Keys are not namespaced: a tool could read or fill keyrings shared with the host.
    {"keyctl", __NR_keyctl, "kernel keyrings are not namespaced"},
    {"add_key", __NR_add_key, "kernel keyrings are not namespaced"},
    {"request_key", __NR_request_key, "kernel keyrings are not namespaced; may run upcalls"},
    // File handles bypass path lookup, and so the root the tool was given (the "shocker" escape).
    {"open_by_handle_at", __NR_open_by_handle_at, "opens files by handle, outside the root"},
    {"name_to_handle_at", __NR_name_to_handle_at, "builds handles for open_by_handle_at"},
    // Whole-machine state: a tool never administers the host.
    {"reboot", __NR_reboot, "restarts the host (or its PID namespace)"},
    {"swapon", __NR_swapon, "host swap configuration"},
    {"swapoff", __NR_swapoff, "host swap configuration"},
    {"settimeofday", __NR_settimeofday, "the clock is not namespaced"},
    {"clock_settime", __NR_clock_settime, "the clock is not namespaced"},
    {"clock_adjtime", __NR_clock_adjtime, "the clock is not namespaced"},
    {"adjtimex", __NR_adjtimex, "adjusts the host clock (reading is not worth the surface)"},
    {"acct", __NR_acct, "host process accounting"},
    {"quotactl", __NR_quotactl, "host disk quotas"},
    {"quotactl_fd", __NR_quotactl_fd, "host disk quotas"},
    {"iopl", __NR_iopl, "raw I/O port access"},
    {"ioperm", __NR_ioperm, "raw I/O port access"},
    {"syslog", __NR_syslog, "the kernel log leaks addresses and host events"},
    {"vhangup", __NR_vhangup, "hangs up the controlling terminal"},
    {"nfsservctl", __NR_nfsservctl, "obsolete NFS server control"},
    {"uselib", __NR_uselib, "obsolete a.out loader, old exploit vector"},
    {"ustat", __NR_ustat, "obsolete file-system statistics"},
    {"sysfs", __NR_sysfs, "obsolete file-system type query"},
    {"_sysctl", __NR__sysctl, "obsolete binary sysctl"},
};

// clone(2) flags that create namespaces (see unshare above). clone3 hides its flags in memory a
// filter cannot read, so clone3 returns ENOSYS (libc then falls back to clone, whose flags are
// in a register), which is how Docker and systemd handle it too.
constexpr struct {
  const char* name;
  uint64_t flag;
} kCloneNsFlags[] = {
    {"CLONE_NEWUSER", CLONE_NEWUSER},     {"CLONE_NEWNS", CLONE_NEWNS},
    {"CLONE_NEWPID", CLONE_NEWPID},       {"CLONE_NEWNET", CLONE_NEWNET},
    {"CLONE_NEWUTS", CLONE_NEWUTS},       {"CLONE_NEWIPC", CLONE_NEWIPC},
    {"CLONE_NEWCGROUP", CLONE_NEWCGROUP},
};

// personality(2): only PER_LINUX (0), PER_LINUX32 (8) and the query 0xffffffff are allowed.
// Other values switch off ASLR (ADDR_NO_RANDOMIZE), make data executable (READ_IMPLIES_EXEC)
// or map page zero (MMAP_PAGE_ZERO): weakening the tool's own process is a step of exploits.
//
// libseccomp allows one comparison per argument per rule, so "arg not in {0, 8, ~0u}" is
// written as a union of masked-equality rules ("bit a set and bit b clear"), each of which
// excludes all three allowed values:
//  - a value above 32 bits is denied by one GT rule;
//  - a 32-bit value x outside the set has a bit a != 3 set (else x is 0 or 8) and some bit
//    clear (else x is ~0u). Going round the 32 bits as a cycle, x then has a position i with
//    bit i set and bit i+1 clear. If the only such i is 3, the run of ones ending at bit 3 is
//    longer than bit 3 alone (x != 8), so bits 2 and 3 are set and bit 4 is clear.
//  So the 31 pairs (i, i+1 mod 32) for i != 3, plus (2, 4), cover every denied value (also
//  checked exhaustively over all 2^32 values when this was written: docs/seccomp.md).
//  seccomp_itest.cc checks the boundary values in the kernel.
constexpr uint64_t kPersonalityAllowed[] = {0x0, 0x8, 0xffffffff};

struct CtxDeleter {
  void operator()(void* ctx) const { seccomp_release(static_cast<scmp_filter_ctx>(ctx)); }
};
using Ctx = std::unique_ptr<void, CtxDeleter>;

Status LibStatus(std::string_view what, int rc) { return ErrnoStatus(what, -rc); }

}  // namespace

StatusOr<SeccompFilter> SeccompFilter::Compile() {
  SeccompFilter f;
  Ctx ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return Internal("seccomp_init failed");
  // SECURITY: only the native x86_64 ABI is in the filter, and the action for any other is to
  // kill the process. Without this, the i386 ABI (int 0x80) and the x32 ABI (syscall numbers
  // with __X32_SYSCALL_BIT) reach the same kernel functions under other numbers and would walk
  // past every rule below. libseccomp's x86_64 program checks for the x32 bit itself and sends
  // such calls to this same bad-architecture action (verified in seccomp_itest.cc).
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
      rc < 0) {
    return LibStatus("seccomp: bad-arch action", rc);
  }
  // A binary search over syscall numbers rather than a linear list: ~60 rules otherwise cost
  // every syscall of the tool up to ~60 comparisons (measured in docs/seccomp.md).
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2); rc < 0) {
    return LibStatus("seccomp: optimize attribute", rc);
  }

  for (const DeniedCall& d : kDenied) {
    if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), static_cast<int>(d.nr), 0);
        rc < 0) {
      return LibStatus(fmt::format("seccomp: deny {}", d.name), rc);
    }
    f.denied_.emplace_back(d.name);
  }

  // SECURITY: namespace creation through clone(2) — same reason as unshare. Masked compares on
  // the full 64-bit flags word: any value with the bit set is denied, whatever else is set.
  for (const auto& ns : kCloneNsFlags) {
    if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                  SCMP_A0(SCMP_CMP_MASKED_EQ, ns.flag, ns.flag));
        rc < 0) {
      return LibStatus(fmt::format("seccomp: deny clone({})", ns.name), rc);
    }
    f.denied_.push_back(fmt::format("clone({})", ns.name));
  }
  // SECURITY: clone3 passes its flags in memory that seccomp cannot inspect, so it is refused
  // with ENOSYS: glibc (2.34+) then retries with clone(2), which the rules above see.
  if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0); rc < 0) {
    return LibStatus("seccomp: deny clone3", rc);
  }
  f.denied_.emplace_back("clone3");

  // SECURITY: personality values other than the default persona (see kPersonalityAllowed).
  if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
                                SCMP_A0(SCMP_CMP_GT, 0xffffffffULL));
      rc < 0) {
    return LibStatus("seccomp: deny personality (64-bit)", rc);
  }
  auto deny_pair = [&](int set_bit, int clear_bit) -> Status {
    uint64_t mask = (1ULL << set_bit) | (1ULL << clear_bit);
    for (uint64_t ok : kPersonalityAllowed) {
      if ((ok & mask) == (1ULL << set_bit)) {
        return Internal("personality rule hits an allowed value");
      }
    }
    int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
                              SCMP_A0(SCMP_CMP_MASKED_EQ, mask, 1ULL << set_bit));
    return rc < 0 ? LibStatus("seccomp: deny personality", rc) : Status::Ok();
  };
  for (int i = 0; i < 32; i++) {
    if (i != 3) RETURN_IF_ERROR(deny_pair(i, (i + 1) % 32));
  }
  RETURN_IF_ERROR(deny_pair(2, 4));
  f.denied_.emplace_back("personality(other than PER_LINUX, PER_LINUX32, query)");

  // SECURITY: TIOCSTI pushes bytes into a terminal's input queue and TIOCLINUX can read the
  // console: a tool that shares a terminal with a shell could type commands into it (the
  // bubblewrap/flatpak CVE-2017-5226 class). The kernel truncates the request to 32 bits, so
  // the compare masks the upper half (a set upper bit must not slip past the rule).
  for (uint64_t req : {uint64_t{TIOCSTI}, uint64_t{TIOCLINUX}}) {
    if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                                  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffULL, req));
        rc < 0) {
      return LibStatus("seccomp: deny ioctl", rc);
    }
  }
  f.denied_.emplace_back("ioctl(TIOCSTI)");
  f.denied_.emplace_back("ioctl(TIOCLINUX)");

  // Export the BPF program through a memfd and keep the bytes: children only load them.
  UniqueFd mem(memfd_create("sbx-seccomp", MFD_CLOEXEC));
  if (mem.get() < 0) return ErrnoStatus("memfd_create");
  if (int rc = seccomp_export_bpf(ctx.get(), mem.get()); rc < 0) {
    return LibStatus("seccomp_export_bpf", rc);
  }
  off_t size = lseek(mem.get(), 0, SEEK_END);
  if (size < 0) return ErrnoStatus("lseek seccomp memfd");
  if (size == 0 || size % sizeof(sock_filter) != 0 || size / sizeof(sock_filter) > BPF_MAXINSNS) {
    return Internal(fmt::format("seccomp: exported program has a bad size ({} bytes)", size));
  }
  f.program_.resize(static_cast<size_t>(size) / sizeof(sock_filter));
  auto* out = reinterpret_cast<char*>(f.program_.data());
  size_t done = 0;
  while (done < static_cast<size_t>(size)) {
    ssize_t n =
        pread(mem.get(), out + done, static_cast<size_t>(size) - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read seccomp memfd");
    if (n == 0) return Internal("seccomp: short read of the exported program");
    done += static_cast<size_t>(n);
  }
  return f;
}

int SeccompFilter::LoadInChild() const noexcept {
  // Only raw system calls here: this runs between fork/clone and exec, where nothing that
  // allocates or locks may run.
  if (program_.empty()) return -EINVAL;
  // SECURITY: no_new_privs first: it is required to load a filter without CAP_SYS_ADMIN, and it
  // stops setuid binaries in the image from regaining privileges the sandbox dropped.
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -errno;
  sock_fprog prog{};
  prog.len = static_cast<unsigned short>(program_.size());
  prog.filter = const_cast<sock_filter*>(program_.data());
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) return -errno;
  return 0;
}

}  // namespace sbx::host
