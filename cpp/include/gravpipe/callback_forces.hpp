// A force provider whose self-gravity is computed by a callable supplied by the caller:
// the adapter between the integrators (which take a ForceProvider) and force sources that
// live partly in Python, like the domain-decomposed treecode, whose steps are MPI
// collectives through mpi4py (gravpipe/parallel/tree_parallel.py). It accepts only what
// such a source computes: self-gravity of the whole j-set, each particle excluding itself,
// without jerks (what the leapfrog asks for).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "gravpipe/force_provider.hpp"

namespace gravpipe {

class CallbackForces final : public ForceProvider {
 public:
  /// What one call did, for the counters: interactions, and the parts of its wall time
  /// spent writing j-particles (building trees) and communicating; the rest is compute.
  struct Work {
    std::uint64_t interactions = 0;
    double seconds_j_write = 0, seconds_comm = 0;
  };
  /// compute(pos 3n, mass n, acc 3n, pot n): self-gravity of the j-set, written in place.
  using Compute = std::function<Work(Span<const double> pos, Span<const double> mass, Span<double> acc,
                                     Span<double> pot)>;

  explicit CallbackForces(Compute compute);
  void set_j(Span<const double> pos, Span<const double> mass, Span<const double> vel) override;
  void update_j(Span<const double> pos, Span<const double> vel) override;
  /// Throws InputError for anything but self-gravity of the j-set without jerks.
  void forces(const ForceRequest& req) override;
  PipelineStats stats() const override { return stats_; }

 private:
  Compute compute_;
  std::vector<double> pos_, mass_;
  bool has_vel_ = false;
  PipelineStats stats_;
};

}  // namespace gravpipe
