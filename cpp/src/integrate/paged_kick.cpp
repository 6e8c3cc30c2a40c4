// Kick and drift over the store's pages (paged_kick.hpp).
#include "gravpipe/paged_kick.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gravpipe/error.hpp"
#include "gravpipe/format_number.hpp"
#include "gravpipe/leapfrog_element.hpp"
#include "gravpipe/memory_budget.hpp"
#include "gravpipe/paged_budget.hpp"

namespace gravpipe {

namespace {

std::int64_t checked_block(const ParticleStore& s, std::int64_t block) {
  if (block < 1) throw InputError("leapfrog on pages: block must be >= 1");
  return std::min(block, s.size());
}

/// The first k in [0, n) whose acc (3n) or pot (n) is not finite, or -1.
std::int64_t first_not_finite(std::int64_t n, const double* acc, const double* pot) {
  for (std::int64_t k = 0; k < n; ++k) {
    const double* a = &acc[3 * k];
    if (!(std::isfinite(a[0]) && std::isfinite(a[1]) && std::isfinite(a[2]) && std::isfinite(pot[k]))) return k;
  }
  return -1;
}

[[noreturn]] void throw_not_finite(ParticleStore& s, std::int64_t at, double t) {
  std::int64_t index = 0;
  s.read_column("index", 0, at, 1, &index);
  throw IntegrationError("leapfrog: particle " + std::to_string(index) + ": its force is not finite at t = " +
                             format_number(t) + " (coincident particles with eps = 0? use eps > 0)",
                         index, t);
}

}  // namespace

void paged_kick_drift(ParticleStore& s, double h, double dt, std::int64_t block) {
  block = checked_block(s, block);
  const Reservation charge =
      s.budget().reserve(static_cast<std::uint64_t>(block) * kKickBytesPerParticle, "the leapfrog's blocks");
  std::vector<double> vel(3 * block), acc(3 * block), pos(3 * block);
  for (std::int64_t b = 0; b < s.size(); b += block) {
    const std::int64_t n = std::min(block, s.size() - b), m = 3 * n;
    s.read("vel", b, n, vel.data());
    s.read("acc", b, n, acc.data());
    s.read("pos", b, n, pos.data());
    for (std::int64_t k = 0; k < m; ++k) {  // LeapfrogIntegrator::step's first loop
      vel[k] = kicked(vel[k], acc[k], h);
      pos[k] = drifted(pos[k], vel[k], dt);
    }
    s.write("vel", b, n, vel.data());
    s.write("pos", b, n, pos.data());
  }
}

PagedClosingKick::PagedClosingKick(ParticleStore& s, double h, double t, int threads, double next_h,
                                   double next_dt, bool kick)
    : s_(s),
      h_(h),
      t_(t),
      next_h_(next_h),
      next_dt_(next_dt),
      kick_(kick),
      buffers_(static_cast<std::size_t>(std::max(threads, 1))) {}

bool PagedClosingKick::operator()(std::int64_t begin, std::int64_t n, const double* acc, const double* pot) {
  const auto thread = static_cast<std::size_t>(omp_get_thread_num());
  if (thread >= buffers_.size()) throw InputError("closing kick: more threads than buffers");
  if (const std::int64_t k = first_not_finite(n, acc, pot); k >= 0) {
    const std::lock_guard<std::mutex> lock(bad_mutex_);
    if (first_bad_ < 0 || begin + k < first_bad_) first_bad_ = begin + k;
    return false;
  }
  Buffers& b = buffers_[thread];
  const std::int64_t m = 3 * n;
  b.vel.resize(static_cast<std::size_t>(m));
  if (!kick_ && !(next_dt_ > 0)) return true;
  s_.read("vel", begin, n, b.vel.data());
  if (kick_) {
    for (std::int64_t k = 0; k < m; ++k) b.vel[k] = kicked(b.vel[k], acc[k], h_);  // LeapfrogIntegrator::step's last loop
    s_.write("vel", begin, n, b.vel.data());
  }
  s_.cool("vel", begin, begin + n);  // done with: these pages give way before the walk's
  if (!(next_dt_ > 0)) return true;
  b.pos.resize(static_cast<std::size_t>(m));
  s_.read("pos", begin, n, b.pos.data());
  for (std::int64_t k = 0; k < m; ++k)  // paged_kick_drift's loop, the velocity kept in a register
    b.pos[k] = drifted(b.pos[k], kicked(b.vel[k], acc[k], next_h_), next_dt_);
  for (std::int64_t k = 0; k < n; ++k) b.bounds.add(&b.pos[3 * k]);
  return true;
}

void PagedClosingKick::throw_if_bad() const {
  if (first_bad_ >= 0) throw_not_finite(s_, first_bad_, t_);
}

AxisBounds PagedClosingKick::next_bounds() const {
  AxisBounds all;
  for (const Buffers& b : buffers_) all.add(b.bounds);
  return all;
}

}  // namespace gravpipe
