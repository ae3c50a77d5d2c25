#include "net/rtnl.h"

#include <fmt/format.h>
#include <libmnl/libmnl.h>
#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>

#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

namespace sbx::net {
namespace {

// Big enough for our requests and for one datagram of a link dump.
constexpr size_t kBufSize = 32 * 1024;

}  // namespace

StatusOr<std::unique_ptr<Rtnl>> Rtnl::Open() {
  mnl_socket* s = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
  if (!s) return ErrnoStatus("netlink socket");
  if (mnl_socket_bind(s, 0, MNL_SOCKET_AUTOPID) < 0) {
    Status st = ErrnoStatus("netlink bind");
    mnl_socket_close(s);
    return st;
  }
  return std::unique_ptr<Rtnl>(new Rtnl(s));
}

Rtnl::Rtnl(mnl_socket* s)
    : sock_(s), portid_(mnl_socket_get_portid(s)), seq_(static_cast<unsigned>(time(nullptr))) {}

Rtnl::~Rtnl() { mnl_socket_close(sock_); }

Status Rtnl::Send(nlmsghdr* nlh, const char* what) {
  std::vector<char> junk(kBufSize);
  while (recv(mnl_socket_get_fd(sock_), junk.data(), junk.size(), MSG_DONTWAIT) >= 0) {
  }
  if (mnl_socket_sendto(sock_, nlh, nlh->nlmsg_len) < 0) return ErrnoStatus(what);
  return Status::Ok();
}

Status Rtnl::Transact(char* buf, const char* what) {
  auto* nlh = reinterpret_cast<nlmsghdr*>(buf);
  nlh->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
  nlh->nlmsg_seq = ++seq_;
  RETURN_IF_ERROR(Send(nlh, what));
  std::vector<char> rbuf(kBufSize);
  while (true) {
    ssize_t n = mnl_socket_recvfrom(sock_, rbuf.data(), rbuf.size());
    if (n < 0) return ErrnoStatus(what);
    int rc = mnl_cb_run(rbuf.data(), static_cast<size_t>(n), seq_, portid_, nullptr, nullptr);
    if (rc == MNL_CB_ERROR) return ErrnoStatus(what);
    if (rc == MNL_CB_STOP) return Status::Ok();
    // An ACK is an NLMSG_ERROR with error 0, which mnl_cb_run reports as STOP.
  }
}

Status Rtnl::CreateVeth(const std::string& name, const std::string& peer_name, int peer_netns_fd) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
  nlh->nlmsg_type = RTM_NEWLINK;
  nlh->nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
  auto* ifm = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifm->ifi_family = AF_UNSPEC;
  mnl_attr_put_strz(nlh, IFLA_IFNAME, name.c_str());
  nlattr* linkinfo = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
  mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "veth");
  nlattr* data = mnl_attr_nest_start(nlh, IFLA_INFO_DATA);
  nlattr* peer = mnl_attr_nest_start(nlh, VETH_INFO_PEER);
  auto* pifm = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  pifm->ifi_family = AF_UNSPEC;
  mnl_attr_put_strz(nlh, IFLA_IFNAME, peer_name.c_str());
  // SECURITY: the peer is created directly inside the other project-owned namespace; no end
  // of the pair ever exists in the root namespace.
  mnl_attr_put_u32(nlh, IFLA_NET_NS_FD, static_cast<uint32_t>(peer_netns_fd));
  mnl_attr_nest_end(nlh, peer);
  mnl_attr_nest_end(nlh, data);
  mnl_attr_nest_end(nlh, linkinfo);
  return Transact(buf.data(), "RTM_NEWLINK veth");
}

StatusOr<int> Rtnl::LinkIndex(const std::string& name) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
  nlh->nlmsg_type = RTM_GETLINK;
  nlh->nlmsg_flags = NLM_F_REQUEST;
  nlh->nlmsg_seq = ++seq_;
  auto* ifm = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifm->ifi_family = AF_UNSPEC;
  mnl_attr_put_strz(nlh, IFLA_IFNAME, name.c_str());
  mnl_attr_put_u32(nlh, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);
  RETURN_IF_ERROR(Send(nlh, "RTM_GETLINK"));
  std::vector<char> rbuf(kBufSize);
  ssize_t n = mnl_socket_recvfrom(sock_, rbuf.data(), rbuf.size());
  if (n < 0) return ErrnoStatus("RTM_GETLINK");
  int index = 0;
  int rc = mnl_cb_run(
      rbuf.data(), static_cast<size_t>(n), seq_, portid_,
      [](const nlmsghdr* h, void* arg) -> int {
        if (h->nlmsg_type == RTM_NEWLINK) {
          *static_cast<int*>(arg) =
              static_cast<const ifinfomsg*>(mnl_nlmsg_get_payload(h))->ifi_index;
        }
        return MNL_CB_OK;
      },
      &index);
  if (rc == MNL_CB_ERROR) return ErrnoStatus(fmt::format("RTM_GETLINK {}", name));
  if (index <= 0) return NotFound(fmt::format("link {} not found", name));
  return index;
}

StatusOr<int> Rtnl::OperState(int ifindex) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
  nlh->nlmsg_type = RTM_GETLINK;
  nlh->nlmsg_flags = NLM_F_REQUEST;
  nlh->nlmsg_seq = ++seq_;
  auto* ifm = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifm->ifi_family = AF_UNSPEC;
  ifm->ifi_index = ifindex;
  mnl_attr_put_u32(nlh, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);
  RETURN_IF_ERROR(Send(nlh, "RTM_GETLINK"));
  std::vector<char> rbuf(kBufSize);
  ssize_t n = mnl_socket_recvfrom(sock_, rbuf.data(), rbuf.size());
  if (n < 0) return ErrnoStatus("RTM_GETLINK");
  int state = -1;
  int rc = mnl_cb_run(
      rbuf.data(), static_cast<size_t>(n), seq_, portid_,
      [](const nlmsghdr* h, void* arg) -> int {
        if (h->nlmsg_type != RTM_NEWLINK) return MNL_CB_OK;
        return mnl_attr_parse(
            h, sizeof(ifinfomsg),
            [](const nlattr* attr, void* data) -> int {
              if (mnl_attr_get_type(attr) == IFLA_OPERSTATE &&
                  mnl_attr_validate(attr, MNL_TYPE_U8) >= 0) {
                *static_cast<int*>(data) = mnl_attr_get_u8(attr);
              }
              return MNL_CB_OK;
            },
            arg);
      },
      &state);
  if (rc == MNL_CB_ERROR) return ErrnoStatus(fmt::format("RTM_GETLINK {}", ifindex));
  if (state < 0) return NotFound(fmt::format("link {}: no operstate", ifindex));
  return state;
}

Status Rtnl::SetLinkUp(int ifindex) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
  nlh->nlmsg_type = RTM_NEWLINK;
  nlh->nlmsg_flags = 0;
  auto* ifm = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifm->ifi_family = AF_UNSPEC;
  ifm->ifi_index = ifindex;
  ifm->ifi_flags = IFF_UP;
  ifm->ifi_change = IFF_UP;
  return Transact(buf.data(), "RTM_NEWLINK up");
}

Status Rtnl::AddAddress4(int ifindex, in_addr addr, int prefix_len) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
  nlh->nlmsg_type = RTM_NEWADDR;
  nlh->nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
  auto* ifa = static_cast<ifaddrmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifaddrmsg)));
  ifa->ifa_family = AF_INET;
  ifa->ifa_prefixlen = static_cast<unsigned char>(prefix_len);
  ifa->ifa_scope = RT_SCOPE_UNIVERSE;
  ifa->ifa_index = static_cast<unsigned>(ifindex);
  mnl_attr_put(nlh, IFA_LOCAL, sizeof(addr), &addr);
  mnl_attr_put(nlh, IFA_ADDRESS, sizeof(addr), &addr);
  return Transact(buf.data(), "RTM_NEWADDR");
}

namespace {
// An RTM_NEWLINK that changes an existing link: header with the index, attributes by `fill`.
template <typename Fill>
void PutLinkChange(std::vector<char>& buf, int ifindex, Fill fill) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
  nlh->nlmsg_type = RTM_NEWLINK;
  nlh->nlmsg_flags = 0;
  auto* ifm = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifm->ifi_family = AF_UNSPEC;
  ifm->ifi_index = ifindex;
  fill(nlh);
}
}  // namespace

Status Rtnl::CreateBridge(const std::string& name) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
  nlh->nlmsg_type = RTM_NEWLINK;
  nlh->nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
  auto* ifm = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifm->ifi_family = AF_UNSPEC;
  mnl_attr_put_strz(nlh, IFLA_IFNAME, name.c_str());
  nlattr* linkinfo = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
  mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "bridge");
  mnl_attr_nest_end(nlh, linkinfo);
  return Transact(buf.data(), "RTM_NEWLINK bridge");
}

Status Rtnl::SetMaster(int ifindex, int master_index) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  PutLinkChange(buf, ifindex, [&](nlmsghdr* nlh) {
    mnl_attr_put_u32(nlh, IFLA_MASTER, static_cast<uint32_t>(master_index));
  });
  return Transact(buf.data(), "RTM_NEWLINK master");
}

Status Rtnl::MoveToNetns(int ifindex, int netns_fd) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  PutLinkChange(buf, ifindex, [&](nlmsghdr* nlh) {
    mnl_attr_put_u32(nlh, IFLA_NET_NS_FD, static_cast<uint32_t>(netns_fd));
  });
  return Transact(buf.data(), "RTM_NEWLINK netns");
}

Status Rtnl::DeleteAddress4(int ifindex, in_addr addr, int prefix_len) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
  nlh->nlmsg_type = RTM_DELADDR;
  nlh->nlmsg_flags = 0;
  auto* ifa = static_cast<ifaddrmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifaddrmsg)));
  ifa->ifa_family = AF_INET;
  ifa->ifa_prefixlen = static_cast<unsigned char>(prefix_len);
  ifa->ifa_index = static_cast<unsigned>(ifindex);
  mnl_attr_put(nlh, IFA_LOCAL, sizeof(addr), &addr);
  return Transact(buf.data(), "RTM_DELADDR");
}

Status Rtnl::AddRoute4(in_addr dst, int prefix_len, int oif, std::optional<in_addr> gateway,
                       bool replace) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
  nlh->nlmsg_type = RTM_NEWROUTE;
  nlh->nlmsg_flags = NLM_F_CREATE | (replace ? NLM_F_REPLACE : NLM_F_EXCL);
  auto* rtm = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(rtmsg)));
  rtm->rtm_family = AF_INET;
  rtm->rtm_dst_len = static_cast<unsigned char>(prefix_len);
  rtm->rtm_table = RT_TABLE_MAIN;
  rtm->rtm_protocol = RTPROT_STATIC;
  rtm->rtm_type = RTN_UNICAST;
  rtm->rtm_scope = gateway ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK;
  if (gateway) rtm->rtm_flags = RTNH_F_ONLINK;
  if (prefix_len > 0) mnl_attr_put(nlh, RTA_DST, sizeof(dst), &dst);
  mnl_attr_put_u32(nlh, RTA_OIF, static_cast<uint32_t>(oif));
  if (gateway) mnl_attr_put(nlh, RTA_GATEWAY, sizeof(*gateway), &*gateway);
  return Transact(buf.data(), "RTM_NEWROUTE");
}

StatusOr<std::vector<LinkInfo>> Rtnl::ListLinks(bool with_stats) {
  // A dump that links changed under (a sandbox namespace created or deleted meanwhile) ends
  // with NLM_F_DUMP_INTR (EINTR): its result is not consistent, so dump again.
  for (int attempt = 1;; ++attempt) {
    bool interrupted = false;
    StatusOr<std::vector<LinkInfo>> links = ListLinksOnce(with_stats, &interrupted);
    if (links.ok() || !interrupted || attempt == 5) return links;
  }
}

StatusOr<std::vector<LinkInfo>> Rtnl::ListLinksOnce(bool with_stats, bool* interrupted) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
  nlh->nlmsg_type = RTM_GETLINK;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  nlh->nlmsg_seq = ++seq_;
  auto* ifm = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifm->ifi_family = AF_UNSPEC;
  if (!with_stats) mnl_attr_put_u32(nlh, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);
  RETURN_IF_ERROR(Send(nlh, "RTM_GETLINK dump"));

  std::vector<LinkInfo> links;
  auto on_link = [](const nlmsghdr* h, void* arg) -> int {
    auto* out = static_cast<std::vector<LinkInfo>*>(arg);
    const auto* ifi = static_cast<const ifinfomsg*>(mnl_nlmsg_get_payload(h));
    LinkInfo li;
    li.index = ifi->ifi_index;
    li.up = (ifi->ifi_flags & IFF_UP) != 0;
    mnl_attr_parse(
        h, sizeof(*ifi),
        [](const nlattr* attr, void* data) -> int {
          auto* l = static_cast<LinkInfo*>(data);
          if (mnl_attr_get_type(attr) == IFLA_IFNAME &&
              mnl_attr_validate(attr, MNL_TYPE_STRING) >= 0) {
            l->name = mnl_attr_get_str(attr);
          } else if (mnl_attr_get_type(attr) == IFLA_OPERSTATE &&
                     mnl_attr_validate(attr, MNL_TYPE_U8) >= 0) {
            l->operstate = mnl_attr_get_u8(attr);
          } else if (mnl_attr_get_type(attr) == IFLA_STATS64 &&
                     mnl_attr_get_payload_len(attr) >= sizeof(rtnl_link_stats64)) {
            rtnl_link_stats64 st;
            memcpy(&st, mnl_attr_get_payload(attr), sizeof(st));
            l->tx_dropped = st.tx_dropped;
          } else if (mnl_attr_get_type(attr) == IFLA_LINKINFO &&
                     mnl_attr_validate(attr, MNL_TYPE_NESTED) >= 0) {
            mnl_attr_parse_nested(
                attr,
                [](const nlattr* nested, void* d) -> int {
                  if (mnl_attr_get_type(nested) == IFLA_INFO_KIND &&
                      mnl_attr_validate(nested, MNL_TYPE_STRING) >= 0) {
                    static_cast<LinkInfo*>(d)->kind = mnl_attr_get_str(nested);
                  }
                  return MNL_CB_OK;
                },
                l);
          }
          return MNL_CB_OK;
        },
        &li);
    out->push_back(std::move(li));
    return MNL_CB_OK;
  };
  std::vector<char> rbuf(kBufSize);
  while (true) {
    ssize_t n = mnl_socket_recvfrom(sock_, rbuf.data(), rbuf.size());
    if (n < 0) return ErrnoStatus("RTM_GETLINK dump");
    int rc = mnl_cb_run(rbuf.data(), static_cast<size_t>(n), seq_, portid_, on_link, &links);
    if (rc == MNL_CB_ERROR) {
      *interrupted = errno == EINTR;  // NLM_F_DUMP_INTR; the rest is discarded by Send()
      return ErrnoStatus("RTM_GETLINK dump");
    }
    if (rc == MNL_CB_STOP) break;
  }
  return links;
}

}  // namespace sbx::net
