#include "gravpipe/leapfrog.hpp"
#include "gravpipe/leapfrog_element.hpp"

#include <omp.h>

#include <cmath>
#include <string>

#include "gravpipe/curve_order.hpp"
#include "gravpipe/error.hpp"
#include "gravpipe/format_number.hpp"
#include "gravpipe/stopwatch.hpp"

namespace gravpipe {

namespace {
constexpr std::int64_t kMinParallel = 4096;  // shorter loops stay on the calling thread
}  // namespace

LeapfrogIntegrator::LeapfrogIntegrator(ForceProvider& forces, ParticleState state, double t0,
                                       LeapfrogParams params, ShareAgreement agreement)
    : forces_(forces), s_(std::move(state)), params_(params), agreement_(std::move(agreement)), t0_(t0) {
  check_params();
  const auto t_start = Clock::now();
  compute_forces();
  check_forces(t0_);
  counters_.seconds_total += seconds_since(t_start);
}

LeapfrogIntegrator::LeapfrogIntegrator(ForceProvider& forces, ParticleState state, double t0,
                                       LeapfrogParams params, const CheckpointState& restart,
                                       ShareAgreement agreement)
    : forces_(forces), s_(std::move(state)), params_(params), agreement_(std::move(agreement)), t0_(t0) {
  check_params();
  try {
    acc_ = restart.f64.at("acc");
    pot_ = restart.f64.at("pot");
    steps_ = restart.i64.at("steps").at(0);
    // the origin moves to each off-grid stop; older checkpoints lack it
    if (const auto it = restart.f64.find("grid_origin"); it != restart.f64.end()) t0_ = it->second.at(0);
  } catch (const std::out_of_range&) {
    throw InputError("leapfrog restart: checkpoint lacks acc, pot or steps");
  }
  if (acc_.size() != 3 * s_.size() || pot_.size() != s_.size())
    throw InputError("leapfrog restart: checkpoint arrays do not match the particle count");
}

void LeapfrogIntegrator::check_params() const {
  if (!(params_.dt > 0) || !std::isfinite(params_.dt)) throw InputError("dt: must be > 0");
  const std::size_t n = s_.size();
  if (n == 0 && !agreement_.shared()) throw InputError("leapfrog: no particles");
  if (s_.pos.size() != 3 * n || s_.vel.size() != 3 * n)
    throw InputError("leapfrog: pos, vel and mass have different lengths");
}

void LeapfrogIntegrator::compute_forces() {
  const std::size_t n = s_.size();
  if (all_.size() != n) {
    all_.resize(n);
    for (std::size_t i = 0; i < n; ++i) all_[i] = static_cast<std::int64_t>(i);
  }
  acc_.resize(3 * n);
  pot_.resize(n);
  forces_.set_j({s_.pos.data(), 3 * n}, {s_.mass.data(), n}, {});
  forces_.forces({{s_.pos.data(), 3 * n}, {}, {all_.data(), n}, {acc_.data(), 3 * n},
                  {pot_.data(), n}, {}});
}

// Leapfrog's counterpart of Hermite's step floor: a force that is not finite (coincident
// particles with eps = 0) would turn every position into NaN within a step, silently. On a
// share every process learns of it here (one agreement per evaluation), so all stop together.
void LeapfrogIntegrator::check_forces(double t) {
  for (std::size_t i = 0; i < s_.size(); ++i) {
    const double* a = &acc_[3 * i];
    if (std::isfinite(a[0]) && std::isfinite(a[1]) && std::isfinite(a[2]) && std::isfinite(pot_[i])) continue;
    agreement_.fail(IntegrationError("leapfrog: particle " + std::to_string(i) + ": its force is not finite at t = " +
                                         format_number(t) + " (coincident particles with eps = 0? use eps > 0)",
                                     static_cast<std::int64_t>(i), t));
    break;
  }
  agreement_.earliest(ShareAgreement::kNothing, t);
}

void LeapfrogIntegrator::step(double dt) {
  const auto m = static_cast<std::int64_t>(3 * s_.size());
  const double h = 0.5 * dt;
  // where the drift starts: a tree keys the drifted positions in a frame known from these
  // (step_frame), as the out-of-core leapfrog must, to give the same trees
  forces_.set_drift_origin(axis_bounds({s_.pos.data(), s_.pos.size()}, omp_get_max_threads()));
#pragma omp parallel for schedule(static) if (m >= kMinParallel)
  for (std::int64_t k = 0; k < m; ++k) {
    s_.vel[k] = kicked(s_.vel[k], acc_[k], h);
    s_.pos[k] = drifted(s_.pos[k], s_.vel[k], dt);
  }
  compute_forces();
  check_forces(time() + dt);  // the end of this step (steps_ counts it only below)
#pragma omp parallel for schedule(static) if (m >= kMinParallel)
  for (std::int64_t k = 0; k < m; ++k) s_.vel[k] = kicked(s_.vel[k], acc_[k], h);
  counters_.steps += 1;
  counters_.particle_steps += s_.size();
}

// Whole steps up to the last grid point t0 + k dt not after t; an off-grid t then takes one
// shortened kick-drift-kick step to t, which becomes the origin of the later steps.
void LeapfrogIntegrator::evolve_to(double t) {
  const double want = (t - t0_) / params_.dt;
  if (!std::isfinite(want)) throw InputError("evolve_to: t must be finite");
  // the step count is exact in float64 (t0 + k dt) to 2^53; beyond it k would not fit
  if (want > 9007199254740992.0)
    throw InputError("evolve_to: t = " + format_number(t) + " is a time the leapfrog's step count cannot hold: " +
                     format_number(want) + " steps of dt = " + format_number(params_.dt) + " from " +
                     format_number(t0_) + ", at most 2^53");
  const double whole = std::round(want);
  const bool on_grid = std::abs(want - whole) <= 1e-9 * std::max(1.0, std::abs(whole));
  const auto target = static_cast<std::int64_t>(on_grid ? whole : std::floor(want));
  if (on_grid ? target < steps_ : t < time())
    throw InputError("evolve_to: t = " + format_number(t) + " is before the current time " + format_number(time()));
  const auto t_start = Clock::now();
  const double provider_before = provider_seconds(forces_.stats());
  for (; steps_ < target; ++steps_) step(params_.dt);
  if (!on_grid) {
    step(t - time());
    t0_ = t;
    steps_ = 0;
  }
  counters_.seconds_total += seconds_since(t_start);
  counters_.seconds_host +=
      seconds_since(t_start) - (provider_seconds(forces_.stats()) - provider_before);
}

CheckpointState LeapfrogIntegrator::checkpoint() const {
  CheckpointState c;
  c.f64["acc"] = acc_;
  c.f64["pot"] = pot_;
  c.i64["steps"] = {steps_};
  c.f64["grid_origin"] = {t0_};
  return c;
}

}  // namespace gravpipe
