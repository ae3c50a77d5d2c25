// Probing an OCI runtime for real (a container started, a command run, everything removed) is
// 0.1-0.5 s, and a platform that hangs (gVisor's KVM platform here) costs its timeout. The
// runtime opens on every sandboxctl call, so a successful probe is remembered per boot: in
// <state root>/probe-<name>.json, keyed by the runtime binary's identity (path, size, mtime,
// inode), the kernel release and the boot id. A changed binary, kernel or a reboot probes again.
// gvisor also remembers `runsc help platforms` this way (probe-gvisor-platforms.json).
// A failed probe is remembered for 10 minutes only (it may have been a passing condition), so a
// broken runtime does not make every start pay its timeout.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace sbx::backend {

// The cache key for `binary` plus whatever else the probe's answer depends on.
std::string ProbeKey(const std::string& binary, const std::string& extra);
// The cached answer for `key`, if any (a failure only while it is younger than 10 minutes).
std::optional<nlohmann::json> ReadProbeCache(const std::string& file, const std::string& key);
// `answer` must hold "ok" (bool); the time of writing is added.
void WriteProbeCache(const std::string& file, const std::string& key, const nlohmann::json& answer);

}  // namespace sbx::backend
