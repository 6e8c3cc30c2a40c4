// j-parallel direct summation over processes (PARNASS, seed 001; phiGRAPE): every process
// holds all particles and runs the same integrator, but its force provider holds only one
// contiguous range of the j-particles in space-filling-curve order (a compact region, so
// the pipeline's tiles stay small and mostly take its fast far path). A force request computes that slice's partial forces
// on all requested i-particles and hands them to a reduction supplied by the caller (MPI,
// through mpi4py), which must leave in place the sum over all slices, added in a fixed
// order so that every process holds the same bits and a run is deterministic for a given
// number of processes.
#pragma once
#include <cstddef>
#include <functional>

#include "gravpipe/force_provider.hpp"

namespace gravpipe {

class JParallelForces final : public ForceProvider {
 public:
  /// reduce(acc 3n, pot n, jerk 3n or empty): partial sums in, total sums out.
  using Reduction = std::function<void(Span<double> acc, Span<double> pot, Span<double> jerk)>;

  /// This process (rank of ranks) owns the j-particles at curve positions
  /// [n rank / ranks, n (rank + 1) / ranks) of each set_j (the order is computed from the
  /// positions, identically on every process).
  JParallelForces(ForceProvider& local, int rank, int ranks, Reduction reduce);

  void set_j(Span<const double> pos, Span<const double> mass, Span<const double> vel) override;
  void update_j(Span<const double> pos, Span<const double> vel) override;
  void forces(const ForceRequest& req) override;
  /// The local slice's counters, with the reduction's wall time (communication and the
  /// partial-sum additions) as seconds_comm.
  PipelineStats stats() const override;
  /// The caller's indices of this process's j-particles, in curve order.
  const std::vector<std::int64_t>& mine() const { return mine_; }

 private:
  void gather(Span<const double> pos, Span<const double> vel);

  ForceProvider& local_;
  int rank_, ranks_;
  Reduction reduce_;
  std::size_t n_ = 0;
  std::vector<std::int64_t> mine_;      // caller's index of each local j-particle
  std::vector<std::int64_t> local_of_;  // caller's index -> local index, or -1
  std::vector<double> pos_, vel_, mass_;  // the local j-set, gathered
  std::vector<std::int64_t> exclude_;   // request's exclusions as local indices (-1: none here)
  double seconds_reduce_ = 0;
};

}  // namespace gravpipe
