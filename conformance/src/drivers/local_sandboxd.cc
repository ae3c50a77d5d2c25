#include "drivers/local_sandboxd.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/process.h"
#include "common/subprocess.h"
#include "sbx/http_client.h"

namespace sandcheck {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr double kBoundS = 60;  // to serve, to go idle, to stop after SIGTERM

std::string RandomToken() {
  unsigned char b[16];
  std::string out;
  if (::getrandom(b, sizeof b, 0) != static_cast<ssize_t>(sizeof b)) return out;
  for (unsigned char c : b) out += fmt::format("{:02x}", c);
  return "cli-" + out;
}

}  // namespace

void LocalSandboxd::Start(const std::string& sandboxd, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  token_ = RandomToken();
  if (ec || token_.empty()) {
    error_ = "cannot prepare its directory or token";
    return;
  }
  // A small pool: every run of an untrusted (default) tool takes a sandbox that is then
  // discarded and replaced in the background (POOL-5); rows take turns, so two are enough.
  json config = {{"tenants", {{"cli", {{"token", token_}}}}}, {"pool_ceiling", 2}};
  std::string cfg = dir + "/sandboxd.json";
  int fd = ::open(cfg.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  std::string text = config.dump();
  if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    if (fd >= 0) ::close(fd);
    error_ = fmt::format("cannot write {}", cfg);
    return;
  }
  ::close(fd);
  socket_ = dir + "/sandboxd.sock";
  OwnedFd err(::memfd_create("sandcheck-sandboxd-stderr", MFD_CLOEXEC));
  pid_ = Spawn({.argv = {sandboxd, "--config", cfg, "--socket", socket_}}, -1, err.get(), false);
  if (pid_ < 0) {
    error_ = std::string("fork: ") + std::strerror(errno);
    return;
  }
  // The socket is renamed into place once the daemon serves (docs/sandboxd.md): that event,
  // bounded, or the daemon's exit.
  auto deadline = Clock::now() + std::chrono::duration<double>(kBoundS);
  struct stat st {};
  while (::stat(socket_.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      error_ = "sandboxd exited at start: " + DescribeStatus(status, err.get(), false, 0);
      return;
    }
    if (Clock::now() > deadline) {
      error_ = fmt::format("sandboxd did not serve within {:g} s", kBoundS);
      Stop();
      return;
    }
    ::usleep(10000);
  }
}

bool LocalSandboxd::WaitIdle() const {
  auto endpoint = sbx::http::ParseEndpoint("unix:" + socket_);
  if (!endpoint.ok()) return false;
  sbx::http::Request req;
  req.path = "/v1/info";
  req.headers = {{"Authorization", "Bearer " + token_}};
  auto deadline = Clock::now() + std::chrono::duration<double>(kBoundS);
  while (Clock::now() < deadline && !Interrupted()) {
    auto r = sbx::http::Call(*endpoint, req, {.timeout_s = 10, .who = "the local sandboxd"});
    if (!r.ok() || r->status != 200) return false;
    json info = json::parse(r->body, nullptr, false);
    if (!info.is_object()) return false;
    json outstanding =
        info.value("capacity", json::object()).value("background_outstanding", json());
    if (!outstanding.is_number_integer()) return false;
    if (outstanding.get<int64_t>() == 0) return true;
    ::usleep(5000);
  }
  return false;
}

void LocalSandboxd::Stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  if (WaitChild(pid_, kBoundS) < 0 && error_.empty())
    error_ = "sandboxd did not stop within its bound after SIGTERM: killed";
  pid_ = -1;
}

}  // namespace sandcheck
