// The one interface integrators take their forces through: the CPU pipeline, the CUDA
// pipeline and the tree evaluator plug in behind it without touching the integrators
// (STYLE.md: force providers as plug-ins). Every provider checks set_j, update_j and
// forces against one contract, with one error text per broken rule
// (force_request_check.hpp).
#pragma once
#include <cstdint>

#include "gravpipe/error.hpp"
#include "gravpipe/pipeline_types.hpp"
#include "gravpipe/span.hpp"

namespace gravpipe {

struct AxisBounds;  // curve_order.hpp

/// Hermite predictor coefficients of k j-particles at their own times (GRAPE-6's
/// g6_set_j_particle): caller's indices, positions, velocities, accelerations, jerks
/// (3k each, row-major) and own times in integrator ticks.
struct JTaylor {
  Span<const std::int64_t> index;
  Span<const double> pos, vel, acc, jerk;
  Span<const std::int64_t> t_ticks;
};

class ForceProvider {
 public:
  virtual ~ForceProvider() = default;
  /// Write a new j-set (positions 3n, masses n, velocities 3n or empty). The provider may
  /// reorder it internally (e.g. along a space-filling curve).
  virtual void set_j(Span<const double> pos, Span<const double> mass, Span<const double> vel) = 0;
  /// Overwrite positions/velocities of the same j-set (same n, same masses), keeping the
  /// provider's internal order: the cheap per-block write of a Hermite integrator.
  virtual void update_j(Span<const double> pos, Span<const double> vel) = 0;
  /// Forces on the i-particles of `req` from the current j-set.
  virtual void forces(const ForceRequest& req) = 0;
  virtual PipelineStats stats() const = 0;
  /// The next set_j holds the positions of a time step's drift from positions with these
  /// bounds (a leapfrog step says so before it drifts). A tree keys them in
  /// step_frame(before, their bounds); a direct sum has no use for it.
  virtual void set_drift_origin(const AxisBounds&) {}

  /// Whether this provider keeps predictor coefficients and predicts j-particles itself
  /// (the GPU: then a Hermite block sends only its active particles, not all N).
  virtual bool predicts_j() const { return false; }
  /// Store the coefficients of some j-particles of the current set (set_j first).
  virtual void write_j_taylor(const JTaylor&) { throw BackendError("this force provider does not predict j-particles"); }
  /// Predict every j-particle to time now_ticks * tick (float64, the host predictor's formula).
  virtual void predict_j(std::int64_t, double) { throw BackendError("this force provider does not predict j-particles"); }
};

}  // namespace gravpipe
