// Parsing of the quantities that users type: CPU ("500m", "1.5", "2"), bytes ("256Mi", "1G",
// "64MiB", "1048576"), durations ("1.5", "250ms", "2s", "1m"). Every reject says what was wrong.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "sbx/status.h"

namespace sbx {

// "500m" → 500, "1.5" → 1500, "2" → 2000. Range: 1m .. 1024 cores.
StatusOr<int64_t> ParseMillicores(std::string_view text);

// Kubernetes-style suffixes: Ki Mi Gi Ti (powers of 1024), k K M G T (powers of 1000),
// also "KiB/MiB/GiB", "B". Fractions allowed ("1.5Gi"). Must be > 0 and < 2^62.
StatusOr<int64_t> ParseBytes(std::string_view text);

// "1.5" (seconds), "250ms", "2s", "1m". Must be > 0 and ≤ 1 day.
StatusOr<double> ParseSeconds(std::string_view text);

// Positive integer count ("64"), ≤ max.
StatusOr<int64_t> ParseCount(std::string_view text, int64_t max);

std::string FormatBytes(int64_t bytes);  // 268435456 → "256Mi"

}  // namespace sbx
