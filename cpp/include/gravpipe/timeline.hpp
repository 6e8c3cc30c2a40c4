// Block timesteps on an integer timeline (SWIFT's timeline.h idea): time is int64 ticks,
// dt_max is 2^kMaxLevel ticks, every step is dt_max / 2^k. Physical time is derived from
// ticks, never accumulated in floating point, so block times are exact.
#pragma once
#include <cstdint>

namespace gravpipe {

constexpr int kMaxLevel = 40;                          // dt_min = dt_max / 2^40
constexpr std::int64_t kTicksPerDtMax = std::int64_t{1} << kMaxLevel;

struct Timeline {
  double t0 = 0;       // physical time at tick 0
  double dt_max = 0;   // physical length of kTicksPerDtMax ticks
  double tick() const { return dt_max / static_cast<double>(kTicksPerDtMax); }
  double time(std::int64_t ticks) const { return t0 + static_cast<double>(ticks) * tick(); }
};

}  // namespace gravpipe
