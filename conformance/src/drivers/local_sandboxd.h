// A sandboxd of the harness's own, for the command-line rows "through a local sandboxd"
// (issue 16: "when a local sandboxd is running, sandboxctl run may use its warm pool";
// docs/performance.md, "One command from the command line"). A target the harness talks to, so
// it lives in drivers/ (docs/harness-layout.md: only drivers/ talk to a target).
//
// Ownership: its config, token and socket live in the directory given to Start; Stop (also the
// destructor) sends SIGTERM, which makes sandboxd destroy every sandbox and remove its socket,
// and waits for it (bounded; then SIGKILL to its group). The directory is the caller's.
//
// Thread-safety: one thread.
#pragma once

#include <sys/types.h>

#include <string>

namespace sandcheck {

class LocalSandboxd {
 public:
  LocalSandboxd() = default;
  LocalSandboxd(const LocalSandboxd&) = delete;
  LocalSandboxd& operator=(const LocalSandboxd&) = delete;
  ~LocalSandboxd() { Stop(); }

  // Writes a config with one tenant ("cli", a fresh random token) and a pool of two, starts
  // `sandboxd` on `dir`/sandboxd.sock, and waits (bounded) for the socket to appear, which it
  // does once the daemon serves. On failure error() says why and nothing is left running.
  void Start(const std::string& sandboxd, const std::string& dir);

  // After a run through the daemon, untimed: until its background work (the used sandbox's
  // reclaim, the pool's refill) is done, as between two commands a person types. Polls
  // GET /v1/info's capacity.background_outstanding (every 5 ms, bounded); false on the bound or
  // an error.
  bool WaitIdle() const;

  void Stop();

  const std::string& socket() const { return socket_; }
  const std::string& token() const { return token_; }
  const std::string& error() const { return error_; }  // "" once started
  void set_error(std::string e) { error_ = std::move(e); }

 private:
  pid_t pid_ = -1;
  std::string socket_, token_, error_;
};

}  // namespace sandcheck
