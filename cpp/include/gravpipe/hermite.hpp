// 4th-order Hermite predictor-corrector with block individual timesteps (Makino & Aarseth
// 1992; seed 000, PCI-HIB section 4.4). Each block: predict every j-particle to the block
// time, write them to the force provider, evaluate acc/jerk/pot on the active set only,
// correct the active particles and give them new power-of-two steps. A provider that
// predicts j-particles itself (the GPU, as GRAPE-6 did) instead keeps every particle's
// predictor coefficients: a block then sends it only the corrected active particles, and
// the host predicts only the active ones, so host and transfer work per block are
// O(active), not O(N).
//
// On one process's share of the particles (a ShareAgreement with other processes, and a
// force provider that sees every share: ShareDirectForces) the same blocks run on every
// process: each finds its own earliest step end, the agreement makes the least of them the
// block time, and each predicts, corrects and schedules only its own particles, any number
// of them including none.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "gravpipe/integrator.hpp"
#include "gravpipe/share_agreement.hpp"
#include "gravpipe/timeline.hpp"

namespace gravpipe {

struct HermiteParams {
  double eta = 0.02;     // Aarseth step parameter
  double eta_s = 0.01;   // starting step: eta_s |a| / |jerk|
  double dt_max = 0.125; // largest step; stops at multiples of it cost no extra force evaluation
};

class HermiteIntegrator final : public InCoreIntegrator {
 public:
  /// Start at time t0: one force evaluation on all particles, then the starting steps.
  /// `agreement`: with other processes, when `state` is this process's share (see above).
  HermiteIntegrator(ForceProvider& forces, ParticleState state, double t0, HermiteParams params,
                    ShareAgreement agreement = {});
  /// Restart from a checkpoint taken at a synchronization time (see checkpoint()).
  HermiteIntegrator(ForceProvider& forces, ParticleState state, double t0, HermiteParams params,
                    const CheckpointState& restart, ShareAgreement agreement = {});

  /// Any t >= time(): the block steps reach the grid points (grid_origin() + k dt_max)
  /// exactly; any other t costs a synchronization (see synchronize()).
  void evolve_to(double t) override;
  double time() const override { return timeline_.time(now_); }
  double grid_origin() const override { return timeline_.t0; }
  const ParticleState& state() const override { return s_; }
  const std::vector<double>& potential() const override { return pot_; }
  CheckpointState checkpoint() const override;
  IntegratorCounters counters() const override { return counters_; }

 private:
  void check_params() const;
  void start();
  void run_block(std::int64_t t_block);
  void synchronize(double t);
  void predict(std::int64_t i, std::int64_t t_block);
  void predict_by(std::int64_t i, double dt);
  void predict_all(std::int64_t t_block);
  void write_j();
  void send_j_taylor(const std::vector<std::int64_t>& which);
  void next_active(std::int64_t& t_block);
  double correct(std::size_t i, double dt, const double a1[3], const double j1[3]);
  double corrected_potential(std::size_t i, double pot, const double a1[3]) const;
  std::int64_t first_step(std::size_t i) const;
  void check_steps(const std::vector<std::int64_t>& which);
  IntegrationError step_error(std::int64_t i) const;
  std::int64_t quantize(double dt_want, std::int64_t dt_old, std::int64_t t_new) const;

  ForceProvider& forces_;
  ParticleState s_;
  HermiteParams params_;
  ShareAgreement agreement_;
  Timeline timeline_;
  std::int64_t now_ = 0;                 // block clock (ticks)
  std::vector<std::int64_t> t_, dt_;     // per particle: own time and step (ticks)
  std::vector<double> acc_, jerk_, pot_; // at each particle's own time (3n, 3n, n)
  std::vector<double> xp_, vp_;          // predicted positions/velocities (3n)
  bool resort_j_ = true;                 // set_j (re-sort) at the next block: after each sync
  // per-block scratch: active indices and their i-data/results
  std::vector<std::int64_t> active_;
  std::vector<double> xi_, vi_, ai_, ji_, pi_;
  std::vector<double> tx_, tv_, ta_, tj_;  // predictor coefficients of the particles sent
  std::vector<std::int64_t> tt_, all_;
  IntegratorCounters counters_;
};

}  // namespace gravpipe
