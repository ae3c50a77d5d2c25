#include "net/sandbox_table.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

namespace sbx::net {

SandboxContext::SandboxContext(std::string id, PolicyIndex p)
    : sandbox_id(std::move(id)),
      policy(std::move(p)),
      cancel_fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void SandboxContext::Cancel() const {
  uint64_t one = 1;
  if (cancel_fd.valid() && write(cancel_fd.get(), &one, sizeof(one)) < 0) {
    // Only fails on counter overflow, which needs 2^64 cancels.
  }
}

void SandboxTable::CancelAll() const {
  std::shared_lock lock(mu_);
  for (const auto& kv : by_addr_) kv.second->Cancel();
}

bool SandboxTable::Insert(uint32_t addr, std::shared_ptr<const SandboxContext> ctx) {
  std::unique_lock lock(mu_);
  return by_addr_.emplace(addr, std::move(ctx)).second;
}

void SandboxTable::Erase(uint32_t addr) {
  std::unique_lock lock(mu_);
  by_addr_.erase(addr);
}

std::shared_ptr<const SandboxContext> SandboxTable::Find(uint32_t addr) const {
  std::shared_lock lock(mu_);
  auto it = by_addr_.find(addr);
  return it == by_addr_.end() ? nullptr : it->second;
}

bool SandboxTable::HasSandbox(const std::string& sandbox_id) const {
  std::shared_lock lock(mu_);
  return std::any_of(by_addr_.begin(), by_addr_.end(),
                     [&](const auto& kv) { return kv.second->sandbox_id == sandbox_id; });
}

size_t SandboxTable::size() const {
  std::shared_lock lock(mu_);
  return by_addr_.size();
}

void DecisionLog::Record(const std::string& sandbox_id, std::string protocol,
                         std::string destination, std::string rule, std::string verdict,
                         std::string reason) {
  GatewayDecision d;
  d.unix_time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  d.sandbox_id = sandbox_id;
  d.protocol = std::move(protocol);
  d.destination = std::move(destination);
  d.rule = std::move(rule);
  d.verdict = std::move(verdict);
  d.reason = std::move(reason);
  std::lock_guard lock(mu_);
  auto& log = logs_[sandbox_id];
  log.push_back(std::move(d));
  while (log.size() > kMaxPerSandbox) log.pop_front();
}

std::vector<GatewayDecision> DecisionLog::Get(const std::string& sandbox_id) const {
  std::lock_guard lock(mu_);
  auto it = logs_.find(sandbox_id);
  if (it == logs_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

void DecisionLog::Begin(const std::string& sandbox_id) {
  std::lock_guard lock(mu_);
  logs_[sandbox_id].clear();
  released_.erase(std::remove(released_.begin(), released_.end(), sandbox_id), released_.end());
}

void DecisionLog::Release(const std::string& sandbox_id) {
  std::lock_guard lock(mu_);
  released_.push_back(sandbox_id);
  while (released_.size() > kMaxReleased) {
    logs_.erase(released_.front());
    released_.pop_front();
  }
}

}  // namespace sbx::net
