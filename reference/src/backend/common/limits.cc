#include "backend/common/limits.h"

namespace sbx::backend {

Limits DefaultedLimits(const Limits& in) {
  Limits l = in;
  if (l.memory_bytes <= 0) l.memory_bytes = int64_t{512} << 20;
  if (l.pids <= 0) l.pids = 256;
  if (l.disk_bytes <= 0) l.disk_bytes = int64_t{256} << 20;
  if (l.fds <= 0) l.fds = 1024;
  return l;
}

}  // namespace sbx::backend
