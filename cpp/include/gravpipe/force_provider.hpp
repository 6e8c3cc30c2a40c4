// The one interface integrators take their forces through. The CPU pipeline implements it
// now; the CUDA pipeline and the tree evaluator plug in behind it later without touching
// the integrators (STYLE.md: force providers as plug-ins).
#pragma once
#include "gravpipe/pipeline_types.hpp"
#include "gravpipe/span.hpp"

namespace gravpipe {

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
};

}  // namespace gravpipe
