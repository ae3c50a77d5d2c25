// Route netlink (libmnl) for the few link, address and route operations the egress plumbing
// needs, in process: `ip` costs a fork+exec (~6 ms here) per call; a netlink round trip costs
// microseconds.
//
// A netlink socket acts on the network namespace it was created in, whatever thread uses it
// later. Thread-safety: one Rtnl per thread at a time (callers serialise).
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sbx/status.h"

struct mnl_socket;
struct nlmsghdr;

namespace sbx::net {

struct LinkInfo {
  int index = 0;
  std::string name;
  std::string kind;  // IFLA_INFO_KIND ("veth"), "" for devices without one (lo)
  bool up = false;
  int operstate = 0;  // IFLA_OPERSTATE (6 = IF_OPER_UP), set by the kernel's link watch
  uint64_t tx_dropped = 0;
};

class Rtnl {
 public:
  // A route netlink socket in the CALLING THREAD's current network namespace.
  static StatusOr<std::unique_ptr<Rtnl>> Open();
  ~Rtnl();
  Rtnl(const Rtnl&) = delete;
  Rtnl& operator=(const Rtnl&) = delete;

  // Creates a veth pair: `name` here, `peer_name` in the namespace of `peer_netns_fd`.
  Status CreateVeth(const std::string& name, const std::string& peer_name, int peer_netns_fd);
  StatusOr<int> LinkIndex(const std::string& name);
  // IFLA_OPERSTATE of a link (IF_OPER_UP = 6 once the kernel's link watch activated it).
  StatusOr<int> OperState(int ifindex);
  Status SetLinkUp(int ifindex);
  // `addr` in network byte order, e.g. 10.201.0.7/32.
  Status AddAddress4(int ifindex, in_addr addr, int prefix_len);
  // A route to dst/prefix out of `oif`: link scope when no gateway, else via `gateway` with
  // RTNH_F_ONLINK. `replace` overwrites an existing route to the same prefix.
  Status AddRoute4(in_addr dst, int prefix_len, int oif, std::optional<in_addr> gateway,
                   bool replace);
  StatusOr<std::vector<LinkInfo>> ListLinks(bool with_stats = false);

  // For a microVM's network (backend/microvm_net.h): a bridge in a sandbox's namespace joins
  // the veth to the gateway and the VM's tap (L2: the guest itself holds the sandbox's address).
  Status CreateBridge(const std::string& name);
  // IFLA_MASTER: enslaves `ifindex` to the bridge `master_index`.
  Status SetMaster(int ifindex, int master_index);
  Status DeleteAddress4(int ifindex, in_addr addr, int prefix_len);
  // Moves a link of this socket's namespace into the namespace of `netns_fd` (IFLA_NET_NS_FD).
  Status MoveToNetns(int ifindex, int netns_fd);

 private:
  explicit Rtnl(mnl_socket* s);
  // Sends one request (nlmsghdr in buf) and waits for its ACK; the kernel's error as a Status.
  Status Transact(char* buf, const char* what);
  // Sends one request after discarding whatever an earlier exchange left unread (the rest of
  // a dump that ended in an error, e.g. NLM_F_DUMP_INTR): a stale reply would otherwise be
  // taken for the answer to this request (mnl_cb_run: EPROTO, sequence mismatch).
  Status Send(nlmsghdr* nlh, const char* what);
  StatusOr<std::vector<LinkInfo>> ListLinksOnce(bool with_stats, bool* interrupted);

  mnl_socket* sock_;
  unsigned int portid_;
  unsigned int seq_;
};

}  // namespace sbx::net
