#include "run/mirror_fixture.h"

#include <fmt/format.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <regex>
#include <thread>

namespace sandcheck {
namespace {

bool Exists(const std::string& p, mode_t type) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && (st.st_mode & S_IFMT) == type;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

// The child, and a thread that keeps reading its stdout so that it never blocks on a full pipe.
// The pipe is non-blocking: the thread waits with poll, and whoever takes in (the thread, or a
// LogSince that wants what is already written) reads under the mutex.
struct MirrorFixture::State {
  ChildProcess child;
  std::thread drain;
  mutable std::mutex mu;
  std::deque<std::string> lines;
  size_t total = 0;      // lines ever taken in
  std::string partial;   // a line not yet ended
  int fd = -1;
  // Reads what the pipe holds now, under mu. False at EOF or on an error.
  bool TakeIn() {
    char buf[4096];
    while (true) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return true;
      if (n <= 0) return false;
      partial.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = partial.find('\n')) != std::string::npos) {
        lines.push_back(partial.substr(0, nl));
        ++total;
        if (lines.size() > 200) lines.pop_front();
        partial.erase(0, nl + 1);
      }
    }
  }
  ~State() {
    child.Kill();  // the group dies: the pipe's write end closes, the drain thread sees EOF
    if (drain.joinable()) drain.join();
    child.Stop();  // closes our end
  }
};

std::vector<std::string> MirrorFixture::Log() const {
  if (!state_) return {};
  std::lock_guard<std::mutex> lock(state_->mu);
  return {state_->lines.begin(), state_->lines.end()};
}

size_t MirrorFixture::LogCount() const {
  if (!state_) return 0;
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->TakeIn();
  return state_->total;
}

std::vector<std::string> MirrorFixture::LogSince(size_t since) const {
  if (!state_) return {};
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->TakeIn();
  const size_t first = state_->total - state_->lines.size();  // index of lines.front()
  std::vector<std::string> out;
  for (size_t i = std::max(since, first); i < state_->total; ++i)
    out.push_back(state_->lines[i - first]);
  return out;
}

std::string SelfDir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

sbx::StatusOr<MirrorFixture> MirrorFixture::Start(const MirrorOptions& o) {
  MirrorFixture m;
  m.binary_ = !o.binary.empty()                      ? o.binary
              : !Env("SANDCHECK_MIRROR_BIN").empty() ? Env("SANDCHECK_MIRROR_BIN")
                                                     : SelfDir() + "/sbx-mirror";
  m.root_ = !o.root.empty()                         ? o.root
            : !Env("SANDCHECK_MIRROR_ROOT").empty() ? Env("SANDCHECK_MIRROR_ROOT")
                                                    : SANDCHECK_SOURCE_DIR
                "/fixtures/mirror/content";
  if (!Exists(m.binary_, S_IFREG) || ::access(m.binary_.c_str(), X_OK) != 0) {
    return sbx::NotFound(fmt::format(
        "the mirror fixture {} is missing (build the target sbx-mirror, or give --mirror-bin, "
        "or --mirror HOST:PORT for a running mirror, or --mirror none)",
        m.binary_));
  }
  if (!Exists(m.root_, S_IFDIR)) {
    return sbx::NotFound(
        fmt::format("the mirror's content directory {} is missing (give --mirror-root)", m.root_));
  }
  m.state_ = std::make_shared<State>();
  // --exit-on-stdin-eof: if sandcheck dies, even by SIGKILL, the mirror goes with it.
  // --log: one line per request (on the same pipe), kept for the report.
  ASSIGN_OR_RETURN(m.state_->child, StartChild({m.binary_, "--listen", "127.0.0.1:0", "--root",
                                                m.root_, "--log", "--exit-on-stdin-eof"}));
  int fd = m.state_->child.stdout_fd();
  auto line = ReadLine(fd, o.start_timeout_s);
  if (!line.ok())
    return line.status().WithContext(fmt::format("starting the mirror {}", m.binary_));
  std::smatch match;
  static const std::regex kListening(R"(^listening\s+(127\.0\.0\.1:[0-9]{1,5})\s*$)");
  if (!std::regex_match(*line, match, kListening)) {
    return sbx::Internal(fmt::format(
        "the mirror {} said \"{}\", expected \"listening 127.0.0.1:PORT\"", m.binary_, *line));
  }
  m.address_ = match[1];
  State* st = m.state_.get();
  st->fd = fd;
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  st->drain = std::thread([st, fd] {
    while (true) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      std::lock_guard<std::mutex> lock(st->mu);
      if (!st->TakeIn()) return;
    }
  });
  return m;
}

}  // namespace sandcheck
