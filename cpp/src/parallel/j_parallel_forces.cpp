#include "gravpipe/j_parallel_forces.hpp"

#include <omp.h>

#include <string>

#include "gravpipe/curve_order.hpp"

#include "gravpipe/error.hpp"
#include "gravpipe/stopwatch.hpp"

namespace gravpipe {

JParallelForces::JParallelForces(ForceProvider& local, int rank, int ranks, Reduction reduce)
    : local_(local), rank_(rank), ranks_(ranks), reduce_(std::move(reduce)) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw InputError("j-parallel forces: rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  if (!reduce_) throw InputError("j-parallel forces: no reduction given");
}

void JParallelForces::set_j(Span<const double> pos, Span<const double> mass, Span<const double> vel) {
  const std::size_t n = mass.size();
  if (n < static_cast<std::size_t>(ranks_))
    throw InputError("set_j: " + std::to_string(n) + " j-particles for " + std::to_string(ranks_) +
                     " processes: every process needs at least one");
  if (pos.size() != 3 * n || (!vel.empty() && vel.size() != 3 * n))
    throw InputError("set_j: pos, mass and vel have different lengths");
  n_ = n;
  const std::vector<std::int64_t> order = curve_order(pos, omp_get_max_threads());
  const std::size_t begin = n * rank_ / ranks_, end = n * (rank_ + 1) / ranks_;
  mine_.assign(order.begin() + static_cast<std::ptrdiff_t>(begin), order.begin() + static_cast<std::ptrdiff_t>(end));
  local_of_.assign(n, -1);
  mass_.resize(mine_.size());
  for (std::size_t k = 0; k < mine_.size(); ++k) {
    local_of_[mine_[k]] = static_cast<std::int64_t>(k);
    mass_[k] = mass[mine_[k]];
  }
  gather(pos, vel);
  local_.set_j({pos_.data(), pos_.size()}, {mass_.data(), mass_.size()}, {vel_.data(), vel_.size()});
}

void JParallelForces::update_j(Span<const double> pos, Span<const double> vel) {
  if (pos.size() != 3 * n_ || (!vel.empty() && vel.size() != 3 * n_))
    throw InputError("update_j: pos and vel must match the set_j call (3 n)");
  gather(pos, vel);
  local_.update_j({pos_.data(), pos_.size()}, {vel_.data(), vel_.size()});
}

void JParallelForces::gather(Span<const double> pos, Span<const double> vel) {
  const std::size_t k = mine_.size();
  pos_.resize(3 * k);
  vel_.resize(vel.empty() ? 0 : 3 * k);
  for (std::size_t m = 0; m < k; ++m)
    for (int c = 0; c < 3; ++c) {
      pos_[3 * m + c] = pos[3 * mine_[m] + c];
      if (!vel.empty()) vel_[3 * m + c] = vel[3 * mine_[m] + c];
    }
}

void JParallelForces::forces(const ForceRequest& req) {
  ForceRequest part = req;
  if (!req.exclude.empty()) {
    exclude_.resize(req.exclude.size());
    for (std::size_t k = 0; k < exclude_.size(); ++k) {
      const std::int64_t e = req.exclude[k];
      if (e < -1 || e >= static_cast<std::int64_t>(n_))
        throw InputError("exclude: index " + std::to_string(e) + " at position " + std::to_string(k) +
                         " is outside [-1, " + std::to_string(n_) + ")");
      exclude_[k] = e >= 0 ? local_of_[e] : -1;
    }
    part.exclude = {exclude_.data(), exclude_.size()};
  }
  local_.forces(part);
  const auto t0 = Clock::now();
  reduce_(req.acc, req.pot, req.jerk);
  seconds_reduce_ += seconds_since(t0);
}

PipelineStats JParallelForces::stats() const {
  PipelineStats s = local_.stats();
  s.seconds_comm += seconds_reduce_;
  return s;
}

}  // namespace gravpipe
