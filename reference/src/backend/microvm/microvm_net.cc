#include "backend/microvm/microvm_net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sys/ioctl.h>

#include <cstring>
#include <thread>

#include "net/netns.h"
#include "net/rtnl.h"

namespace sbx::backend {

StatusOr<std::unique_ptr<TapHolder>> TapHolder::Create() {
  StatusOr<host::UniqueFd> ns = Status(Code::kInternal, "holding namespace not made");
  // A thread of its own enters the new namespace and ends: only the fd holds it.
  std::thread t([&] { ns = net::UnshareNetnsOnThisThread(); });
  t.join();
  if (!ns.ok()) return ns.status().WithContext("microVM tap holding namespace");
  return std::unique_ptr<TapHolder>(new TapHolder(std::move(ns).value()));
}

StatusOr<Tap> TapHolder::MakeTap() {
  Tap tap;
  tap.name = fmt::format("vmtap{}", next_.fetch_add(1));
  RETURN_IF_ERROR(net::RunInNetns(netns_.get(), [&]() -> Status {
    // TUNSETIFF creates the device in the calling thread's namespace: the holding one.
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("open /dev/net/tun");
    tap.fd.Reset(fd);
    ifreq ifr{};
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    std::strncpy(ifr.ifr_name, tap.name.c_str(), IFNAMSIZ - 1);
    if (ioctl(fd, TUNSETIFF, &ifr) != 0) return ErrnoStatus("TUNSETIFF " + tap.name);
    return Status::Ok();
  }));
  return tap;
}

Status TapHolder::Plug(const Tap& tap, int sandbox_netns_fd, const std::string& sandbox_address) {
  in_addr addr{};
  if (inet_pton(AF_INET, sandbox_address.c_str(), &addr) != 1)
    return InvalidArgument("sandbox address '" + sandbox_address + "'");
  RETURN_IF_ERROR(net::RunInNetns(netns_.get(), [&]() -> Status {
                    ASSIGN_OR_RETURN(auto rt, net::Rtnl::Open());
                    ASSIGN_OR_RETURN(int idx, rt->LinkIndex(tap.name));
                    return rt->MoveToNetns(idx, sandbox_netns_fd);
                  }).WithContext("moving the VM's tap into the sandbox's namespace"));
  return net::RunInNetns(sandbox_netns_fd,
                         [&]() -> Status {
                           ASSIGN_OR_RETURN(auto rt, net::Rtnl::Open());
                           auto found = rt->LinkIndex("br0");
                           int br = found.ok() ? *found : -1;
                           if (br < 0) {
                             RETURN_IF_ERROR(rt->CreateBridge("br0"));
                             ASSIGN_OR_RETURN(br, rt->LinkIndex("br0"));
                             ASSIGN_OR_RETURN(int eth, rt->LinkIndex("eth0"));
                             // SECURITY: the namespace itself keeps no address: it must not answer
                             // for the guest's address (the bridge would reply to the gateway's ARP
                             // with its own MAC) nor originate anything; it only switches frames
                             // between the veth and the tap.
                             RETURN_IF_ERROR(rt->DeleteAddress4(eth, addr, 32));
                             RETURN_IF_ERROR(rt->SetMaster(eth, br));
                             RETURN_IF_ERROR(rt->SetLinkUp(br));
                           }
                           ASSIGN_OR_RETURN(int t, rt->LinkIndex(tap.name));
                           RETURN_IF_ERROR(rt->SetMaster(t, br));
                           return rt->SetLinkUp(t);
                         })
      .WithContext("bridging the VM's tap in the sandbox's namespace");
}

}  // namespace sbx::backend
