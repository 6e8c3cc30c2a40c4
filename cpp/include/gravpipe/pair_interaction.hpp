// The pairwise gravitational interaction, written once for every backend and lane type.
//
// V is a lane type with +, -, *, fmadd(a,b,c) = a*b + c and fnmadd(a,b,c) = c - a*b: a
// scalar float/double or a SIMD vector. The loops that feed it (tiling, SIMD blocking,
// tree lists) live elsewhere; the physics lives here.
#pragma once

#include "gravpipe/host_device.hpp"  // the CUDA kernels (cpp/src/cuda) call the same functions

namespace gravpipe {

/// Running sums for one set of i lanes. pot accumulates sum m/r (positive); the sign and
/// G are applied when results are read out.
template <class V>
struct PairSums {
  V ax, ay, az, pot;
  V jx, jy, jz;
};

/// r^2 = |d|^2 + eps^2 (Plummer softening).
template <class V>
GRAVPIPE_HOST_DEVICE inline V softened_r2(V dx, V dy, V dz, V eps2) {
  return fmadd(dz, dz, fmadd(dy, dy, fmadd(dx, dx, eps2)));
}

/// Add one j-particle's pull to the sums, given d = x_j - x_i and rinv = 1/r (zero for
/// an excluded pair). With kJerk, also dv = v_j - v_i and the jerk
/// m [dv / r^3 - 3 (d.dv) d / r^5].
template <bool kJerk, class V>
GRAVPIPE_HOST_DEVICE inline void add_pair(PairSums<V>& s, V dx, V dy, V dz, V dvx, V dvy, V dvz, V mj, V rinv,
                     V three) {
  const V mr = mj * rinv;
  const V rinv2 = rinv * rinv;
  const V mr3 = mr * rinv2;
  s.pot = s.pot + mr;
  s.ax = fmadd(mr3, dx, s.ax);
  s.ay = fmadd(mr3, dy, s.ay);
  s.az = fmadd(mr3, dz, s.az);
  if constexpr (kJerk) {
    const V rv = fmadd(dz, dvz, fmadd(dy, dvy, dx * dvx));
    const V alpha = three * rv * rinv2;
    s.jx = fmadd(mr3, fnmadd(alpha, dx, dvx), s.jx);
    s.jy = fmadd(mr3, fnmadd(alpha, dy, dvy), s.jy);
    s.jz = fmadd(mr3, fnmadd(alpha, dz, dvz), s.jz);
  }
}

}  // namespace gravpipe
