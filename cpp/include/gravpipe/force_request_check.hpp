// The one contract every force provider (CpuPipeline, Tree / TreeForceProvider, CudaPipeline)
// checks its arguments against, so that the same bad input gets the same InputError, with
// the same text, from every backend. The texts are those of the Python layer
// (gravpipe/_validate.py, pipeline.py), which checks first; the core repeats the checks
// because C++ callers (integrators, later MPI and the GRAPE-6 shim) reach it directly.
//
// Decided once, for every provider:
// - eps finite and >= 0; G finite and > 0.
// - An empty j-set is an error ("pos: empty j-particle set"), and so is an empty i-set
//   ("pos_i: empty i-particle set"): the Python layer refuses both, and a force request
//   with nothing to compute is a caller's mistake more often than a wish.
// - exclude is empty (no exclusions) or holds one entry per i-particle: a j index in
//   [0, n_j) or kNoExclusion.
#pragma once
#include <cstddef>
#include <cstdint>

#include "gravpipe/pipeline_types.hpp"
#include "gravpipe/span.hpp"

namespace gravpipe {

/// "eps: must be finite and >= 0, got -1.0" unless eps is finite and >= 0.
void check_eps(double eps);
/// "G: must be finite and > 0, got 0.0" unless G is finite and > 0.
void check_G(double G);

/// A j-set write: n = mass.size() >= 1, pos 3n, vel 3n or empty. Reads sizes only (device
/// spans are fine). Returns n.
std::size_t check_j_set(Span<const double> pos, Span<const double> mass, Span<const double> vel);

/// update_j of the current n_j j-particles: pos 3 n_j, vel 3 n_j when the j-set was written
/// with velocities, else empty.
void check_j_update(Span<const double> pos, Span<const double> vel, std::size_t n_j, bool j_has_vel);

/// The sizes of a force request against n_j j-particles: n_j >= 1; pos_i 3 n_i with
/// n_i >= 1; acc 3 n_i and pot n_i; vel_i and jerk both 3 n_i (jerk wanted: the j-set
/// needs velocities) or both empty; exclude n_i or empty. Reads sizes only (device spans
/// are fine). Returns n_i.
std::size_t check_request_sizes(const ForceRequest& req, std::size_t n_j, bool j_has_vel);

/// Every exclude entry is a j index in [0, n_j) or kNoExclusion: "exclude: index 10 at
/// position 0 is outside [-1, 10)". Reads the entries (host memory only).
void check_exclude(Span<const std::int64_t> exclude, std::size_t n_j);

/// check_request_sizes and check_exclude: a host request. Returns n_i.
std::size_t check_force_request(const ForceRequest& req, std::size_t n_j, bool j_has_vel);

}  // namespace gravpipe
