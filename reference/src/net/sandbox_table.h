// What the gateway knows about each attached sandbox, keyed by its address (the DNS responder
// and the proxy identify a sandbox by the source address of its packets, which the gateway's
// anti-spoofing rule ties to its veth), and the per-sandbox log of gateway decisions.
//
// Thread-safety: both classes are thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "host/fd.h"
#include "net/egress.h"
#include "net/policy_index.h"

namespace sbx::net {

struct SandboxContext {
  SandboxContext(std::string id, PolicyIndex p);
  // Ends the sandbox's open gateway connections (they poll cancel_fd): on release and on
  // shutdown. Idempotent.
  void Cancel() const;

  std::string sandbox_id;
  PolicyIndex policy;
  host::UniqueFd cancel_fd;  // an eventfd, readable once cancelled
};

class SandboxTable {
 public:
  // `addr` in network byte order. Returns false if the address is already taken.
  bool Insert(uint32_t addr, std::shared_ptr<const SandboxContext> ctx);
  void Erase(uint32_t addr);
  // nullptr for an address with no attached sandbox: the caller treats it as "deny all".
  std::shared_ptr<const SandboxContext> Find(uint32_t addr) const;
  bool HasSandbox(const std::string& sandbox_id) const;
  // Cancels every attached sandbox's connections (shutdown).
  void CancelAll() const;
  size_t size() const;

 private:
  mutable std::shared_mutex mu_;
  std::map<uint32_t, std::shared_ptr<const SandboxContext>> by_addr_;
};

class DecisionLog {
 public:
  static constexpr size_t kMaxPerSandbox = 2048;  // oldest dropped beyond this
  static constexpr size_t kMaxReleased = 1024;    // logs of released sandboxes kept

  void Record(const std::string& sandbox_id, std::string protocol, std::string destination,
              std::string rule, std::string verdict, std::string reason);
  std::vector<GatewayDecision> Get(const std::string& sandbox_id) const;
  // Starts a fresh log for an attached sandbox.
  void Begin(const std::string& sandbox_id);
  // The sandbox is gone; its log is kept until kMaxReleased newer ones were released.
  void Release(const std::string& sandbox_id);

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::deque<GatewayDecision>> logs_;
  std::deque<std::string> released_;
};

}  // namespace sbx::net
