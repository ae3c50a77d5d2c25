// Integration-test helpers for egress (header only; included by *_itest.cc): the mirror
// fixture as a child process, busybox run inside a sandbox's network namespace, and socket
// probes that a thread inside a sandbox namespace runs to try to get out.
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/ip_icmp.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "net/dns_query_testing.h"

namespace sbx::net::testing_egress {

using Clock = std::chrono::steady_clock;

inline std::string SourceRoot() {
  std::string f = __FILE__;  // .../reference/src/net/egress_testing.h
  for (int i = 0; i < 4; ++i) f = f.substr(0, f.rfind('/'));
  return f;
}

inline std::string BuildBinDir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string exe(buf, static_cast<size_t>(n));
  std::string dir = exe.substr(0, exe.rfind('/'));  // <build>/tests
  return dir.substr(0, dir.rfind('/')) + "/bin";
}

inline std::string MakeTempDir(const char* tag) {
  std::string t = std::string("/tmp/sbx-") + tag + "-XXXXXX";
  std::vector<char> buf(t.begin(), t.end());
  buf.push_back('\0');
  char* d = mkdtemp(buf.data());
  return d ? d : "";
}

inline void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

// sbx-mirror on 127.0.0.1:<free port>, serving `root`. Ends with the object.
class Mirror {
 public:
  explicit Mirror(const std::string& root) {
    std::string bin = BuildBinDir() + "/sbx-mirror";
    if (const char* env = getenv("SBX_MIRROR")) bin = env;
    int out[2], in[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(in, O_CLOEXEC) != 0) return;
    std::vector<std::string> args = {bin,      "--listen", "127.0.0.1:0",
                                     "--root", root,       "--exit-on-stdin-eof"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(in[0], 0);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    close(in[0]);
    stdin_ = in[1];
    std::string line;
    char c;
    while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
    close(out[0]);
    size_t colon = line.rfind(':');
    if (line.rfind("listening ", 0) == 0 && colon != std::string::npos) {
      port_ = std::atoi(line.c_str() + colon + 1);
    }
  }
  ~Mirror() {
    if (stdin_ >= 0) close(stdin_);
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  std::string addr_port() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int port_ = 0;
};

struct ProcResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs the host's static busybox in a child that joined `netns_fd` and sees `resolv_conf` as
// /etc/resolv.conf (private mount namespace), like a sandbox's command would.
inline ProcResult RunBusybox(int netns_fd, const std::string& resolv_conf,
                             std::vector<std::string> args, int timeout_s = 20) {
  ProcResult r;
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return r;
  args.insert(args.begin(), "/bin/busybox");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  char* envp[] = {const_cast<char*>("PATH=/bin:/usr/bin"), nullptr};
  pid_t pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec (the parent has threads).
    if (setns(netns_fd, CLONE_NEWNET) != 0) _exit(120);
    if (unshare(CLONE_NEWNS) != 0) _exit(121);
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(122);
    if (mount(resolv_conf.c_str(), "/etc/resolv.conf", nullptr, MS_BIND, nullptr) != 0) _exit(123);
    dup2(out[1], 1);
    dup2(err[1], 2);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    execve(argv[0], argv.data(), envp);
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  bool out_open = true, err_open = true;
  while (out_open || err_open) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      kill(pid, SIGKILL);
      break;
    }
    pollfd p[2] = {{out_open ? out[0] : -1, POLLIN, 0}, {err_open ? err[0] : -1, POLLIN, 0}};
    if (poll(p, 2, static_cast<int>(left)) < 0) continue;
    char buf[4096];
    for (int i = 0; i < 2; ++i) {
      if (!p[i].revents) continue;
      ssize_t n = read(i == 0 ? out[0] : err[0], buf, sizeof(buf));
      if (n <= 0) {
        (i == 0 ? out_open : err_open) = false;
      } else {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(n));
      }
    }
  }
  close(out[0]);
  close(err[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// ---- probes: call from a thread inside the sandbox's network namespace ----

struct TcpProbe {
  bool connected = false;
  int error = 0;  // errno of connect, or of the read that ended the exchange
  std::string received;
  bool eof = false;  // orderly close by the other side
  double seconds = 0;
};

inline sockaddr_in Addr(const char* ip, int port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip, &sa.sin_addr);
  return sa;
}

// Connects, sends `data`, reads until close/reset/timeout.
inline TcpProbe TcpExchange(const char* ip, int port, const std::string& data,
                            int timeout_ms = 4000) {
  TcpProbe p;
  auto start = Clock::now();
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in sa = Addr(ip, port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 && errno != EINPROGRESS) {
    p.error = errno;
  } else {
    pollfd pf{fd, POLLOUT, 0};
    if (poll(&pf, 1, timeout_ms) <= 0) {
      p.error = ETIMEDOUT;
    } else {
      int e = 0;
      socklen_t l = sizeof(e);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
      p.error = e;
      p.connected = e == 0;
    }
  }
  if (p.connected) {
    if (!data.empty()) send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd pf{fd, POLLIN, 0};
      if (left <= 0 || poll(&pf, 1, static_cast<int>(left)) <= 0) {
        p.error = ETIMEDOUT;
        break;
      }
      char buf[4096];
      ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n > 0) {
        p.received.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {
        p.eof = true;
      } else {
        p.error = errno;
      }
      break;
    }
  }
  close(fd);
  p.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return p;
}

struct UdpProbe {
  int error = 0;  // ECONNREFUSED / EHOSTUNREACH / ENETUNREACH ... or ETIMEDOUT
  std::string reply;
  double seconds = 0;
};

inline UdpProbe UdpExchange(const char* ip, int port, const std::string& data,
                            int timeout_ms = 3000) {
  UdpProbe p;
  auto start = Clock::now();
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa = Addr(ip, port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    p.error = errno;
  } else if (send(fd, data.data(), data.size(), 0) < 0) {
    p.error = errno;
  } else {
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, timeout_ms) <= 0) {
      p.error = ETIMEDOUT;
    } else {
      char buf[65536];
      ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n < 0) {
        p.error = errno;
      } else {
        p.reply.assign(buf, static_cast<size_t>(n));
      }
    }
  }
  close(fd);
  p.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return p;
}

// A DNS query over TCP (length-prefixed); returns the reply message or "" (the connection
// stays open on the server's side for more queries, so read exactly one framed message).
inline std::string DnsOverTcp(const char* ip, const std::string& query, int timeout_ms = 3000) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in sa = Addr(ip, 53);
  std::string got;
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
    std::string framed;
    framed += static_cast<char>(query.size() >> 8);
    framed += static_cast<char>(query.size() & 0xff);
    framed += query;
    send(fd, framed.data(), framed.size(), MSG_NOSIGNAL);
    char buf[4096];
    while (true) {
      if (got.size() >= 2) {
        size_t len = (static_cast<uint8_t>(got[0]) << 8) | static_cast<uint8_t>(got[1]);
        if (got.size() >= len + 2) {
          got = got.substr(2, len);
          break;
        }
      }
      ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) {
        got.clear();
        break;
      }
      got.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return got;
}

inline uint16_t Checksum(const void* data, size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < len; i += 2) sum += (p[i] << 8) | p[i + 1];
  if (len & 1) sum += p[len - 1] << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return htons(static_cast<uint16_t>(~sum));
}

// ICMP echo from a raw socket. Returns the ICMP type of the first answer about our echo
// (0 echo reply, 3 unreachable) and its code, or type -1 on timeout; -2 if no raw socket.
struct IcmpResult {
  int type = -1, code = -1;
  double seconds = 0;
};

inline IcmpResult Ping(const char* ip, int timeout_ms = 3000) {
  IcmpResult r;
  auto start = Clock::now();
  int fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP);
  if (fd < 0) {
    r.type = -2;
    return r;
  }
  icmphdr echo{};
  echo.type = ICMP_ECHO;
  echo.un.echo.id = htons(0x5b10);
  echo.un.echo.sequence = htons(1);
  echo.checksum = Checksum(&echo, sizeof(echo));
  sockaddr_in sa = Addr(ip, 0);
  sendto(fd, &echo, sizeof(echo), 0, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd pf{fd, POLLIN, 0};
    if (left <= 0 || poll(&pf, 1, static_cast<int>(left)) <= 0) break;
    char buf[1500];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < static_cast<ssize_t>(sizeof(iphdr) + sizeof(icmphdr))) continue;
    const auto* ip_h = reinterpret_cast<const iphdr*>(buf);
    const auto* ic = reinterpret_cast<const icmphdr*>(buf + ip_h->ihl * 4);
    if (ic->type == ICMP_ECHO) continue;  // our own request looped back (never here)
    r.type = ic->type;
    r.code = ic->code;
    break;
  }
  close(fd);
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

// A hand-made IPv4/UDP datagram through an IPPROTO_RAW socket (bypassing the UDP stack), then
// watch for any UDP answer or an ICMP error. Returns the ICMP type/code seen (or -1).
inline IcmpResult RawUdp(const char* src_ip, const char* dst_ip, int dst_port,
                         int timeout_ms = 3000) {
  IcmpResult r;
  auto start = Clock::now();
  int raw = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
  int icmp = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP);
  if (raw < 0 || icmp < 0) {
    r.type = -2;
    if (raw >= 0) close(raw);
    if (icmp >= 0) close(icmp);
    return r;
  }
  struct {
    iphdr ip;
    udphdr udp;
    char payload[8];
  } __attribute__((packed)) pkt{};
  std::memcpy(pkt.payload, "sbxprobe", 8);
  pkt.ip.version = 4;
  pkt.ip.ihl = 5;
  pkt.ip.ttl = 64;
  pkt.ip.protocol = IPPROTO_UDP;
  pkt.ip.tot_len = htons(sizeof(pkt));
  inet_pton(AF_INET, src_ip, &pkt.ip.saddr);
  inet_pton(AF_INET, dst_ip, &pkt.ip.daddr);
  pkt.udp.source = htons(40000);
  pkt.udp.dest = htons(static_cast<uint16_t>(dst_port));
  pkt.udp.len = htons(sizeof(udphdr) + 8);
  sockaddr_in sa = Addr(dst_ip, 0);
  sendto(raw, &pkt, sizeof(pkt), 0, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  pollfd pf{icmp, POLLIN, 0};
  if (poll(&pf, 1, timeout_ms) > 0) {
    char buf[1500];
    ssize_t n = recv(icmp, buf, sizeof(buf), 0);
    if (n >= static_cast<ssize_t>(sizeof(iphdr) + sizeof(icmphdr))) {
      const auto* ip_h = reinterpret_cast<const iphdr*>(buf);
      const auto* ic = reinterpret_cast<const icmphdr*>(buf + ip_h->ihl * 4);
      r.type = ic->type;
      r.code = ic->code;
    }
  }
  close(raw);
  close(icmp);
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

// connect() to an IPv6 literal; returns errno (0 = connected, which must never happen).
inline int Ipv6Connect(const char* ip6, int port) {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  sockaddr_in6 sa{};
  sa.sin6_family = AF_INET6;
  sa.sin6_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET6, ip6, &sa.sin6_addr);
  timeval tv{3, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  int e = rc == 0 ? 0 : errno;
  close(fd);
  return e;
}

inline std::string HttpGet(const std::string& host, const std::string& target = "/hello-1.0.txt") {
  return "GET " + target + " HTTP/1.1\r\nHost: " + host +
         "\r\nUser-Agent: probe\r\nConnection: close\r\n\r\n";
}

inline std::string StatusLine(const std::string& response) {
  return response.substr(0, response.find("\r\n"));
}

inline std::string Body(const std::string& response) {
  size_t p = response.find("\r\n\r\n");
  return p == std::string::npos ? "" : response.substr(p + 4);
}

inline int CountOpenFds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n - 3;  // ".", "..", and the DIR's own fd
}

// The process's live threads. A thread that std::thread::join has already returned for can
// still be listed in /proc/self/task for a moment (join wakes on the tid futex the kernel clears
// in do_exit, before the task is unhashed), so a bare count read right after a join is one too
// many. A thread that has begun exiting has PF_EXITING (0x4) in its stat flags from the first
// step of do_exit on: those are not counted, which makes the count exact at any instant.
inline int CountThreads() {
  constexpr unsigned long kPfExiting = 0x4;
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      // read(2), not a stream: reading the stat of a thread that is gone fails with ESRCH.
      std::string path = std::string("/proc/self/task/") + e->d_name + "/stat";
      int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;  // gone since readdir: not live
      char buf[1024];
      ssize_t len = read(fd, buf, sizeof buf - 1);
      close(fd);
      if (len <= 0) continue;
      std::string stat(buf, static_cast<size_t>(len));
      size_t paren = stat.rfind(')');
      if (paren == std::string::npos) continue;
      // After "(comm)": state ppid pgrp session tty_nr tpgid flags ...
      unsigned long flags = 0;
      char state = 0;
      if (std::sscanf(stat.c_str() + paren + 1, " %c %*d %*d %*d %*d %*d %lu", &state,
                      &flags) != 2) {
        continue;
      }
      n += (flags & kPfExiting) == 0;
    }
    closedir(d);
  }
  return n;
}

}  // namespace sbx::net::testing_egress
