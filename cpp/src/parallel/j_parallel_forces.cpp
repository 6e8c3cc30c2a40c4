#include "gravpipe/j_parallel_forces.hpp"

#include <string>

#include "gravpipe/error.hpp"
#include "gravpipe/stopwatch.hpp"

namespace gravpipe {

JParallelForces::JParallelForces(ForceProvider& local, int rank, int ranks, Reduction reduce)
    : local_(local), rank_(rank), ranks_(ranks), reduce_(std::move(reduce)) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw InputError("j-parallel forces: rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  if (!reduce_) throw InputError("j-parallel forces: no reduction given");
}

void JParallelForces::slice(std::size_t n) {
  if (n < static_cast<std::size_t>(ranks_))
    throw InputError("set_j: " + std::to_string(n) + " j-particles for " + std::to_string(ranks_) +
                     " processes: every process needs at least one");
  n_ = n;
  begin_ = n * rank_ / ranks_;
  end_ = n * (rank_ + 1) / ranks_;
}

void JParallelForces::set_j(Span<const double> pos, Span<const double> mass, Span<const double> vel) {
  slice(mass.size());
  const std::size_t k = end_ - begin_;
  local_.set_j(pos.subspan(3 * begin_, 3 * k), mass.subspan(begin_, k),
               vel.empty() ? vel : vel.subspan(3 * begin_, 3 * k));
}

void JParallelForces::update_j(Span<const double> pos, Span<const double> vel) {
  if (pos.size() != 3 * n_) throw InputError("update_j: pos must match the set_j call (3 n)");
  const std::size_t k = end_ - begin_;
  local_.update_j(pos.subspan(3 * begin_, 3 * k), vel.empty() ? vel : vel.subspan(3 * begin_, 3 * k));
}

void JParallelForces::forces(const ForceRequest& req) {
  ForceRequest part = req;
  if (!req.exclude.empty()) {
    exclude_.resize(req.exclude.size());
    for (std::size_t k = 0; k < exclude_.size(); ++k) {
      const std::int64_t e = req.exclude[k];
      const bool here = e >= static_cast<std::int64_t>(begin_) && e < static_cast<std::int64_t>(end_);
      exclude_[k] = here ? e - static_cast<std::int64_t>(begin_) : -1;
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
