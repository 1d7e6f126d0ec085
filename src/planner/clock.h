#pragma once
/// Wall-clock phase timings for the planner's reports (never part of a result).
#include <chrono>

namespace autoshard {

/// Seconds elapsed since `t0` on the steady clock.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace autoshard
