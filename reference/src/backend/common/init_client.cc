#include "backend/common/init_client.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace sbx::backend {
namespace {

namespace ip = sbx::initproto;

// The pre-spawned shell: reads its whole script from fd 3 (up to EOF), closes it, runs it.
constexpr const char* kPrelude = "IFS= read -r -d '' __sbx_cmd <&3; exec 3<&-; eval \"$__sbx_cmd\"";

// Receives one packet from the agent (header + optional text), waiting up to timeout_ms.
// Returns false on timeout, EOF or error.
bool RecvPacket(int fd, int timeout_ms, ip::Header* h, std::string* text) {
  struct pollfd p = {fd, POLLIN, 0};
  int rc = poll(&p, 1, timeout_ms);
  if (rc <= 0) return false;
  char buf[4096];
  ssize_t n = recv(fd, buf, sizeof buf, 0);
  if (n < static_cast<ssize_t>(sizeof(ip::Header))) return false;
  std::memcpy(h, buf, sizeof *h);
  if (text) text->assign(buf + sizeof *h, static_cast<size_t>(n) - sizeof *h);
  return true;
}

bool ShellIdentifier(const std::string& k) {
  if (k.empty() || std::isdigit(static_cast<unsigned char>(k[0]))) return false;
  return std::all_of(k.begin(), k.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

struct Pipe {
  host::UniqueFd r, w;
};
StatusOr<Pipe> MakePipe() {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return ErrnoStatus("pipe");
  return Pipe{host::UniqueFd(p[0]), host::UniqueFd(p[1])};
}

}  // namespace

const std::map<std::string, std::string>& AgentBaseEnv() {
  static const std::map<std::string, std::string> env = {{"PATH", "/usr/bin:/bin:/usr/sbin:/sbin"},
                                                         {"HOME", "/home/sandbox"},
                                                         {"USER", "sandbox"},
                                                         {"PWD", "/work"}};
  return env;
}

InitClient::InitClient(host::UniqueFd ctl, uint32_t uid, uint32_t gid)
    : ctl_(std::move(ctl)), uid_(uid), gid_(gid) {}

void InitClient::Close() {
  pre_.reset();
  server_.reset();
  inbox_.clear();
  ctl_.Reset();
}

Status InitClient::WaitReady(double timeout_s) {
  ip::Header h{};
  std::string text;
  if (!RecvPacket(ctl_.get(), static_cast<int>(timeout_s * 1000), &h, &text)) {
    broken_ = true;
    return Status(Code::kSandboxUnavailable, "no ready message from the sandbox's init");
  }
  if (h.type != ip::kReady || h.a != 0) {
    broken_ = true;
    return Status(Code::kSandboxUnavailable, text.empty() ? "sandbox init failed" : text);
  }
  return Status::Ok();
}

bool InitClient::Next(int timeout_ms, ip::Header* h) {
  if (!inbox_.empty()) {
    *h = inbox_.front();
    inbox_.pop_front();
    return true;
  }
  return RecvPacket(ctl_.get(), timeout_ms, h, nullptr);
}

void InitClient::Dispatch(const ip::Header& h) {
  if (server_ && h.id == server_->id) {
    if (h.type == ip::kStarted) {
      server_->started = true;
      if (h.b != 0) server_->dead = true;
    } else if (h.type == ip::kExited) {
      server_->dead = true;
    }
    return;
  }
  if (!pre_ || h.id != pre_->id) return;
  if (h.type == ip::kStarted) {
    pre_->started = true;
    if (h.b != 0) pre_->dead = true;
  } else if (h.type == ip::kExited) {
    pre_->dead = true;  // killed before it was used (e.g. by a background process of a task)
  }
}

Status InitClient::SendExec(uint32_t id, const std::vector<std::string>& argv,
                            const std::map<std::string, std::string>& env,
                            const std::vector<int>& fds) {
  std::string packet(sizeof(ip::Header) + sizeof(ip::ExecParams), '\0');
  ip::Header h{ip::kExec, id, static_cast<int32_t>(argv.size()), static_cast<int32_t>(env.size())};
  ip::ExecParams params{uid_, gid_, nofile_, nproc_};
  std::memcpy(packet.data(), &h, sizeof h);
  std::memcpy(packet.data() + sizeof h, &params, sizeof params);
  for (const auto& a : argv) packet.append(a).push_back('\0');
  for (const auto& [k, v] : env) packet.append(k).append("=").append(v).push_back('\0');
  if (packet.size() > ip::kMaxPacket) {
    explicit_bzero(packet.data(), packet.size());
    return InvalidArgument(fmt::format("command and environment too large ({} bytes, max {})",
                                       packet.size(), ip::kMaxPacket));
  }
  char cbuf[CMSG_SPACE(sizeof(int) * 4)] = {};
  struct iovec iov = {packet.data(), packet.size()};
  struct msghdr m {};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = cbuf;
  m.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
  struct cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  ssize_t sent = sendmsg(ctl_.get(), &m, MSG_NOSIGNAL);
  int err = errno;
  // LC-8: the packet may carry secrets: zero it once sent.
  explicit_bzero(packet.data(), packet.size());
  if (sent < 0) {
    broken_ = true;
    return Status(Code::kToolError, fmt::format("sandbox init is gone: {}", std::strerror(err)));
  }
  return Status::Ok();
}

std::string ShellQuote(const std::string& v) {
  std::string q = "'";
  for (char c : v) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  return q + "'";
}

Entrypoint Entrypoint::Shell() { return {{"/bin/sh", "-c"}, {"/bin/sh", "-c", kPrelude}}; }

void InitClient::set_entrypoint(Entrypoint e) {
  if (e == entrypoint_) return;
  entrypoint_ = std::move(e);
  if (pre_ || server_) {
    DropPrespawned();  // it is the old entrypoint
    Prespawn();
  }
}

void InitClient::EnablePrespawn(int64_t nofile) {
  prespawn_ = true;
  nofile_ = nofile;
  Prespawn();
}

void InitClient::set_nofile(int64_t nofile) {
  if (nofile == nofile_) return;
  nofile_ = nofile;
  if (pre_ || server_) {
    DropPrespawned();  // it has the old RLIMIT_NOFILE
    Prespawn();
  }
}

void InitClient::set_nproc(int64_t nproc) {
  if (nproc == nproc_) return;
  nproc_ = nproc;
  if (pre_ || server_) {
    DropPrespawned();  // it has the old RLIMIT_NPROC
    Prespawn();
  }
}

// Its script pipe (the serving host: its socket) closes: EOF, it exits.
void InitClient::DropPrespawned() {
  pre_.reset();
  server_.reset();
}

void InitClient::WaitPrespawned(double timeout_s) {
  while (valid() && server_ && !server_->started && !server_->dead) {
    ip::Header h{};
    if (!Next(static_cast<int>(timeout_s * 1000), &h)) return;
    Dispatch(h);
  }
  if (!valid() || !pre_) return;
  // Its answer may already be in the inbox.
  for (auto it = inbox_.begin(); it != inbox_.end() && pre_ && !pre_->started;) {
    if (it->id == pre_->id) {
      Dispatch(*it);
      it = inbox_.erase(it);
    } else {
      ++it;
    }
  }
  while (pre_ && !pre_->started && !pre_->dead) {
    ip::Header h{};
    if (!RecvPacket(ctl_.get(), static_cast<int>(timeout_s * 1000), &h, nullptr)) return;
    if (h.id == pre_->id) {
      Dispatch(h);
    } else {
      inbox_.push_back(h);  // another command's message: Start/ExitSource read the inbox first
    }
  }
}

Status InitClient::DropPrespawnedAndWait(double timeout_s) {
  if (server_) {
    const uint32_t id = server_->id;
    server_->sock.Reset();  // EOF: it exits
    while (!server_->dead) {
      ip::Header h{};
      if (!Next(static_cast<int>(timeout_s * 1000), &h)) {
        broken_ = true;
        return Status(Code::kToolError, "the serving host did not exit");
      }
      if (h.id == id) Dispatch(h);
    }
    server_.reset();
  }
  if (!pre_) return Status::Ok();
  const uint32_t id = pre_->id;
  bool started = pre_->started, dead = pre_->dead;
  // Its kStarted may still be on the way: a kExited for it can only follow that.
  while (!started && !dead) {
    ip::Header h{};
    if (!Next(static_cast<int>(timeout_s * 1000), &h)) {
      broken_ = true;
      return Status(Code::kToolError, "sandbox init did not start the pre-spawned shell");
    }
    if (h.id == id && h.type == ip::kStarted) {
      started = true;
      dead = h.b != 0;
    } else if (h.id == id && h.type == ip::kExited) {
      dead = true;
    }
  }
  pre_.reset();
  while (!dead) {
    ip::Header h{};
    if (!Next(static_cast<int>(timeout_s * 1000), &h)) {
      broken_ = true;
      return Status(Code::kToolError, "the pre-spawned shell did not exit");
    }
    if (h.id == id && h.type == ip::kExited) dead = true;
  }
  return Status::Ok();
}

// Forks and execs the next command's shell ahead of time; it blocks reading fd 3. Nothing waits
// for the agent's answer here: it is picked up by the next Start (or Dispatch) from the inbox.
void InitClient::Prespawn() {
  if (!prespawn_ || !valid()) return;
  if (!entrypoint_.serving.empty()) {
    if (!serving_alive()) SpawnServer();
    return;
  }
  if (pre_) return;
  auto in = MakePipe();
  auto out = MakePipe();
  auto err = MakePipe();
  auto script = MakePipe();
  if (!in.ok() || !out.ok() || !err.ok() || !script.ok()) return;
  uint32_t id = next_id_++;
  if (!SendExec(id, entrypoint_.waiting, AgentBaseEnv(),
                {in->r.get(), out->w.get(), err->w.get(), script->r.get()})
           .ok()) {
    return;
  }
  pre_.emplace();
  pre_->id = id;
  pre_->script_w = std::move(script->w);
  pre_->in_w = std::move(in->w);
  pre_->out_r = std::move(out->r);
  pre_->err_r = std::move(err->r);
}

// Starts the serving host: its socket is its fd 3 (and, until its first command, 0-2 too: it
// closes every descriptor but the socket). Nothing waits for the agent's answer here.
void InitClient::SpawnServer() {
  server_.reset();
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return;
  host::UniqueFd mine(sv[0]), theirs(sv[1]);
  uint32_t id = next_id_++;
  if (!SendExec(id, entrypoint_.serving, AgentBaseEnv(),
                {theirs.get(), theirs.get(), theirs.get(), theirs.get()})
           .ok()) {
    return;
  }
  server_.emplace();
  server_->id = id;
  server_->sock = std::move(mine);
}

WatchSource InitClient::ServedSource(bool* exited, int* wait_status) {
  return {server_ ? server_->sock.get() : -1, POLLIN,
          [this, exited, wait_status](short revents) -> Status {
            if (!server_) return Status::Ok();
            int32_t answer[2] = {0, 0};
            ssize_t n = (revents & (POLLIN | POLLHUP | POLLERR))
                            ? recv(server_->sock.get(), answer, sizeof answer, MSG_DONTWAIT)
                            : -1;
            if (n == static_cast<ssize_t>(sizeof answer) && answer[1] >= 0 && answer[1] < 256) {
              *exited = true;
              *wait_status = answer[0] ? (answer[1] & 0x7f) : (answer[1] << 8);
            } else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) ||
                       (n > 0 && n != static_cast<ssize_t>(sizeof answer))) {
              // Gone (or not speaking the protocol): its kExited says how it ended.
              server_->dead = true;
              server_->sock.Reset();
            }
            return Status::Ok();
          }};
}

StatusOr<InitClient::Started> InitClient::Start(const ExecSpec& exec,
                                                std::map<std::string, std::string> env) {
  auto zero_env = [&] {
    for (auto& [k, v] : env) explicit_bzero(v.data(), v.size());
  };
  if (!valid()) {
    zero_env();
    return Status(Code::kToolError, "sandbox init is gone");
  }
  Started s;
  bool use_pre =
      pre_ && exec.argv.empty() && exec.stdin_data.empty() &&
      std::all_of(env.begin(), env.end(), [](const auto& kv) { return ShellIdentifier(kv.first); });
  while (use_pre && !pre_->started && !pre_->dead) {
    ip::Header h{};
    if (!Next(10000, &h)) {
      broken_ = true;
      zero_env();
      return Status(Code::kToolError, "sandbox init did not start the pre-spawned shell");
    }
    Dispatch(h);
  }
  if (pre_ && pre_->dead) pre_.reset();
  use_pre = use_pre && pre_;

  // The serving host takes the same commands a pre-spawned process would.
  bool use_server =
      serving_alive() && exec.argv.empty() && exec.stdin_data.empty() &&
      std::all_of(env.begin(), env.end(), [](const auto& kv) { return ShellIdentifier(kv.first); });
  while (use_server && !server_->started && !server_->dead) {
    ip::Header h{};
    if (!Next(10000, &h)) {
      broken_ = true;
      zero_env();
      return Status(Code::kToolError, "sandbox init did not start the serving host");
    }
    Dispatch(h);
  }
  if (use_server && server_->dead) use_server = false;  // the one-shot path below
  if (use_server) {
    std::string script;
    const auto& base = AgentBaseEnv();
    for (const auto& [k, v] : env) {
      auto b = base.find(k);
      if (b == base.end() || b->second != v) script += "export " + k + "=" + ShellQuote(v) + "\n";
    }
    script += exec.command;
    if (script.size() > ip::kMaxPacket) {
      zero_env();
      explicit_bzero(script.data(), script.size());
      return InvalidArgument(fmt::format("command and environment too large ({} bytes, max {})",
                                         script.size(), ip::kMaxPacket));
    }
    auto in = MakePipe();
    auto out = MakePipe();
    auto err = MakePipe();
    if (!in.ok() || !out.ok() || !err.ok()) {
      zero_env();
      explicit_bzero(script.data(), script.size());
      return ErrnoStatus("pipe");
    }
    int fds[3] = {in->r.get(), out->w.get(), err->w.get()};
    char cbuf[CMSG_SPACE(sizeof fds)] = {};
    struct iovec iov = {script.data(), script.size()};
    struct msghdr m {};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = cbuf;
    m.msg_controllen = sizeof cbuf;
    struct cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof fds);
    std::memcpy(CMSG_DATA(c), fds, sizeof fds);
    ssize_t sent = sendmsg(server_->sock.get(), &m, MSG_NOSIGNAL);
    explicit_bzero(script.data(), script.size());  // LC-8: it may carry secrets
    if (sent == static_cast<ssize_t>(script.size())) {
      zero_env();
      s.id = server_->id;
      s.served = true;
      s.pipes = {std::move(in->w), std::move(out->r), std::move(err->r)};
      return s;
    }
    // It died before its kExited reached us: the command runs as a process of its own (the
    // next Prespawn starts a new host).
    server_->dead = true;
  }

  if (use_pre) {
    // The shell is already running: hand it its script (environment first) and let it go.
    std::string script;
    const auto& base = AgentBaseEnv();
    for (const auto& [k, v] : env) {
      auto b = base.find(k);
      if (b == base.end() || b->second != v) script += "export " + k + "=" + ShellQuote(v) + "\n";
    }
    script += exec.command;
    const char* p = script.data();
    size_t left = script.size();
    while (left > 0) {
      ssize_t n = write(pre_->script_w.get(), p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      p += n;
      left -= static_cast<size_t>(n);
    }
    explicit_bzero(script.data(), script.size());
    zero_env();
    s.id = pre_->id;
    s.pipes = {std::move(pre_->in_w), std::move(pre_->out_r), std::move(pre_->err_r)};
    pre_.reset();
    return s;
  }

  std::vector<std::string> argv = exec.argv;
  if (argv.empty()) {
    argv = entrypoint_.run;
    argv.push_back(exec.command);
  }
  auto in = MakePipe();
  auto out = MakePipe();
  auto err = MakePipe();
  if (!in.ok() || !out.ok() || !err.ok()) {
    zero_env();
    return ErrnoStatus("pipe");
  }
  s.id = next_id_++;
  Status sent = SendExec(s.id, argv, env, {in->r.get(), out->w.get(), err->w.get()});
  zero_env();
  RETURN_IF_ERROR(sent);
  in->r.Reset();
  out->w.Reset();
  err->w.Reset();
  ip::Header started{};
  for (;;) {
    if (!Next(10000, &started)) {
      broken_ = true;
      return Status(Code::kToolError, "sandbox init did not start the command");
    }
    if (started.id == s.id && started.type == ip::kStarted) break;
    Dispatch(started);
  }
  if (started.b != 0) {
    s.exec_errno = started.b;
    return s;
  }
  s.pipes = {std::move(in->w), std::move(out->r), std::move(err->r)};
  return s;
}

WatchSource InitClient::ExitSource(uint32_t id, bool* exited, int* wait_status) {
  return {ctl_.get(), POLLIN, [this, id, exited, wait_status](short revents) -> Status {
            if (revents & POLLIN) {
              ip::Header eh{};
              if (!Next(0, &eh)) {
                broken_ = true;
                return Status(Code::kToolError, "sandbox init exited during the command");
              }
              if (eh.type == ip::kExited && eh.id == id) {
                *exited = true;
                *wait_status = eh.a;
                // The serving host's own exit may come before its socket's EOF is read.
                if (server_ && server_->id == id) server_->dead = true;
              } else {
                Dispatch(eh);
              }
            } else if (revents & (POLLHUP | POLLERR)) {
              broken_ = true;
              return Status(Code::kToolError, "sandbox init exited during the command");
            }
            return Status::Ok();
          }};
}

void InitClient::SignalAll(int sig) {
  if (!ctl_.valid()) return;
  ip::Header h{ip::kSignalAll, 0, sig, 0};
  send(ctl_.get(), &h, sizeof h, MSG_NOSIGNAL);
}

Status InitClient::Reset() {
  if (!valid()) return FailedPrecondition("sandbox init is gone");
  pre_.reset();
  server_.reset();
  ip::Header h{ip::kReset, next_id_++, 0, 0};
  if (send(ctl_.get(), &h, sizeof h, MSG_NOSIGNAL) < 0) {
    broken_ = true;
    return ErrnoStatus("reset");
  }
  for (;;) {
    ip::Header reply{};
    if (!Next(10000, &reply)) {
      broken_ = true;
      return Status(Code::kToolError, "sandbox init did not reset");
    }
    if (reply.type == ip::kResetDone && reply.id == h.id) {
      if (reply.a != 0) return ErrnoStatus("reset: emptying scratch", reply.a);
      break;
    }
  }
  inbox_.clear();  // answers about processes that no longer exist
  Prespawn();
  return Status::Ok();
}

}  // namespace sbx::backend
