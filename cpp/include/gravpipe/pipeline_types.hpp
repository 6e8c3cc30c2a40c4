// Plain types shared by every force provider: precision modes, requests, counters.
#pragma once
#include <cstdint>
#include <string>

#include "gravpipe/span.hpp"

namespace gravpipe {

enum class Precision { Mixed, Double };
Precision parse_precision(const std::string& name);
std::string precision_name(Precision p);

/// Work and time of each pipeline stage since the last reset.
struct PipelineStats {
  std::uint64_t calls = 0;
  std::uint64_t interactions = 0;
  std::uint64_t j_particles = 0, i_particles = 0;
  std::uint64_t bytes_j_write = 0, bytes_i_write = 0, bytes_result_read = 0;
  double seconds_j_write = 0, seconds_i_write = 0, seconds_compute = 0, seconds_result_read = 0;
  double seconds_comm = 0;  // between processes: the j-parallel reduction of partial forces
  // Mixed precision: (i-vector, j-tile) pairs visited, and how many took the far path.
  std::uint64_t tile_visits = 0, far_tile_visits = 0;
};

/// An exclude entry that leaves no j-particle out.
constexpr std::int64_t kNoExclusion = -1;

/// Positions/velocities as (n,3) row-major float64, masses (n,), outputs likewise. Every
/// provider checks it against one contract (force_request_check.hpp).
struct ForceRequest {
  Span<const double> pos_i;                  // 3 n_i
  Span<const double> vel_i;                  // 3 n_i, or empty: no jerk
  Span<const std::int64_t> exclude;          // n_i j indices or kNoExclusion, or empty: none
  Span<double> acc;                          // 3 n_i
  Span<double> pot;                          // n_i
  Span<double> jerk;                         // 3 n_i when vel_i is given
};

}  // namespace gravpipe
