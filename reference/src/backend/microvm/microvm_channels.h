// Internal to the microvm backend: the host's two channels into a VM (QMP and the guest agent's
// socket) and the small I/O helpers they and the VM code share. microvm_channels.cc.
#pragma once

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/microvm/microvm_vm.h"

namespace sbx::microvm {

using Clock = std::chrono::steady_clock;
// Saving or loading a whole VM (its RAM) to or from a file: the VM's save, the template's load.
inline constexpr std::chrono::milliseconds kStateFileTimeout{120000};

// Milliseconds since `t0`.
double MsSince(Clock::time_point t0);
// The last `max` bytes of a file (QEMU's log, the guest console), trailing newlines cut.
std::string Tail(const std::string& path, size_t max = 1500);
// Milliseconds left until `deadline`, at least 0.
int MsLeft(Clock::time_point deadline);
// A listening unix socket at `path` (made before QEMU starts, handed to it as a file descriptor,
// so that connecting right after the spawn never races QEMU's own start-up).
StatusOr<int> ListenUnix(const std::string& path);
StatusOr<int> ConnectUnix(const std::string& path);
Status WriteAll(int fd, std::string_view data, Clock::time_point deadline, const char* what);
// Reads what is there (at least one byte, waiting until the deadline). Empty string: EOF.
StatusOr<std::string> ReadSome(int fd, Clock::time_point deadline, const char* what);

// QMP: one JSON object per line; replies are matched in order, events are kept.
class Qmp {
 public:
  using json = nlohmann::json;
  explicit Qmp(int fd) : fd_(fd) {}
  ~Qmp() { close(fd_); }

  Status Handshake(Clock::time_point deadline) {
    ASSIGN_OR_RETURN(json greeting, ReadObject(deadline));
    if (!greeting.contains("QMP")) return Internal("QMP: no greeting, got " + greeting.dump());
    return Command("qmp_capabilities", json::object(), deadline).status();
  }

  // Sends a command, with `fd` as SCM_RIGHTS if >= 0; the "return" value or the error.
  StatusOr<json> Command(const std::string& cmd, const json& args, Clock::time_point deadline,
                         int fd = -1) {
    json req = {{"execute", cmd}};
    if (!args.empty()) req["arguments"] = args;
    std::string line = req.dump() + "\n";
    if (fd >= 0) {
      iovec iov{line.data(), line.size()};
      char ctl[CMSG_SPACE(sizeof(int))] = {};
      msghdr m{};
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      m.msg_control = ctl;
      m.msg_controllen = sizeof ctl;
      cmsghdr* c = CMSG_FIRSTHDR(&m);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
      ssize_t w = sendmsg(fd_, &m, MSG_NOSIGNAL);
      if (w != static_cast<ssize_t>(line.size())) return ErrnoStatus("QMP sendmsg " + cmd);
    } else {
      RETURN_IF_ERROR(WriteAll(fd_, line, deadline, "QMP"));
    }
    for (;;) {
      ASSIGN_OR_RETURN(json o, ReadObject(deadline));
      if (o.contains("event")) {
        events_.push_back(std::move(o));
        continue;
      }
      if (o.contains("error"))
        return Status(Code::kInternal,
                      fmt::format("QMP {}: {}", cmd, o["error"].value("desc", o.dump())));
      if (o.contains("return")) return o["return"];
    }
  }

  // Waits for an event `name` whose data matches `pred`.
  template <typename Pred>
  StatusOr<json> WaitEvent(const std::string& name, Pred pred, Clock::time_point deadline) {
    for (;;) {
      while (!events_.empty()) {
        json e = std::move(events_.front());
        events_.pop_front();
        if (e.value("event", "") == name && pred(e.value("data", json::object()))) return e;
      }
      ASSIGN_OR_RETURN(json o, ReadObject(deadline));
      if (o.contains("event")) events_.push_back(std::move(o));
    }
  }

 private:
  StatusOr<json> ReadObject(Clock::time_point deadline) {
    for (;;) {
      auto nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        json o = json::parse(line, nullptr, false);
        if (o.is_discarded() || !o.is_object())
          return Internal("QMP: not a JSON object: " + line.substr(0, 200));
        return o;
      }
      if (buf_.size() > (1u << 20)) return Internal("QMP: line over 1 MiB");
      ASSIGN_OR_RETURN(std::string more, ReadSome(fd_, deadline, "QMP"));
      if (more.empty())
        return Status(Code::kToolError, "QMP: QEMU closed the monitor (it exited?)");
      buf_ += more;
    }
  }

  int fd_;
  std::string buf_;
  std::deque<json> events_;
};

// The agent's channel: frames out, frames in through the decoder.
class AgentChannel {
 public:
  explicit AgentChannel(int fd) : fd_(fd) {}
  ~AgentChannel() { close(fd_); }

  Status Send(std::string_view bytes, Clock::time_point deadline) {
    return WriteAll(fd_, bytes, deadline, "the guest agent");
  }
  // The next frame; ERROR frames with id 0 (the agent skipping bytes) are recorded and skipped.
  StatusOr<proto::Frame> Receive(Clock::time_point deadline) {
    for (;;) {
      ASSIGN_OR_RETURN(std::optional<proto::Frame> f, dec_.Next());
      if (f) {
        if (f->type == proto::kError && f->id == 0) {
          // SECURITY: what a guest says is bounded here: the last kMaxComplaints, each cut to
          // kComplaintBytes (a guest streaming ERROR frames must not grow the runtime).
          const auto* m = f->Find(proto::kMessage);
          if (complaints_.size() >= kMaxComplaints) complaints_.erase(complaints_.begin());
          complaints_.push_back((m ? m->value : "(no message)").substr(0, kComplaintBytes));
          ++complaints_total_;
          continue;
        }
        return std::move(*f);
      }
      ASSIGN_OR_RETURN(std::string more, ReadSome(fd_, deadline, "the guest agent"));
      if (more.empty())
        return Status(Code::kToolError, "the guest agent's channel closed (QEMU exited?)");
      dec_.Feed(more);
    }
  }
  const std::vector<std::string>& complaints() const { return complaints_; }

 private:
  int fd_;
  proto::Decoder dec_;
  static constexpr size_t kMaxComplaints = 64, kComplaintBytes = 256;
  std::vector<std::string> complaints_;
  uint64_t complaints_total_ = 0;
};

}  // namespace sbx::microvm
