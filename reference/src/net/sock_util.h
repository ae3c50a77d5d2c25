// Small socket helpers shared by the DNS responder and the proxy: deadline-bound reads and
// writes that also wake on the gateway's stop fd, address formatting, resets.
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "host/fd.h"
#include "sbx/status.h"

namespace sbx::net {

using Clock = std::chrono::steady_clock;

enum class IoResult { kOk, kEof, kTimeout, kStopped, kError };

// Reads at most `cap` bytes appending to `buf`; waits until `deadline` or the stop fd.
IoResult ReadSome(int fd, int stop_fd, Clock::time_point deadline, std::string* buf, size_t cap);
// Reads exactly n bytes.
IoResult ReadExact(int fd, int stop_fd, Clock::time_point deadline, size_t n, std::string* buf);
// Writes all of `data`.
IoResult WriteAll(int fd, int stop_fd, Clock::time_point deadline, std::string_view data);

// Closes with an RST (SO_LINGER 0): "refused" without a graceful end.
void ResetAndClose(host::UniqueFd fd);
// Sends FIN, drains what the peer still sends for a moment (so our last bytes are not lost to
// an RST caused by unread data), then closes.
void GracefulClose(host::UniqueFd fd, int stop_fd);

std::string Ipv4String(uint32_t addr_be);
std::string SockaddrString(const sockaddr_in& sa);

// A TCP socket bound to addr:port (network byte order addr) and listening, in the CALLING
// THREAD's namespace; a UDP socket bound likewise.
StatusOr<host::UniqueFd> ListenTcp(uint32_t addr_be, uint16_t port, int backlog);
StatusOr<host::UniqueFd> BindUdp(uint32_t addr_be, uint16_t port);

// Connects to host:port (address literal or name via getaddrinfo) within `timeout`, from the
// CALLING THREAD's namespace.
StatusOr<host::UniqueFd> ConnectTcp(const std::string& host, int port,
                                    std::chrono::milliseconds timeout, int stop_fd);

}  // namespace sbx::net
