#include "gravpipe/hermite.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "gravpipe/error.hpp"
#include "gravpipe/format_number.hpp"
#include "gravpipe/stopwatch.hpp"

namespace gravpipe {

namespace {

// Loops shorter than this run on the calling thread: forking costs more than the loop, and
// on a busy machine an OpenMP barrier can wait for a whole scheduler time slice.
constexpr std::int64_t kMinParallel = 4096;

double norm3(const double* v) { return std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]); }

/// Ticks from the grid origin to t when t is the origin plus a whole number of dt_max
/// (within rounding), where every particle is synchronized by the block steps alone.
std::optional<std::int64_t> grid_ticks(const Timeline& tl, double t) {
  const double steps = (t - tl.t0) / tl.dt_max;
  const double whole = std::round(steps);
  if (!std::isfinite(steps) || std::abs(steps - whole) > 1e-9 * std::max(1.0, std::abs(whole)))
    return std::nullopt;
  return static_cast<std::int64_t>(whole) * kTicksPerDtMax;
}

}  // namespace

HermiteIntegrator::HermiteIntegrator(ForceProvider& forces, ParticleState state, double t0,
                                     HermiteParams params, ShareAgreement agreement)
    : forces_(forces), s_(std::move(state)), params_(params), agreement_(std::move(agreement)),
      timeline_{t0, params.dt_max} {
  check_params();
  start();
  agreement_.earliest(ShareAgreement::kNothing, time());  // every process started, or all throw
}

HermiteIntegrator::HermiteIntegrator(ForceProvider& forces, ParticleState state, double t0,
                                     HermiteParams params, const CheckpointState& restart,
                                     ShareAgreement agreement)
    : forces_(forces), s_(std::move(state)), params_(params), agreement_(std::move(agreement)),
      timeline_{t0, params.dt_max} {
  check_params();
  const std::size_t n = s_.size();
  try {
    t_ = restart.i64.at("t_ticks");
    dt_ = restart.i64.at("dt_ticks");
    now_ = restart.i64.at("now_ticks").at(0);
    acc_ = restart.f64.at("acc");
    jerk_ = restart.f64.at("jerk");
    pot_ = restart.f64.at("pot");
    // the origin moves to each off-grid synchronization; older checkpoints lack it
    if (const auto it = restart.f64.find("timeline_t0"); it != restart.f64.end()) timeline_.t0 = it->second.at(0);
  } catch (const std::out_of_range&) {
    throw InputError("hermite restart: checkpoint lacks t_ticks, dt_ticks, now_ticks, acc, jerk or pot");
  }
  if (t_.size() != n || dt_.size() != n || acc_.size() != 3 * n || jerk_.size() != 3 * n ||
      pot_.size() != n)
    throw InputError("hermite restart: checkpoint arrays do not match the particle count");
  if (now_ % kTicksPerDtMax != 0)
    throw InputError("hermite restart: checkpoint was not taken at a synchronization time");
  for (std::size_t i = 0; i < n; ++i)
    if (t_[i] != now_ || dt_[i] <= 0 || dt_[i] > kTicksPerDtMax)
      throw InputError("hermite restart: particle " + std::to_string(i) + " is not synchronized");
  xp_.resize(3 * n);
  vp_.resize(3 * n);
  resort_j_ = true;
}

void HermiteIntegrator::check_params() const {
  if (!(params_.eta > 0) || !std::isfinite(params_.eta)) throw InputError("eta: must be > 0");
  if (!(params_.eta_s > 0) || !std::isfinite(params_.eta_s)) throw InputError("eta_s: must be > 0");
  if (!(params_.dt_max > 0) || !std::isfinite(params_.dt_max)) throw InputError("dt_max: must be > 0");
  const std::size_t n = s_.size();
  if (n == 0 && !agreement_.shared()) throw InputError("hermite: no particles");
  if (s_.pos.size() != 3 * n || s_.vel.size() != 3 * n)
    throw InputError("hermite: pos, vel and mass have different lengths");
}

void HermiteIntegrator::start() {
  const auto t_start = Clock::now();
  const std::size_t n = s_.size();
  t_.assign(n, 0);
  dt_.assign(n, 0);
  acc_.assign(3 * n, 0.0);
  jerk_.assign(3 * n, 0.0);
  pot_.assign(n, 0.0);
  xp_ = s_.pos;
  vp_ = s_.vel;
  forces_.set_j({s_.pos.data(), 3 * n}, {s_.mass.data(), n}, {s_.vel.data(), 3 * n});
  std::vector<std::int64_t> all(n);
  for (std::size_t i = 0; i < n; ++i) all[i] = static_cast<std::int64_t>(i);
  forces_.forces({{s_.pos.data(), 3 * n}, {s_.vel.data(), 3 * n}, {all.data(), n},
                  {acc_.data(), 3 * n}, {pot_.data(), n}, {jerk_.data(), 3 * n}});
  for (std::size_t i = 0; i < n; ++i) dt_[i] = first_step(i);
  check_steps(all);
  resort_j_ = true;
  counters_.seconds_total += seconds_since(t_start);
}

std::int64_t HermiteIntegrator::first_step(std::size_t i) const {
  const double a = norm3(&acc_[3 * i]), j = norm3(&jerk_[3 * i]);
  const double want = j > 0 ? params_.eta_s * a / j : params_.dt_max;
  return quantize(want, 0, 0);
}

// The largest dt_max / 2^k not above dt_want; at most twice the old step, and only doubled
// when the new time is a multiple of the doubled step (the block structure). Returns 0 when
// even one tick is too long (called inside parallel loops, so it must not throw).
std::int64_t HermiteIntegrator::quantize(double dt_want, std::int64_t dt_old, std::int64_t t_new) const {
  const double tick = timeline_.tick();
  std::int64_t dt = kTicksPerDtMax;
  while (dt > 1 && static_cast<double>(dt) * tick > dt_want) dt >>= 1;
  if (!(static_cast<double>(dt) * tick <= dt_want)) return 0;  // also catches NaN
  if (dt_old > 0 && dt > dt_old) dt = (t_new % (2 * dt_old) == 0) ? 2 * dt_old : dt_old;
  return dt;
}

// A step below the floor, or a force that is not finite (which the step criterion can let
// through: NaN > 0 is false, so a NaN jerk gives the start a full dt_max), ends the run. The
// time named is the particle's own: the block time it was just corrected to.
// On a share the failure is raised at the next agreement, on every process at once.
void HermiteIntegrator::check_steps(const std::vector<std::int64_t>& which) {
  for (const std::int64_t i : which) {
    const double* a = &acc_[3 * i];
    const bool finite = std::isfinite(a[0]) && std::isfinite(a[1]) && std::isfinite(a[2]);
    if (dt_[i] != 0 && finite) continue;
    agreement_.fail(step_error(i));
    return;
  }
}

IntegrationError HermiteIntegrator::step_error(std::int64_t i) const {
  const double* a = &acc_[3 * i];
  const bool finite = std::isfinite(a[0]) && std::isfinite(a[1]) && std::isfinite(a[2]);
  const double t = timeline_.time(t_[i]);
  const std::string what = finite ? "its time step fell below dt_max / 2^40" : "its force is not finite";
  return IntegrationError("hermite: particle " + std::to_string(i) + ": " + what + " at t = " + format_number(t) +
                              " (a close encounter too hard to follow: increase eps, or check the input "
                              "for coincident particles)",
                          i, t);
}

void HermiteIntegrator::evolve_to(double t) {
  if (!std::isfinite(t)) throw InputError("evolve_to: t must be finite");
  // the block clock counts int64 ticks from the grid origin: 2^62 of them leave a step's end room
  const double most = static_cast<double>(std::int64_t{1} << 62) / static_cast<double>(kTicksPerDtMax);
  if ((t - timeline_.t0) / params_.dt_max > most)
    throw InputError("evolve_to: t = " + format_number(t) + " is a time the integer timeline cannot hold: at most " +
                     format_number(most) + " steps of dt_max = " + format_number(params_.dt_max) + " from " +
                     format_number(timeline_.t0));
  const std::optional<std::int64_t> target = grid_ticks(timeline_, t);
  if (target ? *target < now_ : t < time())
    throw InputError("evolve_to: t = " + format_number(t) + " is before the current time " + format_number(time()));
  const auto t_start = Clock::now();
  const double provider_before = provider_seconds(forces_.stats());
  std::int64_t t_block = 0;
  if (target) {
    while (now_ < *target) {
      next_active(t_block);
      run_block(t_block);
    }
  } else {
    for (next_active(t_block); timeline_.time(t_block) < t; next_active(t_block)) run_block(t_block);
    synchronize(t);
  }
  agreement_.earliest(ShareAgreement::kNothing, time());  // a failure in the last block, on every process
  counters_.seconds_total += seconds_since(t_start);
  counters_.seconds_host +=
      seconds_since(t_start) - (provider_seconds(forces_.stats()) - provider_before);
}

// An off-grid stop: every particle takes a shortened step from its own time to t (one force
// evaluation on all N), then the block clock restarts at t with every particle at tick 0, so
// later steps are again dt_max / 2^k, counted from t.
void HermiteIntegrator::synchronize(double t) {
  const std::size_t n = s_.size();
  const auto count = static_cast<std::int64_t>(n);
  std::vector<double> dt(n);
#pragma omp parallel for schedule(static) if (count >= kMinParallel)
  for (std::int64_t i = 0; i < count; ++i) {
    dt[i] = t - timeline_.time(t_[i]);
    predict_by(i, dt[i]);
  }
  if (all_.size() != n) {
    all_.resize(n);
    for (std::size_t i = 0; i < n; ++i) all_[i] = static_cast<std::int64_t>(i);
  }
  ai_.resize(3 * n), ji_.resize(3 * n), pi_.resize(n);
  forces_.set_j({xp_.data(), 3 * n}, {s_.mass.data(), n}, {vp_.data(), 3 * n});
  forces_.forces({{xp_.data(), 3 * n}, {vp_.data(), 3 * n}, {all_.data(), n},
                  {ai_.data(), 3 * n}, {pi_.data(), n}, {ji_.data(), 3 * n}});
  const double tick = timeline_.tick();
#pragma omp parallel for schedule(static) if (count >= kMinParallel)
  for (std::int64_t i = 0; i < count; ++i) {
    const double want = correct(i, dt[i], &ai_[3 * i], &ji_[3 * i]);
    pot_[i] = corrected_potential(i, pi_[i], &ai_[3 * i]);
    // Aarseth's criterion differences a and jerk over the step: over a step cut far below
    // the particle's own it is mostly rounding noise, so the particle keeps its step then.
    const std::int64_t old = dt_[i];
    dt_[i] = dt[i] >= 0.5 * static_cast<double>(old) * tick ? quantize(want, old, 0) : old;
    t_[i] = 0;
  }
  timeline_.t0 = t;
  now_ = 0;
  check_steps(all_);
  resort_j_ = true;
  counters_.steps += 1;
  counters_.particle_steps += n;
}

void HermiteIntegrator::predict(std::int64_t i, std::int64_t t_block) {
  predict_by(i, static_cast<double>(t_block - t_[i]) * timeline_.tick());
}

void HermiteIntegrator::predict_by(std::int64_t i, double dt) {
  for (int c = 0; c < 3; ++c) {
    const double a = acc_[3 * i + c], j = jerk_[3 * i + c];
    xp_[3 * i + c] = s_.pos[3 * i + c] + dt * (s_.vel[3 * i + c] + dt * (0.5 * a + dt * j / 6.0));
    vp_[3 * i + c] = s_.vel[3 * i + c] + dt * (a + 0.5 * dt * j);
  }
}

void HermiteIntegrator::predict_all(std::int64_t t_block) {
  const auto n = static_cast<std::int64_t>(s_.size());
#pragma omp parallel for schedule(static) if (n >= kMinParallel)
  for (std::int64_t i = 0; i < n; ++i) predict(i, t_block);
}

void HermiteIntegrator::write_j() {
  const std::size_t n = s_.size();
  if (resort_j_) {
    forces_.set_j({xp_.data(), 3 * n}, {s_.mass.data(), n}, {vp_.data(), 3 * n});
    resort_j_ = false;
  } else {
    forces_.update_j({xp_.data(), 3 * n}, {vp_.data(), 3 * n});
  }
}

// Predictor coefficients of particles `which` (at their own times) to a predicting provider.
void HermiteIntegrator::send_j_taylor(const std::vector<std::int64_t>& which) {
  const std::size_t k = which.size();
  tx_.resize(3 * k), tv_.resize(3 * k), ta_.resize(3 * k), tj_.resize(3 * k), tt_.resize(k);
  const auto count = static_cast<std::int64_t>(k);
#pragma omp parallel for schedule(static) if (count >= kMinParallel)
  for (std::int64_t m = 0; m < count; ++m) {
    const auto i = static_cast<std::size_t>(which[m]);
    for (int c = 0; c < 3; ++c) {
      tx_[3 * m + c] = s_.pos[3 * i + c], tv_[3 * m + c] = s_.vel[3 * i + c];
      ta_[3 * m + c] = acc_[3 * i + c], tj_[3 * m + c] = jerk_[3 * i + c];
    }
    tt_[m] = t_[i];
  }
  forces_.write_j_taylor({{which.data(), k}, {tx_.data(), 3 * k}, {tv_.data(), 3 * k}, {ta_.data(), 3 * k},
                          {tj_.data(), 3 * k}, {tt_.data(), k}});
}

// active_ = the particles whose step ends first, in ascending index order (the order the
// pipeline sees them in: runs are deterministic and restarts bit-identical). One parallel
// pass finds each thread's earliest end time and how many particles share it; a second
// pass, only in the threads whose earliest time is the block time, writes the indices.
// O(N), but far cheaper than a map-and-sort schedule at the block sizes of large N.
void HermiteIntegrator::next_active(std::int64_t& t_block) {
  const auto n = static_cast<std::int64_t>(s_.size());
  const int parts = n >= kMinParallel ? omp_get_max_threads() : 1;
  const auto begin = [&](int p) { return n * p / parts; };
  std::vector<std::int64_t> first(parts, std::numeric_limits<std::int64_t>::max()), count(parts + 1, 0);
#pragma omp parallel for schedule(static, 1) num_threads(parts)
  for (int p = 0; p < parts; ++p) {
    std::int64_t t_min = std::numeric_limits<std::int64_t>::max(), c = 0;
    for (std::int64_t i = begin(p); i < begin(p + 1); ++i) {
      const std::int64_t t = t_[i] + dt_[i];
      if (t < t_min) t_min = t, c = 0;
      c += (t == t_min);
    }
    first[p] = t_min, count[p + 1] = c;
  }
  // on a share: the least over the processes (one with no particle offers kNothing)
  t_block = agreement_.earliest(*std::min_element(first.begin(), first.end()), time());
  for (int p = 0; p < parts; ++p) count[p + 1] = count[p] + (first[p] == t_block ? count[p + 1] : 0);
  active_.resize(count[parts]);
#pragma omp parallel for schedule(static, 1) num_threads(parts)
  for (int p = 0; p < parts; ++p) {
    if (first[p] != t_block) continue;
    std::int64_t at = count[p];
    for (std::int64_t i = begin(p); i < begin(p + 1); ++i)
      if (t_[i] + dt_[i] == t_block) active_[at++] = i;
  }
}

void HermiteIntegrator::run_block(std::int64_t t_block) {
  const std::size_t n = s_.size();
  const std::size_t na = active_.size();
  const auto count = static_cast<std::int64_t>(na);
  if (forces_.predicts_j()) {
    if (resort_j_) {  // synchronized: every particle's own time is now_
      forces_.set_j({s_.pos.data(), 3 * n}, {s_.mass.data(), n}, {s_.vel.data(), 3 * n});
      if (all_.size() != n) {
        all_.resize(n);
        for (std::size_t i = 0; i < n; ++i) all_[i] = static_cast<std::int64_t>(i);
      }
      send_j_taylor(all_);
      resort_j_ = false;
    }
    forces_.predict_j(t_block, timeline_.tick());
#pragma omp parallel for schedule(static) if (count >= kMinParallel)
    for (std::int64_t k = 0; k < count; ++k) predict(active_[k], t_block);
  } else {
    predict_all(t_block);
    write_j();
  }

  xi_.resize(3 * na);
  vi_.resize(3 * na);
  ai_.resize(3 * na);
  ji_.resize(3 * na);
  pi_.resize(na);
#pragma omp parallel for schedule(static) if (count >= kMinParallel)
  for (std::int64_t k = 0; k < count; ++k)
    for (int c = 0; c < 3; ++c) {
      xi_[3 * k + c] = xp_[3 * active_[k] + c];
      vi_[3 * k + c] = vp_[3 * active_[k] + c];
    }
  forces_.forces({{xi_.data(), 3 * na}, {vi_.data(), 3 * na}, {active_.data(), na},
                  {ai_.data(), 3 * na}, {pi_.data(), na}, {ji_.data(), 3 * na}});
#pragma omp parallel for schedule(static) if (count >= kMinParallel)
  for (std::int64_t k = 0; k < count; ++k) {
    const auto i = static_cast<std::size_t>(active_[k]);
    const double want = correct(i, static_cast<double>(t_block - t_[i]) * timeline_.tick(), &ai_[3 * k], &ji_[3 * k]);
    pot_[i] = corrected_potential(i, pi_[k], &ai_[3 * k]);
    dt_[i] = quantize(want, dt_[i], t_block);
    t_[i] = t_block;
  }
  check_steps(active_);
  if (forces_.predicts_j()) send_j_taylor(active_);
  now_ = t_block;
  if (now_ % kTicksPerDtMax == 0) resort_j_ = true;  // synchronized: re-sort at the next write
  counters_.steps += 1;
  counters_.particle_steps += na;
}

// Hermite corrector (Makino & Aarseth 1992, eqs. 7-10) over a step of dt from the particle's
// own time; returns the step Aarseth's criterion wants next (physical time).
// The force was evaluated at the predicted positions xp_, the corrector then moved every
// particle by dx = x - xp (O(dt^4)). To first order W(x) = W(xp) - sum_i m_i a_i . dx_i, so
// each particle's potential carries -2 a_i . dx_i (the pair terms shared equally): an energy
// row from the run's own potentials then has the corrected positions' W to O(dx^2), not an
// error of O(dx) (|dW/W| ~1e-7 at eta 0.02). Called after correct(i, ...).
double HermiteIntegrator::corrected_potential(std::size_t i, double pot, const double a1[3]) const {
  double a_dx = 0;
  for (int c = 0; c < 3; ++c) a_dx += a1[c] * (s_.pos[3 * i + c] - xp_[3 * i + c]);
  return pot - 2 * a_dx;
}

double HermiteIntegrator::correct(std::size_t i, double dt, const double a1[3], const double j1[3]) {
  const double dt2 = dt * dt, dt3 = dt2 * dt;
  double a2[3], a3[3];
  for (int c = 0; c < 3; ++c) {
    const double a0 = acc_[3 * i + c], j0 = jerk_[3 * i + c];
    a2[c] = (-6.0 * (a0 - a1[c]) - dt * (4.0 * j0 + 2.0 * j1[c])) / dt2;
    a3[c] = (12.0 * (a0 - a1[c]) + 6.0 * dt * (j0 + j1[c])) / dt3;
    s_.pos[3 * i + c] = xp_[3 * i + c] + dt2 * dt2 * (a2[c] / 24.0 + dt * a3[c] / 120.0);
    s_.vel[3 * i + c] = vp_[3 * i + c] + dt3 * (a2[c] / 6.0 + dt * a3[c] / 24.0);
    acc_[3 * i + c] = a1[c];
    jerk_[3 * i + c] = j1[c];
    a2[c] += dt * a3[c];  // second derivative at the end of the step
  }
  const double a = norm3(a1), j = norm3(j1), s = norm3(a2), c3 = norm3(a3);
  const double num = a * s + j * j, den = j * c3 + s * s;
  return den > 0 ? std::sqrt(params_.eta * num / den) : params_.dt_max;
}

CheckpointState HermiteIntegrator::checkpoint() const {
  if (now_ % kTicksPerDtMax != 0)
    throw std::logic_error("hermite: checkpoints are taken at synchronization times only");
  CheckpointState c;
  c.i64["t_ticks"] = t_;
  c.i64["dt_ticks"] = dt_;
  c.i64["now_ticks"] = {now_};
  c.f64["timeline_t0"] = {timeline_.t0};
  c.f64["acc"] = acc_;
  c.f64["jerk"] = jerk_;
  c.f64["pot"] = pot_;
  return c;
}

}  // namespace gravpipe
