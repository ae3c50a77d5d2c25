// Network namespaces held only by file descriptors (no /run/netns bind mounts): when the runtime
// dies, the kernel drops every namespace with the last fd or process, so nothing is left behind.
//
// Namespace membership is per thread. Code here never moves a thread it does not own: the
// functions that change the calling thread's namespace say so, and RunInNetns uses a fresh
// thread that dies afterwards.
#pragma once

#include <functional>
#include <string>

#include "host/fd.h"
#include "sbx/status.h"

namespace sbx::net {

// Moves the CALLING THREAD into a new, empty network namespace (only a down `lo`) and returns
// an fd that holds it. Call only on a thread dedicated to this (see NetnsPool, Start).
StatusOr<host::UniqueFd> UnshareNetnsOnThisThread();

// An fd of the calling thread's current network namespace.
StatusOr<host::UniqueFd> OpenThreadNetns();

// An fd of the process's network namespace (the main thread's: "the runtime's own").
StatusOr<host::UniqueFd> OpenProcessNetns();

// Runs `fn` on a new thread that first joins `netns_fd`; the thread ends with `fn`. Sockets
// `fn` creates stay in that namespace after the thread is gone.
Status RunInNetns(int netns_fd, const std::function<Status()>& fn);

// Writes a /proc/sys value for the CALLING THREAD's network namespace (e.g.
// "net/ipv4/ip_forward"): /proc/sys/net resolves against the opener's namespace.
Status WriteNetSysctl(const std::string& key, const std::string& value);
StatusOr<std::string> ReadNetSysctl(const std::string& key);

// Inode of a namespace fd (identity for tests and logs).
StatusOr<uint64_t> NetnsInode(int netns_fd);

}  // namespace sbx::net
