// Kick-drift-kick leapfrog with a shared step: second order, symplectic, time reversible.
// Every step writes the whole j-set and evaluates forces on all particles; a force that is
// not finite stops the run with an IntegrationError naming the particle and the time.
// On one process's share of the particles (a ShareAgreement with the other processes and a
// force provider that sees every share) each process steps its own particles, any number
// including none, and all of them stop together when a force of any of them is not finite.
#pragma once
#include <cstdint>

#include "gravpipe/integrator.hpp"
#include "gravpipe/share_agreement.hpp"

namespace gravpipe {

struct LeapfrogParams {
  double dt = 1.0 / 128;
};

class LeapfrogIntegrator final : public InCoreIntegrator {
 public:
  LeapfrogIntegrator(ForceProvider& forces, ParticleState state, double t0, LeapfrogParams params,
                     ShareAgreement agreement = {});
  /// Restart from checkpoint(): exact accelerations and step count.
  LeapfrogIntegrator(ForceProvider& forces, ParticleState state, double t0, LeapfrogParams params,
                     const CheckpointState& restart, ShareAgreement agreement = {});

  /// Any t >= time(); grid times t0 + k dt are whole steps (times come from the step
  /// count, never accumulated), another t ends with one shortened step.
  void evolve_to(double t) override;
  double time() const override { return t0_ + static_cast<double>(steps_) * params_.dt; }
  double grid_origin() const override { return t0_; }
  const ParticleState& state() const override { return s_; }
  const std::vector<double>& potential() const override { return pot_; }
  CheckpointState checkpoint() const override;
  IntegratorCounters counters() const override { return counters_; }

 private:
  void check_params() const;
  void compute_forces();
  void check_forces(double t);
  void step(double dt);

  ForceProvider& forces_;
  ParticleState s_;
  LeapfrogParams params_;
  ShareAgreement agreement_;
  double t0_;  // grid origin: the start, or the last off-grid stop
  std::int64_t steps_ = 0;
  std::vector<double> acc_, pot_;
  std::vector<std::int64_t> all_;
  IntegratorCounters counters_;
};

}  // namespace gravpipe
