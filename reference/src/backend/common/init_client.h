// backend/init_client: the runtime's side of the control protocol of sbx-init, the in-sandbox
// agent (init/init_protocol.h). One implementation for every backend whose sandbox has sbx-init
// as its first process: native (sbx-init built the sandbox's root, then serves commands) and oci
// on crun/runc (the container's init is `sbx-init --agent`). A command then costs a fork inside
// the sandbox, not a runtime CLI start (issue 16), and the next command's shell can be forked
// ahead of time (POOL-8, NFR-1).
//
// Ownership: the client owns the runtime's end of the control socket. Closing it (Close(), or
// the destructor) makes sbx-init read EOF and exit, which ends the sandbox's PID namespace.
// May include: sbx/model.h, host/fd.h, backend/command_watch.h.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend/common/command_watch.h"
#include "host/fd.h"
#include "init/init_protocol.h"
#include "sbx/model.h"

namespace sbx::backend {

// The environment every command starts with (the sandbox user's home, /work).
const std::map<std::string, std::string>& AgentBaseEnv();

// What runs a command in the sandbox. Both forms get the same text: `export NAME='value'`
// lines for the environment beyond the base one, then the command line.
struct Entrypoint {
  // The argv prefix of a command started on demand: the command line is appended as one
  // argument ({"/bin/sh", "-c"}).
  std::vector<std::string> run;
  // The argv of a pre-spawned process that reads its text on fd 3 up to EOF, then runs it; it
  // must exit quietly when the text is empty (it was dropped).
  std::vector<std::string> waiting;
  // The argv of a persistent host that runs EVERY command itself (the wasm host's --serve-fd 3:
  // reference/src/backend/wasm/host/wasm_host_main.c "Serving"): one per sandbox, started where a
  // pre-spawned process would be; per command it gets the same text and the command's stdin, stdout
  // and stderr over a SOCK_SEQPACKET socket on fd 3, and answers {int32 signaled; int32 value}.
  // Empty: none (every command is a process of its own).
  std::vector<std::string> serving;
  // A shell (every image but a wasm module's: backend/wasm_backend.cc).
  static Entrypoint Shell();
  bool operator==(const Entrypoint&) const = default;
};

// 'v' for a shell and for the wasm host's command parser ('\'' for a quote inside).
std::string ShellQuote(const std::string& v);

class InitClient {
 public:
  InitClient() = default;
  // ctl: the runtime's end of the SOCK_SEQPACKET pair; uid/gid: whom commands run as.
  InitClient(host::UniqueFd ctl, uint32_t uid, uint32_t gid);

  bool valid() const { return ctl_.valid() && !broken_; }
  // The agent stopped answering (EOF, a failed send, no answer in time): nothing more can run.
  bool broken() const { return broken_; }
  int fd() const { return ctl_.get(); }
  // Closes the socket: the agent exits (and with it every process of its PID namespace).
  void Close();

  // Waits for kReady: the agent is up (native: the root is built). The agent's error text, if
  // it failed, is in the status.
  Status WaitReady(double timeout_s);

  // Keep a shell forked ahead of time, waiting for its script (POOL-8). nofile: RLIMIT_NOFILE.
  void EnablePrespawn(int64_t nofile);
  // Forks the next shell if enabled and none is waiting. Nothing waits for the agent's answer.
  void Prespawn();
  // The waiting shell reads EOF and exits (its limits are stale, or a reset follows).
  void DropPrespawned();
  // The same, and waits until the agent reports the shell gone (its descriptors closed).
  Status DropPrespawnedAndWait(double timeout_s);
  // Waits until the pre-spawned shell (if any) has started (kStarted), so that the next
  // command takes it without waiting for its fork and exec.
  void WaitPrespawned(double timeout_s);
  void set_nofile(int64_t nofile);
  // What runs commands (default: the shell). A pre-spawned process of the old one is replaced.
  void set_entrypoint(Entrypoint e);
  // RLIMIT_NPROC of every later command (0: none). Only where the sandbox has a kernel of its
  // own (gVisor's Sentry): on the host kernel the count is per uid across all sandboxes.
  void set_nproc(int64_t nproc);

  struct Started {
    uint32_t id = 0;
    CommandPipes pipes;
    int exec_errno = 0;   // the command could not be executed (no pipes then)
    bool served = false;  // run by the serving host (id is the host's): watch ServedSource too
  };
  // LC-4: starts one command (the pre-spawned shell if it can take it). env is the whole
  // environment, secrets included: every buffer that held it is zeroed here (LC-8).
  StatusOr<Started> Start(const ExecSpec& exec, std::map<std::string, std::string> env);

  // For CommandWatch: learns the exit of command `id` (kExited) from the socket.
  WatchSource ExitSource(uint32_t id, bool* exited, int* wait_status);
  // For CommandWatch, a served command: the serving host's answer, as a wait status (an exit
  // code, or the signal of an in-engine interruption). At EOF the host is gone and its own
  // kExited (ExitSource with Started::id) tells how it died.
  WatchSource ServedSource(bool* exited, int* wait_status);
  // The serving host is running (it answered its last command, or has not had one yet).
  bool serving_alive() const { return server_ && !server_->dead; }

  // kill(-1, sig) from PID 1: every process of the sandbox's PID namespace but the agent.
  void SignalAll(int sig);
  // POOL-7: kill and reap every process, empty the writable directories (native only: the
  // agent must be allowed to remove what the tools wrote).
  Status Reset();

 private:
  bool Next(int timeout_ms, initproto::Header* h);
  void Dispatch(const initproto::Header& h);
  Status SendExec(uint32_t id, const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env, const std::vector<int>& fds);

  void SpawnServer();
  // The persistent host (Entrypoint::serving) and the runtime's end of its socket.
  struct Server {
    uint32_t id = 0;
    host::UniqueFd sock;
    bool started = false, dead = false;
  };
  std::optional<Server> server_;

  // A shell that waits on fd 3 for its script.
  struct Prespawned {
    uint32_t id = 0;
    host::UniqueFd script_w, in_w, out_r, err_r;
    bool started = false, dead = false;
  };

  host::UniqueFd ctl_;
  uint32_t uid_ = 0, gid_ = 0;
  int64_t nofile_ = 1024;
  int64_t nproc_ = 0;
  Entrypoint entrypoint_ = Entrypoint::Shell();
  uint32_t next_id_ = 1;
  bool prespawn_ = false;
  bool broken_ = false;
  std::optional<Prespawned> pre_;
  std::deque<initproto::Header> inbox_;
};

}  // namespace sbx::backend
