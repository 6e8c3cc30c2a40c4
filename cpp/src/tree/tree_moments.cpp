// Cell moments: mass, centre of mass, bounding box and the quadrupole about the com.
// Cells are stored breadth first, so each level is a contiguous index range: levels are
// swept deepest first, each in parallel (leaves from their particles, other cells from
// their children by the parallel-axis theorem).
#include <algorithm>
#include <cmath>
#include <exception>

#include "gravpipe/paged_particles.hpp"

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

/// Store the cell's bounding box, mass and com; a massless cell pulls nothing, and its
/// com is put at the box centre to stay finite.
void set_box_mass_com(TreeNodes& t, std::size_t c, const double lo[3], const double hi[3], double m,
                      double sx, double sy, double sz) {
  t.lo_x[c] = lo[0], t.lo_y[c] = lo[1], t.lo_z[c] = lo[2];
  t.hi_x[c] = hi[0], t.hi_y[c] = hi[1], t.hi_z[c] = hi[2];
  t.mass[c] = m;
  t.cx[c] = m > 0 ? sx / m : 0.5 * (lo[0] + hi[0]);
  t.cy[c] = m > 0 ? sy / m : 0.5 * (lo[1] + hi[1]);
  t.cz[c] = m > 0 ? sz / m : 0.5 * (lo[2] + hi[2]);
}

/// Second moments of the cell's particles (block p, its range) about its com: Q (traceless)
/// and T = sum m y^2.
void leaf_moments(TreeNodes& t, std::size_t c, const ParticleBlock& p) {
  double m = 0, sx = 0, sy = 0, sz = 0;
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (std::int64_t k = t.begin[c]; k < t.end[c]; ++k) {
    const double mk = p.m(k), r[3] = {p.x(k), p.y(k), p.z(k)};
    m += mk, sx += mk * r[0], sy += mk * r[1], sz += mk * r[2];
    for (int a = 0; a < 3; ++a) lo[a] = std::min(lo[a], r[a]), hi[a] = std::max(hi[a], r[a]);
  }
  set_box_mass_com(t, c, lo, hi, m, sx, sy, sz);
  double xx = 0, xy = 0, xz = 0, yy = 0, yz = 0, zz = 0;
  for (std::int64_t k = t.begin[c]; k < t.end[c]; ++k) {
    const double mk = p.m(k), dx = p.x(k) - t.cx[c], dy = p.y(k) - t.cy[c], dz = p.z(k) - t.cz[c];
    xx += mk * dx * dx, xy += mk * dx * dy, xz += mk * dx * dz;
    yy += mk * dy * dy, yz += mk * dy * dz, zz += mk * dz * dz;
  }
  const double tr = xx + yy + zz;
  t.qxx[c] = 3 * xx - tr, t.qyy[c] = 3 * yy - tr, t.qzz[c] = 3 * zz - tr;
  t.qxy[c] = 3 * xy, t.qxz[c] = 3 * xz, t.qyz[c] = 3 * yz;
  t.qtr[c] = tr;
}

void parent_moments(TreeNodes& t, std::size_t c) {
  const std::size_t c0 = static_cast<std::size_t>(t.first_child[c]), c1 = c0 + t.n_children[c];
  double m = 0, sx = 0, sy = 0, sz = 0;
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (std::size_t k = c0; k < c1; ++k) {
    m += t.mass[k], sx += t.mass[k] * t.cx[k], sy += t.mass[k] * t.cy[k], sz += t.mass[k] * t.cz[k];
    lo[0] = std::min(lo[0], t.lo_x[k]), hi[0] = std::max(hi[0], t.hi_x[k]);
    lo[1] = std::min(lo[1], t.lo_y[k]), hi[1] = std::max(hi[1], t.hi_y[k]);
    lo[2] = std::min(lo[2], t.lo_z[k]), hi[2] = std::max(hi[2], t.hi_z[k]);
  }
  set_box_mass_com(t, c, lo, hi, m, sx, sy, sz);
  double xx = 0, xy = 0, xz = 0, yy = 0, yz = 0, zz = 0, tr = 0;
  for (std::size_t k = c0; k < c1; ++k) {
    // parallel-axis shift of the child's moments from its com to ours
    const double mk = t.mass[k], dx = t.cx[k] - t.cx[c], dy = t.cy[k] - t.cy[c], dz = t.cz[k] - t.cz[c];
    const double d2 = dx * dx + dy * dy + dz * dz;
    xx += t.qxx[k] + mk * (3 * dx * dx - d2), yy += t.qyy[k] + mk * (3 * dy * dy - d2);
    zz += t.qzz[k] + mk * (3 * dz * dz - d2);
    xy += t.qxy[k] + mk * 3 * dx * dy, xz += t.qxz[k] + mk * 3 * dx * dz;
    yz += t.qyz[k] + mk * 3 * dy * dz;
    tr += t.qtr[k] + mk * d2;
  }
  t.qxx[c] = xx, t.qxy[c] = xy, t.qxz[c] = xz, t.qyy[c] = yy, t.qyz[c] = yz, t.qzz[c] = zz;
  t.qtr[c] = tr;
}

void set_opening_radius(TreeNodes& t, std::size_t c, double theta) {
  const double sx = t.hi_x[c] - t.lo_x[c], sy = t.hi_y[c] - t.lo_y[c], sz = t.hi_z[c] - t.lo_z[c];
  t.size[c] = std::max({sx, sy, sz});
  // delta: offset of the com from the box centre (Barnes 1994; GADGET's "cell offset")
  const double ox = t.cx[c] - 0.5 * (t.hi_x[c] + t.lo_x[c]);
  const double oy = t.cy[c] - 0.5 * (t.hi_y[c] + t.lo_y[c]);
  const double oz = t.cz[c] - 0.5 * (t.hi_z[c] + t.lo_z[c]);
  const double r = t.size[c] / theta + std::sqrt(ox * ox + oy * oy + oz * oz);
  t.r_open2[c] = r * r;
}

}  // namespace

void cell_from_children(TreeNodes& t, std::size_t c, double theta) {
  parent_moments(t, c);
  set_opening_radius(t, c, theta);
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
            leaf_moments(t, c, p.block(t.begin[c], t.end[c]));
            set_opening_radius(t, c, theta);
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
  fill_walk_cells(t, theta, quad_tol, threads);
}

void fill_walk_cells(TreeNodes& t, double theta, double quad_tol, int threads) {
  const auto n = static_cast<std::int64_t>(t.count());
  // the dropped quadrupole term is held to the scale of the expansion's own truncation
  // error at the opening radius, ~theta^3, so that lowering theta still lowers the error
  const double tol = quad_tol * theta * theta * theta;
  t.walk.resize(t.count());
#pragma omp parallel for num_threads(threads) schedule(static) if (n > 4096)
  for (std::int64_t c = 0; c < n; ++c) {
    // |Q|_F / (M d^2) <= quad_tol theta^3  <=>  d^2 >= |Q|_F / (quad_tol theta^3 M)
    const double q2 = t.qxx[c] * t.qxx[c] + t.qyy[c] * t.qyy[c] + t.qzz[c] * t.qzz[c] +
                      2 * (t.qxy[c] * t.qxy[c] + t.qxz[c] * t.qxz[c] + t.qyz[c] * t.qyz[c]);
    const double mono_d2 = quad_tol > 0 && t.mass[c] > 0 ? std::sqrt(q2) / (tol * t.mass[c])
                                                         : (t.mass[c] > 0 ? INFINITY : 0.0);
    t.walk[c] = {t.cx[c], t.cy[c], t.cz[c], t.r_open2[c], mono_d2,
                 t.begin[c], t.end[c], t.first_child[c], t.n_children[c]};
  }
}

template void compute_moments<InCoreParticles>(TreeNodes&, const InCoreParticles&, double, double, int);
template void compute_moments<PagedParticles>(TreeNodes&, const PagedParticles&, double, double, int);

}  // namespace gravpipe
