/* The WASI preview-1 imports of a wasm2c-compiled module (BK-2; docs/wasm.md): what a module
 * compiled to wasm32-wasi may ask of its host, implemented on Linux system calls inside the
 * sandbox the wasm backend runs it in.
 *
 * Capabilities (BK-2: no ambient authority): the module sees standard input, output and error
 * (fds 0-2) and ONE preopened directory, /work (fd 3). Every path is resolved beneath a
 * directory descriptor the module holds, by the kernel (openat2 RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS): `..` past it, absolute paths and symlinks that point outside are
 * refused (ENOTCAPABLE), whatever the module writes. There is no socket, no process and no
 * host path: sock_* answer ENOTSUP, and nothing else names a host object. The sandbox around
 * the host process (namespaces, cgroup, seccomp: the native backend's) is the second wall.
 *
 * Every pointer and length the module passes is checked against its linear memory before
 * use; a bad one is EFAULT to the module, never a read or write outside it.
 *
 * Thread-safety: one instance per thread (the host runs one).
 */
#ifndef SBX_WASI_HOST_H_
#define SBX_WASI_HOST_H_

#include <signal.h>
#include <stdint.h>
#include <wasm-rt.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SBX_WASI_MAX_FDS 64

struct sbx_wasi_fd {
  int host_fd;         /* -1: free slot */
  int is_dir;          /* opened as a directory (paths may be resolved beneath it) */
  const char* preopen; /* the name the module sees for a preopened directory, else NULL */
  uint16_t fdflags;    /* WASI fdflags the module set (append, nonblock, ...) */
};

/* The type wasm2c names for the imports' context: one per module instance. */
struct Z_wasi_snapshot_preview1_instance_t {
  wasm_rt_memory_t* memory; /* the module's linear memory, set after instantiation */
  int argc;
  char** argv;
  int envc;
  char** envp;
  struct sbx_wasi_fd fds[SBX_WASI_MAX_FDS];
  int exited; /* proc_exit was called */
  int exit_code;
};
typedef struct Z_wasi_snapshot_preview1_instance_t sbx_wasi_t;

/* Sets up stdio (0-2) and the preopened directory `preopen_path` as fd 3 under the name the
 * module sees, `preopen_name` ("/work"). 0, or -1 with errno when the directory cannot be
 * opened. */
int sbx_wasi_init(sbx_wasi_t* w, const char* preopen_path, const char* preopen_name);

/* Closes every descriptor the module opened (not 0-2). */
void sbx_wasi_close_all(sbx_wasi_t* w);

/* proc_exit ends the run: the host installs this jump target around _start. */
extern void (*sbx_wasi_on_exit)(int code);

/* In-engine interruption (the host's deadline, CPU budget and SIGTERM; wasm_host_main.c): an
 * interruption must not cut host code in the middle (a descriptor table half updated), so the
 * host's signal handler traps the instance at once only while module code runs. While an import
 * runs (sbx_wasi_in_import > 0) it sets sbx_wasi_interrupt instead; the import's blocking calls
 * give up (EINTR), and when the outermost import returns, sbx_wasi_on_interrupt is called (it
 * does not return: it traps the instance). */
extern void (*sbx_wasi_on_interrupt)(void);
extern volatile sig_atomic_t sbx_wasi_in_import;
extern volatile sig_atomic_t sbx_wasi_interrupt;

#ifdef __cplusplus
}
#endif

#endif /* SBX_WASI_HOST_H_ */
