// A microVM's network (docs/microvm.md "Network"; EGR-1..EGR-5 unchanged for VMs).
//
// The egress service gives every sandbox a network namespace whose `eth0` is a veth to the
// gateway and holds the sandbox's /32 address. A VM's guest must hold that address itself, so
// the namespace becomes a two-port switch: a bridge `br0` joins `eth0` and the VM's tap, and
// `eth0` gives its address up (the guest's `eth0` takes it). The gateway sees the same address
// on the same veth as for a native sandbox: its ruleset, DNS allow list and proxy apply
// unchanged, and the anti-spoofing check still holds the guest to that one address.
//
// A spare VM is started before anyone asks for it, so before its sandbox's namespace exists:
// its tap is made in the backend's HOLDING namespace (fd-held, nothing in it but lo and the
// taps of spares; no address, no route, forwarding off) and moved into the sandbox's
// namespace at hand-out. A tap is not persistent: it goes when its QEMU (the last holder of
// its fd) goes, so there is nothing to remove.
//
// Thread-safety: TapHolder is thread-safe (each call uses fresh netlink sockets on its own
// thread, net::RunInNetns).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "host/fd.h"
#include "sbx/status.h"

namespace sbx::backend {

struct Tap {
  host::UniqueFd fd;  // IFF_TAP | IFF_NO_PI; QEMU's -netdev tap,fd=
  std::string name;   // in the holding namespace until Plug
};

class TapHolder {
 public:
  // A fresh network namespace held by this object only (the kernel deletes it with the fd).
  static StatusOr<std::unique_ptr<TapHolder>> Create();

  StatusOr<Tap> MakeTap();
  // Moves `tap` into `sandbox_netns_fd` and bridges it with eth0 there; on the first plug into
  // a namespace, creates br0, enslaves eth0 and removes `sandbox_address`/32 from it.
  Status Plug(const Tap& tap, int sandbox_netns_fd, const std::string& sandbox_address);
  int netns_fd() const { return netns_.get(); }

 private:
  explicit TapHolder(host::UniqueFd netns) : netns_(std::move(netns)) {}
  host::UniqueFd netns_;
  std::atomic<uint32_t> next_{0};
};

}  // namespace sbx::backend
