// Kick and drift over the store's pages (paged_leapfrog.hpp).
#include "gravpipe/paged_leapfrog.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gravpipe/error.hpp"
#include "gravpipe/format_number.hpp"
#include "gravpipe/memory_budget.hpp"

namespace gravpipe {

namespace {

std::int64_t checked_block(const ParticleStore& s, std::int64_t block) {
  if (block < 1) throw InputError("leapfrog on pages: block must be >= 1");
  return std::min(block, s.size());
}

/// Throws IntegrationError for the first particle of [b, b + n) whose force is not finite.
void check_finite(ParticleStore& s, std::int64_t b, std::int64_t n, const std::vector<double>& acc,
                  const std::vector<double>& pot, double t) {
  for (std::int64_t k = 0; k < n; ++k) {
    const double* a = &acc[3 * k];
    if (std::isfinite(a[0]) && std::isfinite(a[1]) && std::isfinite(a[2]) && std::isfinite(pot[k])) continue;
    std::int64_t index = 0;
    s.read_column("index", 0, b + k, 1, &index);
    throw IntegrationError("leapfrog: particle " + std::to_string(index) + ": its force is not finite at t = " +
                               format_number(t) + " (coincident particles with eps = 0? use eps > 0)",
                           index, t);
  }
}

}  // namespace

void paged_kick_drift(ParticleStore& s, double h, double dt, std::int64_t block) {
  block = checked_block(s, block);
  const Reservation charge = s.budget().reserve(static_cast<std::uint64_t>(block) * 72, "the leapfrog's blocks");
  std::vector<double> vel(3 * block), acc(3 * block), pos(3 * block);
  for (std::int64_t b = 0; b < s.size(); b += block) {
    const std::int64_t n = std::min(block, s.size() - b), m = 3 * n;
    s.read("vel", b, n, vel.data());
    s.read("acc", b, n, acc.data());
    s.read("pos", b, n, pos.data());
    for (std::int64_t k = 0; k < m; ++k) {  // LeapfrogIntegrator::step's first loop
      vel[k] += h * acc[k];
      pos[k] += dt * vel[k];
    }
    s.write("vel", b, n, vel.data());
    s.write("pos", b, n, pos.data());
  }
}

void paged_kick(ParticleStore& s, double h, std::int64_t block, double t) {
  block = checked_block(s, block);
  const Reservation charge = s.budget().reserve(static_cast<std::uint64_t>(block) * 56, "the leapfrog's blocks");
  std::vector<double> vel(3 * block), acc(3 * block), pot(block);
  for (std::int64_t b = 0; b < s.size(); b += block) {
    const std::int64_t n = std::min(block, s.size() - b), m = 3 * n;
    s.read("acc", b, n, acc.data());
    s.read("pot", b, n, pot.data());
    check_finite(s, b, n, acc, pot, t);
    s.read("vel", b, n, vel.data());
    for (std::int64_t k = 0; k < m; ++k) vel[k] += h * acc[k];  // LeapfrogIntegrator::step's last loop
    s.write("vel", b, n, vel.data());
  }
}

void check_paged_forces(ParticleStore& s, std::int64_t block, double t) {
  block = checked_block(s, block);
  const Reservation charge = s.budget().reserve(static_cast<std::uint64_t>(block) * 32, "the leapfrog's blocks");
  std::vector<double> acc(3 * block), pot(block);
  for (std::int64_t b = 0; b < s.size(); b += block) {
    const std::int64_t n = std::min(block, s.size() - b);
    s.read("acc", b, n, acc.data());
    s.read("pot", b, n, pot.data());
    check_finite(s, b, n, acc, pot, t);
  }
}

}  // namespace gravpipe
