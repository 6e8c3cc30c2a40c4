// Cell moments: mass, centre of mass, bounding box and the quadrupole about the com.
// Cells are stored breadth first, so each level is a contiguous index range: levels are
// swept deepest first, each in parallel (leaves from their particles, other cells from
// their children by the parallel-axis theorem).
#include <algorithm>
#include <cmath>
#include <exception>

#include "cell_moments.hpp"
#include "gravpipe/debug_checks.hpp"
#include "gravpipe/paged_particles.hpp"
#include "gravpipe/tree.hpp"

namespace gravpipe {

namespace {

void resize_moments(TreeNodes& t) {
  const std::size_t n = t.count();
  for (auto* v : {&t.mass, &t.cx, &t.cy, &t.cz, &t.lo_x, &t.lo_y, &t.lo_z, &t.hi_x, &t.hi_y,
                  &t.hi_z, &t.size, &t.r_open2, &t.qxx, &t.qxy, &t.qxz, &t.qyy, &t.qyz, &t.qzz,
                  &t.qtr})
    v->assign(n, 0.0);
}

CellMoments load(const TreeNodes& t, std::size_t c) {
  CellMoments m;
  m.m = t.mass[c], m.cx = t.cx[c], m.cy = t.cy[c], m.cz = t.cz[c];
  m.lo[0] = t.lo_x[c], m.lo[1] = t.lo_y[c], m.lo[2] = t.lo_z[c];
  m.hi[0] = t.hi_x[c], m.hi[1] = t.hi_y[c], m.hi[2] = t.hi_z[c];
  m.qxx = t.qxx[c], m.qxy = t.qxy[c], m.qxz = t.qxz[c], m.qyy = t.qyy[c], m.qyz = t.qyz[c], m.qzz = t.qzz[c];
  m.qtr = t.qtr[c];
  return m;
}

/// Store cell c's moments with its size and opening radius.
void store(TreeNodes& t, std::size_t c, const CellMoments& m, double theta) {
  t.mass[c] = m.m, t.cx[c] = m.cx, t.cy[c] = m.cy, t.cz[c] = m.cz;
  t.lo_x[c] = m.lo[0], t.lo_y[c] = m.lo[1], t.lo_z[c] = m.lo[2];
  t.hi_x[c] = m.hi[0], t.hi_y[c] = m.hi[1], t.hi_z[c] = m.hi[2];
  t.qxx[c] = m.qxx, t.qxy[c] = m.qxy, t.qxz[c] = m.qxz, t.qyy[c] = m.qyy, t.qyz[c] = m.qyz, t.qzz[c] = m.qzz;
  t.qtr[c] = m.qtr;
  t.size[c] = cell_size(m);
  t.r_open2[c] = opening_radius2(m, t.size[c], theta);
}

#if GRAVPIPE_DEBUG_CHECKS
/// Every split cell against its children as stored once the pass is done (so a parent
/// summed before its children were would show): their boxes inside its box, their masses
/// and particle counts adding up to its own, its centre of mass inside its box.
void check_moments(const TreeNodes& t) {
  for (std::size_t c = 0; c < t.count(); ++c) {
    const std::string cell = "cell " + std::to_string(c);
    // rounding of m x sums: far below this for any box that is not all one point
    const double slack = 1e-9 * (std::max({std::abs(t.lo_x[c]), std::abs(t.lo_y[c]), std::abs(t.lo_z[c]),
                                           std::abs(t.hi_x[c]), std::abs(t.hi_y[c]), std::abs(t.hi_z[c])}) +
                                 t.size[c]);
    GRAVPIPE_DEBUG_ASSERT(t.mass[c] <= 0 || (t.cx[c] >= t.lo_x[c] - slack && t.cx[c] <= t.hi_x[c] + slack &&
                                             t.cy[c] >= t.lo_y[c] - slack && t.cy[c] <= t.hi_y[c] + slack &&
                                             t.cz[c] >= t.lo_z[c] - slack && t.cz[c] <= t.hi_z[c] + slack),
                          cell + ": centre of mass outside its box");
    if (t.is_leaf(c)) continue;
    double mass = 0;
    std::int64_t count = 0;
    for (std::size_t k = static_cast<std::size_t>(t.first_child[c]); k < static_cast<std::size_t>(t.first_child[c]) +
                                                                          static_cast<std::size_t>(t.n_children[c]);
         ++k) {
      GRAVPIPE_DEBUG_ASSERT(t.lo_x[k] >= t.lo_x[c] && t.lo_y[k] >= t.lo_y[c] && t.lo_z[k] >= t.lo_z[c] &&
                                t.hi_x[k] <= t.hi_x[c] && t.hi_y[k] <= t.hi_y[c] && t.hi_z[k] <= t.hi_z[c],
                            cell + ": the box of its child " + std::to_string(k) + " reaches outside its own");
      mass += t.mass[k], count += t.end[k] - t.begin[k];
    }
    GRAVPIPE_DEBUG_ASSERT(std::abs(mass - t.mass[c]) <= 1e-12 * std::abs(t.mass[c]),
                          cell + ": mass " + std::to_string(t.mass[c]) + ", its children's " + std::to_string(mass));
    GRAVPIPE_DEBUG_ASSERT(count == t.end[c] - t.begin[c], cell + ": its children hold " + std::to_string(count) +
                                                               " of its " + std::to_string(t.end[c] - t.begin[c]) +
                                                               " particles");
  }
}
#endif

}  // namespace

void cell_from_children(TreeNodes& t, std::size_t c, double theta) {
  CellMoments kids[8];
  const auto c0 = static_cast<std::size_t>(t.first_child[c]);
  const int n = t.n_children[c];
  for (int q = 0; q < n; ++q) kids[q] = load(t, c0 + static_cast<std::size_t>(q));
  store(t, c, parent_moments(kids, n), theta);
}

/// Leaves and cells of one level in chunks of this many: a thread releases the blocks of
/// its chunk's leaves (release_thread) before it takes the next.
constexpr std::int64_t kMomentChunk = 64;

template <class Particles>
void compute_moments(TreeNodes& t, const Particles& p, double theta, double quad_tol, int threads) {
  resize_moments(t);
  const auto n = static_cast<std::int64_t>(t.count());
  std::exception_ptr error;  // the first failure (a page that fails its checksum): rethrown here
  std::int64_t hi = n;
  while (hi > 0 && !error) {
    // [lo, hi): the cells of the deepest level not yet done (breadth-first order)
    std::int64_t lo = hi - 1;
    while (lo > 0 && t.level[lo - 1] == t.level[hi - 1]) --lo;
    const std::int64_t chunks = (hi - lo + kMomentChunk - 1) / kMomentChunk;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (hi - lo > 256)
    for (std::int64_t q = 0; q < chunks; ++q) {
      try {
        const std::int64_t c1 = std::min(hi, lo + (q + 1) * kMomentChunk);
        for (std::int64_t c = lo + q * kMomentChunk; c < c1; ++c) {
          if (t.is_leaf(c)) {
            const ParticleBlock leaf = p.block(t.begin[c], t.end[c]);
            store(t, static_cast<std::size_t>(c), leaf_moments(leaf, t.begin[c], t.end[c]), theta);
            p.done_with(leaf);
          } else {
            cell_from_children(t, c, theta);
          }
        }
      } catch (...) {
#pragma omp critical(gravpipe_moments_error)
        if (!error) error = std::current_exception();
      }
      p.release_thread();
    }
    hi = lo;
  }
  if (error) std::rethrow_exception(error);
#if GRAVPIPE_DEBUG_CHECKS
  check_moments(t);
#endif
  fill_walk_cells(t, theta, quad_tol, threads);
}

void fill_walk_cells(TreeNodes& t, double theta, double quad_tol, int threads) {
  const auto n = static_cast<std::int64_t>(t.count());
  t.walk.resize(t.count());
#pragma omp parallel for num_threads(threads) schedule(static) if (n > 4096)
  for (std::int64_t c = 0; c < n; ++c) {
    const double mono_d2 =
        monopole_distance2(t.mass[c], t.qxx[c], t.qxy[c], t.qxz[c], t.qyy[c], t.qyz[c], t.qzz[c], theta, quad_tol);
    t.walk[c] = {t.cx[c], t.cy[c], t.cz[c], t.r_open2[c], mono_d2,
                 t.begin[c], t.end[c], t.first_child[c], t.n_children[c]};
  }
}

template void compute_moments<InCoreParticles>(TreeNodes&, const InCoreParticles&, double, double, int);
template void compute_moments<PagedParticles>(TreeNodes&, const PagedParticles&, double, double, int);

}  // namespace gravpipe
