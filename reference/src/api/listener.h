// The listening socket of sandboxd: a unix socket (default) or TCP, and its addresses.
//
// A unix socket is bound under a temporary name, chmod'ed to 0660 and only then renamed to its
// path (Publish), so it never exists with looser permissions and its appearance means "serving".
// A live socket at the path (another sandboxd answers) is kAlreadyExists; a stale one is
// replaced; any other file there is refused. The path is removed when the Listener is
// destroyed, if it is still ours (same inode).
//
// Thread-safety: a Listener is owned by one server; fd() may be read concurrently.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "host/fd.h"
#include "sbx/status.h"

namespace sbx::api {

struct ListenAddress {
  enum class Kind { kUnix, kTcp };
  Kind kind = Kind::kUnix;
  std::string path;              // kUnix: absolute
  std::string host;              // kTcp: an IPv4 or IPv6 literal (brackets removed)
  int port = 0;                  // kTcp: 0 = any free port
  std::string ToString() const;  // "unix:/path" or "127.0.0.1:8080" / "[::1]:8080"
};

// "unix:/abs/path", "/abs/path", "127.0.0.1:8080", "[::1]:8080" (host names are refused: an
// address must say exactly where it listens).
StatusOr<ListenAddress> ParseListenAddress(std::string_view text);

// 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104 (a unix socket is local too).
bool IsLoopback(const ListenAddress& address);

class Listener {
 public:
  // kAlreadyExists when the address is in use; kInvalidArgument for a non-socket file at a
  // unix path; kPermissionDenied / kInternal from the kernel otherwise.
  static StatusOr<Listener> Open(const ListenAddress& address, int backlog = 128);

  Listener(Listener&&) noexcept;
  Listener& operator=(Listener&&) noexcept;
  ~Listener();

  // Unix: renames the bound socket to its path (mode 0660). TCP: nothing.
  Status Publish();

  int fd() const { return fd_.get(); }
  // The address it really listens on (TCP port 0 resolved).
  const ListenAddress& address() const { return address_; }

 private:
  Listener() = default;
  void Cleanup();

  host::UniqueFd fd_;
  ListenAddress address_;
  std::string tmp_path_;  // unix: bound name until Publish()
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  bool published_ = false;
};

}  // namespace sbx::api
