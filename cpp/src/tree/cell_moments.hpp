// One cell's moments as values: the arithmetic of the moments pass (tree_moments.cpp) for
// one leaf, one parent or one walk record, shared by the in-core tree (TreeNodes' arrays)
// and the out-of-core one (records in pages, paged_cells.cpp), so that both compute every
// moment with the same operations in the same order: the same bits. Internal to src/tree.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "gravpipe/particle_view.hpp"
#include "gravpipe/tree.hpp"

namespace gravpipe {

/// Mass, centre of mass, particle bounding box and second moments about the com of a cell.
struct CellMoments {
  double m = 0, cx = 0, cy = 0, cz = 0;
  double lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
  double qxx = 0, qxy = 0, qxz = 0, qyy = 0, qyz = 0, qzz = 0, qtr = 0;  // Q traceless, T = sum m y^2
};

/// Set box, mass and com; a massless cell pulls nothing, and its com is put at the box
/// centre to stay finite.
inline void set_box_mass_com(CellMoments& c, const double lo[3], const double hi[3], double m, double sx, double sy,
                             double sz) {
  for (int a = 0; a < 3; ++a) c.lo[a] = lo[a], c.hi[a] = hi[a];
  c.m = m;
  c.cx = m > 0 ? sx / m : 0.5 * (lo[0] + hi[0]);
  c.cy = m > 0 ? sy / m : 0.5 * (lo[1] + hi[1]);
  c.cz = m > 0 ? sz / m : 0.5 * (lo[2] + hi[2]);
}

/// The moments of particles [b, e) of block p.
inline CellMoments leaf_moments(const ParticleBlock& p, std::int64_t b, std::int64_t e) {
  CellMoments c;
  double m = 0, sx = 0, sy = 0, sz = 0;
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (std::int64_t k = b; k < e; ++k) {
    const double mk = p.m(k), r[3] = {p.x(k), p.y(k), p.z(k)};
    m += mk, sx += mk * r[0], sy += mk * r[1], sz += mk * r[2];
    for (int a = 0; a < 3; ++a) lo[a] = std::min(lo[a], r[a]), hi[a] = std::max(hi[a], r[a]);
  }
  set_box_mass_com(c, lo, hi, m, sx, sy, sz);
  double xx = 0, xy = 0, xz = 0, yy = 0, yz = 0, zz = 0;
  for (std::int64_t k = b; k < e; ++k) {
    const double mk = p.m(k), dx = p.x(k) - c.cx, dy = p.y(k) - c.cy, dz = p.z(k) - c.cz;
    xx += mk * dx * dx, xy += mk * dx * dy, xz += mk * dx * dz;
    yy += mk * dy * dy, yz += mk * dy * dz, zz += mk * dz * dz;
  }
  const double tr = xx + yy + zz;
  c.qxx = 3 * xx - tr, c.qyy = 3 * yy - tr, c.qzz = 3 * zz - tr;
  c.qxy = 3 * xy, c.qxz = 3 * xz, c.qyz = 3 * yz;
  c.qtr = tr;
  return c;
}

/// The moments of a cell from its n children's (parallel-axis theorem).
inline CellMoments parent_moments(const CellMoments* kids, int n) {
  CellMoments c;
  double m = 0, sx = 0, sy = 0, sz = 0;
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (int q = 0; q < n; ++q) {
    const CellMoments& k = kids[q];
    m += k.m, sx += k.m * k.cx, sy += k.m * k.cy, sz += k.m * k.cz;
    for (int a = 0; a < 3; ++a) lo[a] = std::min(lo[a], k.lo[a]), hi[a] = std::max(hi[a], k.hi[a]);
  }
  set_box_mass_com(c, lo, hi, m, sx, sy, sz);
  double xx = 0, xy = 0, xz = 0, yy = 0, yz = 0, zz = 0, tr = 0;
  for (int q = 0; q < n; ++q) {
    // shift of the child's moments from its com to ours
    const CellMoments& k = kids[q];
    const double mk = k.m, dx = k.cx - c.cx, dy = k.cy - c.cy, dz = k.cz - c.cz;
    const double d2 = dx * dx + dy * dy + dz * dz;
    xx += k.qxx + mk * (3 * dx * dx - d2), yy += k.qyy + mk * (3 * dy * dy - d2);
    zz += k.qzz + mk * (3 * dz * dz - d2);
    xy += k.qxy + mk * 3 * dx * dy, xz += k.qxz + mk * 3 * dx * dz;
    yz += k.qyz + mk * 3 * dy * dz;
    tr += k.qtr + mk * d2;
  }
  c.qxx = xx, c.qxy = xy, c.qxz = xz, c.qyy = yy, c.qyz = yz, c.qzz = zz, c.qtr = tr;
  return c;
}

/// The longest side of the cell's bounding box.
inline double cell_size(const CellMoments& c) {
  return std::max({c.hi[0] - c.lo[0], c.hi[1] - c.lo[1], c.hi[2] - c.lo[2]});
}

/// (size/theta + delta)^2, delta the offset of the com from the box centre (Barnes 1994;
/// GADGET's "cell offset").
inline double opening_radius2(const CellMoments& c, double size, double theta) {
  const double ox = c.cx - 0.5 * (c.hi[0] + c.lo[0]);
  const double oy = c.cy - 0.5 * (c.hi[1] + c.lo[1]);
  const double oz = c.cz - 0.5 * (c.hi[2] + c.lo[2]);
  const double r = size / theta + std::sqrt(ox * ox + oy * oy + oz * oz);
  return r * r;
}

/// d^2 beyond which the cell's monopole alone suffices: |Q|_F / (M d^2) <= quad_tol theta^3
/// <=> d^2 >= |Q|_F / (quad_tol theta^3 M); infinity (never) without quad_tol. The dropped
/// term is held to the scale of the expansion's own truncation error at the opening radius,
/// ~theta^3, so that lowering theta still lowers the error.
inline double monopole_distance2(double m, double qxx, double qxy, double qxz, double qyy, double qyz, double qzz,
                                 double theta, double quad_tol) {
  const double tol = quad_tol * theta * theta * theta;
  const double q2 = qxx * qxx + qyy * qyy + qzz * qzz + 2 * (qxy * qxy + qxz * qxz + qyz * qyz);
  return quad_tol > 0 && m > 0 ? std::sqrt(q2) / (tol * m) : (m > 0 ? INFINITY : 0.0);
}

}  // namespace gravpipe
