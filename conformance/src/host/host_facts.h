// Facts about the machine a run happened on, for the report (ratios are comparable across
// machines; absolutes only with these facts beside them).
#pragma once

#include <nlohmann/json.hpp>

namespace sandcheck {

// {"hostname","os","kernel","machine","cpus","memory_bytes","cgroup"} — cgroup is "v2", "v1" or
// "hybrid" (v1 controllers with an empty v2 mount), detected, not assumed.
nlohmann::json HostFacts();

}  // namespace sandcheck
