// Wall-clock timing for the per-stage breakdown (T_host / T_comm / T_grape).
#pragma once
#include <chrono>

#include "gravpipe/pipeline_types.hpp"

namespace gravpipe {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// All the time a force provider has spent in its stages.
inline double provider_seconds(const PipelineStats& s) {
  return s.seconds_j_write + s.seconds_i_write + s.seconds_compute + s.seconds_result_read + s.seconds_comm;
}

}  // namespace gravpipe
