#include "gravpipe/pipeline.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "gravpipe/error.hpp"
#include "gravpipe/force_request_check.hpp"
#include "gravpipe/stopwatch.hpp"
#include "gravpipe/kernel.hpp"
#include "gravpipe/curve_order.hpp"

namespace gravpipe {

namespace {


// j-writes of fewer particles than this stay on one thread (a fork costs more than the copy).
constexpr std::size_t kMinParallelParticles = 16384;

std::size_t padded(std::size_t n) { return (n + kIPad - 1) / kIPad * kIPad; }

template <class T>
void resize_zeroed(std::vector<T>& v, std::size_t n) {
  v.assign(n, T{});
}

}  // namespace

Precision parse_precision(const std::string& name) {
  if (name == "mixed") return Precision::Mixed;
  if (name == "double") return Precision::Double;
  throw InputError("precision: unknown mode '" + name + "' (expected 'mixed' or 'double')");
}

std::string precision_name(Precision p) { return p == Precision::Mixed ? "mixed" : "double"; }

CpuPipeline::CpuPipeline(Precision precision, double eps, double G, const std::string& isa,
                         int threads)
    : precision_(precision), isa_(resolve_isa(isa)), eps_(eps), G_(G) {
  check_eps(eps);
  check_G(G);
  threads_ = threads > 0 ? threads : omp_get_max_threads();
}

void CpuPipeline::set_j(Span<const double> pos, Span<const double> mass, Span<const double> vel) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::size_t n = check_j_set(pos, mass, vel);
  if (precision_ == Precision::Mixed && n > static_cast<std::size_t>(INT32_MAX))
    throw InputError("set_j: mixed precision holds at most 2^31-1 j-particles");
  const auto t0 = Clock::now();
  n_j_ = n;
  has_j_vel_ = !vel.empty();
  j_mass_.assign(mass.begin(), mass.end());
  if (precision_ == Precision::Mixed)
    write_j_mixed(pos, mass, vel);
  else
    write_j_double(pos, mass, vel);
  count_j_write(t0);
}

namespace {

/// Centre and radius of the bounding box of rows [b, e) of a (3n) row-major array.
void box_of(Span<const double> a, const std::vector<std::int64_t>& order, std::size_t b,
            std::size_t e, double centre[3], double& radius) {
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (std::size_t s = b; s < e; ++s)
    for (int c = 0; c < 3; ++c) {
      lo[c] = std::min(lo[c], a[3 * order[s] + c]);
      hi[c] = std::max(hi[c], a[3 * order[s] + c]);
    }
  for (int c = 0; c < 3; ++c) centre[c] = 0.5 * (lo[c] + hi[c]);
  double r2 = 0;
  for (std::size_t s = b; s < e; ++s) {
    double d2 = 0;
    for (int c = 0; c < 3; ++c) {
      const double d = a[3 * order[s] + c] - centre[c];
      d2 += d * d;
    }
    r2 = std::max(r2, d2);
  }
  radius = std::sqrt(r2);
}

}  // namespace

void CpuPipeline::write_j_mixed(Span<const double> pos, Span<const double> mass,
                                Span<const double> vel) {
  const std::size_t n = mass.size();
  j_order_ = curve_order(pos, threads_);
  j_slot_of_.resize(n);
  for (std::size_t s = 0; s < n; ++s) j_slot_of_[j_order_[s]] = static_cast<std::int64_t>(s);
  fill_j_mixed(pos, mass, vel);
}

// Fill the mixed j-memory (records and tiles) in the slot order j_order_.
void CpuPipeline::fill_j_mixed(Span<const double> pos, Span<const double> mass,
                               Span<const double> vel) {
  const std::size_t n = mass.size();
  const std::vector<std::int64_t>& order = j_order_;
  j_pos_mixed_.resize(n);
  j_rel_mixed_.resize(n);
  j_vel_mixed_.resize(has_j_vel_ ? n : 0);
  j_vel_rel_mixed_.resize(has_j_vel_ ? n : 0);
  const std::size_t n_tiles = (n + kJTile - 1) / kJTile;
  j_tiles_.resize(n_tiles);
#pragma omp parallel for schedule(static) num_threads(threads_) if (n >= kMinParallelParticles)
  for (std::int64_t t = 0; t < static_cast<std::int64_t>(n_tiles); ++t) {
    const std::size_t b = t * kJTile, e = std::min(b + kJTile, n);
    JTileMixed& tile = j_tiles_[t];
    double c[3], radius, cv[3] = {0, 0, 0}, vradius;
    box_of(pos, order, b, e, c, radius);
    if (has_j_vel_) box_of(vel, order, b, e, cv, vradius);
    split_double(c[0], tile.cxh, tile.cxl);
    split_double(c[1], tile.cyh, tile.cyl);
    split_double(c[2], tile.czh, tile.czl);
    split_double(cv[0], tile.cvxh, tile.cvxl);
    split_double(cv[1], tile.cvyh, tile.cvyl);
    split_double(cv[2], tile.cvzh, tile.cvzl);
    // Rounded up so that float comparison never calls a near tile far.
    tile.far_r2 = static_cast<float>(kFarRadii * kFarRadii * radius * radius * (1 + 1e-6));
    tile.pad0 = tile.pad1 = tile.pad2 = 0;
    for (std::size_t s = b; s < e; ++s) {
      const std::int64_t k = order[s];
      JPosMixed& r = j_pos_mixed_[s];
      split_double(pos[3 * k], r.xh, r.xl);
      split_double(pos[3 * k + 1], r.yh, r.yl);
      split_double(pos[3 * k + 2], r.zh, r.zl);
      r.m = static_cast<float>(mass[k]);
      r.pad = 0;
      j_rel_mixed_[s] = {static_cast<float>(pos[3 * k] - c[0]), static_cast<float>(pos[3 * k + 1] - c[1]),
                         static_cast<float>(pos[3 * k + 2] - c[2]), r.m};
      if (has_j_vel_) {
        JVelMixed& v = j_vel_mixed_[s];
        split_double(vel[3 * k], v.vxh, v.vxl);
        split_double(vel[3 * k + 1], v.vyh, v.vyl);
        split_double(vel[3 * k + 2], v.vzh, v.vzl);
        v.pad0 = v.pad1 = 0;
        j_vel_rel_mixed_[s] = {static_cast<float>(vel[3 * k] - cv[0]),
                               static_cast<float>(vel[3 * k + 1] - cv[1]),
                               static_cast<float>(vel[3 * k + 2] - cv[2]), 0.0f};
      }
    }
  }
}

void CpuPipeline::write_j_double(Span<const double> pos, Span<const double> mass,
                                 Span<const double> vel) {
  const std::size_t n = mass.size();
  j_pos_double_.resize(n);
  j_vel_double_.resize(has_j_vel_ ? n : 0);
#pragma omp parallel for schedule(static) num_threads(threads_) if (n >= kMinParallelParticles)
  for (std::int64_t k = 0; k < static_cast<std::int64_t>(n); ++k) {
    j_pos_double_[k] = {pos[3 * k], pos[3 * k + 1], pos[3 * k + 2], mass[k]};
    if (has_j_vel_) j_vel_double_[k] = {vel[3 * k], vel[3 * k + 1], vel[3 * k + 2], 0.0};
  }
}

void CpuPipeline::count_j_write(Clock::time_point t0) {
  stats_.j_particles += n_j_;
  stats_.bytes_j_write += n_j_ * (has_j_vel_ ? 64 : 32);  // position+mass record (+ velocity)
  stats_.seconds_j_write += seconds_since(t0);
}

void CpuPipeline::update_j(Span<const double> pos, Span<const double> vel) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_j_update(pos, vel, n_j_, has_j_vel_);
  const auto t0 = Clock::now();
  const Span<const double> mass(j_mass_.data(), j_mass_.size());
  if (precision_ == Precision::Mixed)
    fill_j_mixed(pos, mass, vel);
  else
    write_j_double(pos, mass, vel);
  count_j_write(t0);
}

std::size_t CpuPipeline::i_row(std::size_t slot) const {
  return precision_ == Precision::Mixed ? static_cast<std::size_t>(i_order_[slot]) : slot;
}

void CpuPipeline::write_i(const ForceRequest& req, std::size_t n_padded) {
  const std::size_t n = req.pot.size();
  const bool with_vel = !req.vel_i.empty();
  const bool mixed = precision_ == Precision::Mixed;
  // Mixed mode puts i-particles in curve order too: an i-vector is then compact in space
  // and far from most tiles, which is what lets those tiles take the fast path.
  if (mixed) i_order_ = curve_order(req.pos_i, threads_);
  // Padding lanes repeat the last i-particle with its exclusion; their results are never
  // read. A lane at the origin with no exclusion met a j-particle there at r = 0 without
  // softening, which raised FE_INVALID in the host (a central star, a Kepler problem).
  // A copy of a lane of the block also leaves the far-tile test to the block's own lanes.
  const auto row = [&](std::size_t k) { return i_row(std::min(k, n - 1)); };
  // Exclusions name user j indices; the mixed j-memory is in curve order.
  const auto exclude_at = [&](std::size_t k) -> std::int64_t {
    const std::int64_t e = req.exclude.empty() ? -1 : req.exclude[row(k)];
    return (e >= 0 && mixed) ? j_slot_of_[e] : e;
  };
  const auto coord = [&](Span<const double> a, std::size_t k, int c) { return a[3 * row(k) + c]; };
  if (precision_ == Precision::Mixed) {
    IMemoryMixed& m = i_mixed_;
    for (auto* v : {&m.xh, &m.yh, &m.zh, &m.xl, &m.yl, &m.zl}) v->resize(n_padded);
    if (with_vel)
      for (auto* v : {&m.vxh, &m.vyh, &m.vzh, &m.vxl, &m.vyl, &m.vzl}) v->resize(n_padded);
    m.exclude.resize(n_padded);
    for (std::size_t k = 0; k < n_padded; ++k) {
      split_double(coord(req.pos_i, k, 0), m.xh[k], m.xl[k]);
      split_double(coord(req.pos_i, k, 1), m.yh[k], m.yl[k]);
      split_double(coord(req.pos_i, k, 2), m.zh[k], m.zl[k]);
      if (with_vel) {
        split_double(coord(req.vel_i, k, 0), m.vxh[k], m.vxl[k]);
        split_double(coord(req.vel_i, k, 1), m.vyh[k], m.vyl[k]);
        split_double(coord(req.vel_i, k, 2), m.vzh[k], m.vzl[k]);
      }
      m.exclude[k] = exclude_at(k);
    }
  } else {
    IMemoryDouble& m = i_double_;
    for (auto* v : {&m.x, &m.y, &m.z}) v->resize(n_padded);
    if (with_vel)
      for (auto* v : {&m.vx, &m.vy, &m.vz}) v->resize(n_padded);
    m.exclude.resize(n_padded);
    for (std::size_t k = 0; k < n_padded; ++k) {
      m.x[k] = coord(req.pos_i, k, 0);
      m.y[k] = coord(req.pos_i, k, 1);
      m.z[k] = coord(req.pos_i, k, 2);
      if (with_vel) {
        m.vx[k] = coord(req.vel_i, k, 0);
        m.vy[k] = coord(req.vel_i, k, 1);
        m.vz[k] = coord(req.vel_i, k, 2);
      }
      m.exclude[k] = exclude_at(k);
    }
  }
}

namespace {

// Split the padded i-range over threads in whole SIMD vectors; each i-particle's sum runs
// in the same order whatever the thread count, so results are bitwise thread-independent.
// Calls with fewer interactions than this run on one thread: a fork/join costs ~10 us, and
// on a busy machine a barrier can wait a whole scheduler slice (small Hermite blocks).
constexpr std::uint64_t kMinParallelInteractions = std::uint64_t{1} << 17;

// Returns the sum of what the kernel returns (the far-tile count of the mixed kernels).
template <class ArgsT, class Fn>
std::uint64_t parallel_over_i(ArgsT args, std::size_t n_padded, int threads, Fn kernel) {
  const auto blocks = static_cast<std::int64_t>(n_padded / kIPad);
  const bool big = n_padded * args.j_pos.size() >= kMinParallelInteractions && blocks > 1;
  std::uint64_t total = 0;
#pragma omp parallel for schedule(static) num_threads(threads) reduction(+ : total) if (big)
  for (std::int64_t b = 0; b < blocks; ++b) {
    ArgsT mine = args;
    mine.i_begin = static_cast<std::size_t>(b) * kIPad;
    mine.i_end = mine.i_begin + kIPad;
    if constexpr (std::is_void_v<decltype(kernel(mine))>)
      kernel(mine);
    else
      total += kernel(mine);
  }
  return total;
}

// The kernels of an ISA. resolve_isa only returns ISAs this build has, so the generic
// fallthrough is reached for Isa::Generic alone.
auto mixed_kernel(Isa isa) {
  auto* kernel = &kernel::generic::forces_mixed;
#if defined(GRAVPIPE_HAVE_AVX2_KERNELS)
  if (isa == Isa::Avx2) kernel = &kernel::avx2::forces_mixed;
#endif
#if defined(GRAVPIPE_HAVE_AVX512_KERNELS)
  if (isa == Isa::Avx512) kernel = &kernel::avx512::forces_mixed;
#endif
  (void)isa;
  return kernel;
}

auto double_kernel(Isa isa) {
  auto* kernel = &kernel::generic::forces_double;
#if defined(GRAVPIPE_HAVE_AVX2_KERNELS)
  if (isa == Isa::Avx2) kernel = &kernel::avx2::forces_double;
#endif
#if defined(GRAVPIPE_HAVE_AVX512_KERNELS)
  if (isa == Isa::Avx512) kernel = &kernel::avx512::forces_double;
#endif
  (void)isa;
  return kernel;
}

}  // namespace

void CpuPipeline::compute(std::size_t n_padded, bool with_jerk, bool with_exclude) {
  for (auto* v : {&results_.ax, &results_.ay, &results_.az, &results_.pot})
    resize_zeroed(*v, n_padded);
  if (with_jerk)
    for (auto* v : {&results_.jx, &results_.jy, &results_.jz}) resize_zeroed(*v, n_padded);
  kernel::CallArgs common;
  common.out = &results_;
  common.i_end = n_padded;
  common.eps2 = eps_ * eps_;
  common.with_jerk = with_jerk;
  common.with_exclude = with_exclude;
  if (precision_ == Precision::Mixed) {
    kernel::MixedArgs a;
    static_cast<kernel::CallArgs&>(a) = common;
    a.j_pos = {j_pos_mixed_.data(), n_j_};
    a.j_vel = {j_vel_mixed_.data(), with_jerk ? n_j_ : 0};
    a.j_rel = {j_rel_mixed_.data(), n_j_};
    a.j_vel_rel = {j_vel_rel_mixed_.data(), with_jerk ? n_j_ : 0};
    a.tiles = {j_tiles_.data(), j_tiles_.size()};
    a.i_mem = &i_mixed_;
    stats_.far_tile_visits += parallel_over_i(a, n_padded, threads_, mixed_kernel(isa_));
    // i-particles per i-vector of the chosen kernel
    const auto lanes = static_cast<std::size_t>(isa_float_lanes(isa_));
    stats_.tile_visits += (n_padded / lanes) * j_tiles_.size();
  } else {
    kernel::DoubleArgs a;
    static_cast<kernel::CallArgs&>(a) = common;
    a.j_pos = {j_pos_double_.data(), n_j_};
    a.j_vel = {j_vel_double_.data(), with_jerk ? n_j_ : 0};
    a.i_mem = &i_double_;
    parallel_over_i(a, n_padded, threads_, double_kernel(isa_));
  }
}

void CpuPipeline::read_results(const ForceRequest& req) {
  const std::size_t n = req.pot.size();
  const bool with_jerk = !req.jerk.empty();
  for (std::size_t s = 0; s < n; ++s) {
    const std::size_t k = i_row(s);
    req.acc[3 * k] = G_ * results_.ax[s];
    req.acc[3 * k + 1] = G_ * results_.ay[s];
    req.acc[3 * k + 2] = G_ * results_.az[s];
    req.pot[k] = -G_ * results_.pot[s];
    if (with_jerk) {
      req.jerk[3 * k] = G_ * results_.jx[s];
      req.jerk[3 * k + 1] = G_ * results_.jy[s];
      req.jerk[3 * k + 2] = G_ * results_.jz[s];
    }
  }
}

void CpuPipeline::forces(const ForceRequest& req) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::size_t n = check_force_request(req, n_j_, has_j_vel_);
  const bool with_jerk = !req.vel_i.empty();
  const std::size_t n_padded = padded(n);

  auto t0 = Clock::now();
  write_i(req, n_padded);
  stats_.seconds_i_write += seconds_since(t0);
  stats_.bytes_i_write += n * (with_jerk ? 56 : 32);  // float64 pos (+ vel) + int64 exclude

  t0 = Clock::now();
  compute(n_padded, with_jerk, !req.exclude.empty());
  stats_.seconds_compute += seconds_since(t0);

  t0 = Clock::now();
  read_results(req);
  stats_.seconds_result_read += seconds_since(t0);
  stats_.bytes_result_read += n * (with_jerk ? 56 : 32);

  stats_.calls += 1;
  stats_.i_particles += n;
  std::uint64_t excluded = 0;
  for (std::size_t k = 0; k < req.exclude.size(); ++k) excluded += req.exclude[k] >= 0;
  stats_.interactions += static_cast<std::uint64_t>(n) * n_j_ - excluded;
}

PipelineStats CpuPipeline::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CpuPipeline::reset_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_ = PipelineStats{};
}

}  // namespace gravpipe
