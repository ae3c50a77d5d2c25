// Which kernel the harness runs on, and which namespaces it is in: the host side of the
// evidence `sbx-probe` collects inside a sandbox (its keys kernel_id and namespaces). A sandbox
// that shares the host's kernel sees the same boot_id, btime and /proc/version; one that
// shares the harness's namespaces sees the same /proc/self/ns inode numbers. The checks
// (checks/kernel_evidence.h) set one against the other: evidence a runtime cannot fake by what
// it answers, only by mounting lies over /proc inside every sandbox.
#pragma once

#include <nlohmann/json.hpp>

namespace sandcheck {

// {"boot_id": str|null, "btime": int|null, "version": str|null}, read from this host's /proc.
nlohmann::json HostKernelIdentity();

// {"pid"|"mnt"|"net"|"ipc"|"uts"|"user"|"cgroup": inode|null}: this process's namespaces.
nlohmann::json HarnessNamespaces();

}  // namespace sandcheck
