// What every integrator offers the Simulation: advance to a time and export/import the exact
// state a checkpoint needs; an integrator whose particles are in memory (InCoreIntegrator)
// also hands out their arrays. The Simulation never switches on the integrator type
// (REBOUND's integrator plug-ins). The paged leapfrog (paged_leapfrog.hpp) keeps its
// particles in the pages of a store, which its owner reads block by block.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gravpipe/force_provider.hpp"

namespace gravpipe {

/// Particle arrays in the caller's order: pos, vel (3n, row-major), mass (n).
struct ParticleState {
  std::vector<double> pos, vel, mass;
  std::size_t size() const { return mass.size(); }
};

/// The named arrays (float64 or int64) and scalars that restart an integrator exactly.
struct CheckpointState {
  std::map<std::string, std::vector<double>> f64;
  std::map<std::string, std::vector<std::int64_t>> i64;
};

/// Work and host time of an integrator since its creation (or restart).
struct IntegratorCounters {
  std::uint64_t steps = 0;           // blocks (Hermite) or shared steps (leapfrog)
  std::uint64_t particle_steps = 0;  // sum of active particles over steps
  double seconds_host = 0;           // predict, correct, schedule, bookkeeping
  double seconds_total = 0;          // whole evolve_to calls
};

class Integrator {
 public:
  virtual ~Integrator() = default;
  /// Advance to any time t >= time(); on return every particle is synchronized at t.
  virtual void evolve_to(double t) = 0;
  virtual double time() const = 0;
  /// Times grid_origin() + k * quantum (dt_max, dt) are reached by whole steps; any other
  /// stop costs one extra force evaluation on all particles and moves the origin to it.
  virtual double grid_origin() const = 0;
  virtual CheckpointState checkpoint() const = 0;
  virtual IntegratorCounters counters() const = 0;
};

/// An integrator whose particles live in memory, in the caller's order.
class InCoreIntegrator : public Integrator {
 public:
  virtual const ParticleState& state() const = 0;
  /// Each particle's potential from the integrator's last force evaluation (n, the caller's
  /// order), at time() once evolve_to has returned, so that an energy row costs no evaluation
  /// of its own: 0.5 sum m_i pot_i is the potential energy of the positions at time() (Hermite
  /// adds the first-order change of the corrector's move: HermiteIntegrator::corrected_potential).
  virtual const std::vector<double>& potential() const = 0;
};

}  // namespace gravpipe
