// common/clock.h — the harness's two clocks, as every Step and measurement reads them: the wall
// clock (when a call started, seconds since the epoch) and the steady clock (how long it took).
#pragma once

#include <chrono>

namespace sandcheck {

using SteadyClock = std::chrono::steady_clock;

// Seconds since the epoch, by the wall clock (a Step's started_unix).
inline double NowUnix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Seconds from `t0` to now, by the steady clock (a Step's wall_seconds).
inline double SecondsSince(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

}  // namespace sandcheck
