// The force kernels of CudaPipeline. The pairwise physics is add_pair (pair_interaction.hpp),
// the same function the CPU kernels use, here on one-lane device types.
//
// Layout: one thread per i-particle, kThreads i-particles per block taken in curve order
// (compact blocks), j-particles in curve order staged through shared memory one tile of
// kThreads at a time. Grid rows split the j-range when the i-set is too small to fill the
// GPU; reduce_rows then adds the rows in a fixed order (GRAPE-DR's reduction network), so
// results never depend on the split.
//
// Mixed precision without the cost of a float hi+lo difference in every pair: each block
// takes the centre o of its i-particles' bounding box (radius r, half its diagonal) as
// origin, in float64, and every j-tile is converted on its way into shared memory to float
// hi + lo coordinates relative to o. Using the hi parts alone, dx = fl(x_j - o) - fl(x_i - o)
// is off by at most 2^-24 (|x_j - o| + |x_i - o|) <= 2^-24 (|dx| + 2r) plus its own rounding.
// A tile whose bounding box is at least kFarGap * r from the block's box ("far") has
// |dx| >= r for all its pairs: the error stays below ~3.5 float ulps of dx, and the pair
// costs one float add per coordinate. Near tiles use (hi_j - hi_i) + (lo_j - lo_i), exact
// for close pairs (Sterbenz), as the CPU near path.
// Float sums over one tile are flushed to float64. The pair left out by `exclude` is
// tested only in the tile that holds it (a block vote per tile).
#pragma once
#include <cuda_runtime.h>

#include "device_lanes.cuh"
#include "device_sets.cuh"
#include "gravpipe/mixed_precision.hpp"  // split_double, the CPU's hi + lo split
#include "gravpipe/pair_interaction.hpp"

namespace gravpipe::cuda {

constexpr double kFarGap = 1.0;  // far: box gap >= kFarGap * block radius

/// The i-set of one call, in the caller's order, and the curve order to visit it in.
struct IView {
  const double* pos;            // 3 n_i
  const double* vel;            // 3 n_i, or null without jerk
  const std::int64_t* exclude;  // n_i caller's j indices (-1: none), or null
  const int* order;             // n_i: the k-th i of the curve order
  int n;
};

/// Per grid row partial sums, rows x n_i each, G-free (pot as +sum m/r), caller's order.
struct Partials {
  double *ax, *ay, *az, *pot, *jx, *jy, *jz;
  int stride;  // n_i
};

/// One i-particle's coordinates relative to its block origin, as float hi + lo.
struct IRel {
  float xh[3], xl[3], vh[3], vl[3];
};

/// One tile of j-particles relative to the block origin: (x, y, z, m) hi, (x, y, z) lo.
struct TileMixed {
  float4 ph[kThreads], pl[kThreads], vh[kThreads], vl[kThreads];
};

/// The pairs of one tile for one i-particle. kFar: hi parts only; kCheck: leave out local
/// index ex_k. kCount: the tile's length when known at compile time (a full tile: no
/// remainder code), 0 for the last, partial tile (count). Unrolled 16 deep: a complete
/// unroll of 128 pairs was measured slower (acc+jerk+pot 7.5e11 -> 5.5e11 /s on an H100,
/// instruction-cache pressure of four 128-pair variants).
template <bool kJerk, bool kFar, bool kCheck, int kCount>
__device__ inline void tile_pairs(PairSums<DF>& s, const TileMixed& t, const IRel& r, int count, int ex_k, DF eps2) {
  if (kCount > 0) count = kCount;
#pragma unroll 16
  for (int k = 0; k < count; ++k) {
    const float4 h = t.ph[k];
    DF dx{h.x - r.xh[0]}, dy{h.y - r.xh[1]}, dz{h.z - r.xh[2]};
    if (!kFar) {
      const float4 l = t.pl[k];
      dx.v += l.x - r.xl[0], dy.v += l.y - r.xl[1], dz.v += l.z - r.xl[2];
    }
    DF dvx{0}, dvy{0}, dvz{0};
    if (kJerk) {
      const float4 vh = t.vh[k];
      dvx = {vh.x - r.vh[0]}, dvy = {vh.y - r.vh[1]}, dvz = {vh.z - r.vh[2]};
      if (!kFar) {
        const float4 vl = t.vl[k];
        dvx.v += vl.x - r.vl[0], dvy.v += vl.y - r.vl[1], dvz.v += vl.z - r.vl[2];
      }
    }
    DF rinv = rsqrt_lane(softened_r2(dx, dy, dz, eps2));
    if (kCheck && k == ex_k) rinv = {0};
    add_pair<kJerk>(s, dx, dy, dz, dvx, dvy, dvz, DF{h.w}, rinv, DF{3});
  }
}

template <bool kJerk>
__device__ inline void tile_dispatch(PairSums<DF>& s, const TileMixed& t, const IRel& r, int count, int ex_k,
                                     bool far, bool check, DF eps2) {
  if (count == kThreads) {  // full tile: constant trip count
    if (far)
      check ? tile_pairs<kJerk, true, true, kThreads>(s, t, r, count, ex_k, eps2)
            : tile_pairs<kJerk, true, false, kThreads>(s, t, r, count, ex_k, eps2);
    else
      check ? tile_pairs<kJerk, false, true, kThreads>(s, t, r, count, ex_k, eps2)
            : tile_pairs<kJerk, false, false, kThreads>(s, t, r, count, ex_k, eps2);
  } else {
    far ? tile_pairs<kJerk, true, true, 0>(s, t, r, count, ex_k, eps2)
        : tile_pairs<kJerk, false, true, 0>(s, t, r, count, ex_k, eps2);
  }
}

template <bool kJerk>
__global__ void __launch_bounds__(kThreads) forces_mixed(JView j, IView in, float eps2, int tiles_per_row,
                                                         Partials out, unsigned long long* tile_counts) {
  __shared__ TileMixed tile;
  const int rank = blockIdx.x * kThreads + threadIdx.x;  // position in curve order
  const bool active = rank < in.n;
  const int i = active ? in.order[rank] : 0;
  double x[3] = {0, 0, 0}, v[3] = {0, 0, 0};
  for (int a = 0; a < 3; ++a) {
    if (active) x[a] = in.pos[3 * i + a];
    if (kJerk && active) v[a] = in.vel[3 * i + a];
  }
  const std::int64_t ex = (active && in.exclude) ? in.exclude[i] : -1;
  const int ex_slot = ex >= 0 ? j.slot_of[ex] : -1;

  // block origin: centre of the i bounding box (and of the velocity box for jerk)
  const Box bx = block_box(x, active);
  double origin[3], vorigin[3] = {0, 0, 0}, r2_block = 0;
  for (int a = 0; a < 3; ++a) {
    const double h = 0.5 * (bx.hi[a] - bx.lo[a]);
    origin[a] = bx.lo[a] + h, r2_block += h * h;
  }
  if (kJerk) {
    const Box bv = block_box(v, active);
    for (int a = 0; a < 3; ++a) vorigin[a] = 0.5 * (bv.lo[a] + bv.hi[a]);
  }
  IRel r;
  for (int a = 0; a < 3; ++a) {
    split_double(x[a] - origin[a], r.xh[a], r.xl[a]);
    split_double(v[a] - vorigin[a], r.vh[a], r.vl[a]);
  }

  double ax = 0, ay = 0, az = 0, pot = 0, jx = 0, jy = 0, jz = 0;
  unsigned far_tiles = 0;
  const int n_tiles = (j.n + kThreads - 1) / kThreads;
  const int t0 = blockIdx.y * tiles_per_row, t1 = min(n_tiles, t0 + tiles_per_row);
  for (int t = t0; t < t1; ++t) {
    const int base = t * kThreads, count = min(kThreads, j.n - base);
    if (threadIdx.x < count) {
      const D4 p = j.pos[base + threadIdx.x];
      float h[3], l[3];
      split_double(p.x - origin[0], h[0], l[0]);
      split_double(p.y - origin[1], h[1], l[1]);
      split_double(p.z - origin[2], h[2], l[2]);
      tile.ph[threadIdx.x] = make_float4(h[0], h[1], h[2], static_cast<float>(p.w));
      tile.pl[threadIdx.x] = make_float4(l[0], l[1], l[2], 0.0f);
      if (kJerk) {
        const D4 q = j.vel[base + threadIdx.x];
        split_double(q.x - vorigin[0], h[0], l[0]);
        split_double(q.y - vorigin[1], h[1], l[1]);
        split_double(q.z - vorigin[2], h[2], l[2]);
        tile.vh[threadIdx.x] = make_float4(h[0], h[1], h[2], 0.0f);
        tile.vl[threadIdx.x] = make_float4(l[0], l[1], l[2], 0.0f);
      }
    }
    // every thread computes the same far decision from the same block-wide values
    const bool far = box_gap2(bx, j.boxes[t]) >= kFarGap * kFarGap * r2_block;
    const bool check = __syncthreads_or(ex_slot >= base && ex_slot < base + count);
    far_tiles += far;
    PairSums<DF> s{{0}, {0}, {0}, {0}, {0}, {0}, {0}};
    tile_dispatch<kJerk>(s, tile, r, count, ex_slot - base, far, check, DF{eps2});
    ax += s.ax.v, ay += s.ay.v, az += s.az.v, pot += s.pot.v;
    if (kJerk) jx += s.jx.v, jy += s.jy.v, jz += s.jz.v;
    __syncthreads();
  }
  if (threadIdx.x == 0 && tile_counts) {
    atomicAdd(&tile_counts[0], static_cast<unsigned long long>(t1 > t0 ? t1 - t0 : 0));
    atomicAdd(&tile_counts[1], static_cast<unsigned long long>(far_tiles));
  }
  if (!active) return;
  const std::size_t at = static_cast<std::size_t>(blockIdx.y) * out.stride + i;
  out.ax[at] = ax, out.ay[at] = ay, out.az[at] = az, out.pot[at] = pot;
  if (kJerk) out.jx[at] = jx, out.jy[at] = jy, out.jz[at] = jz;
}

/// float64 throughout: absolute coordinates, the excluded pair tested in every pair.
template <bool kJerk>
__global__ void __launch_bounds__(kThreads) forces_double(JView j, IView in, double eps2, int tiles_per_row,
                                                          Partials out) {
  __shared__ D4 tp[kThreads], tv[kThreads];
  const int rank = blockIdx.x * kThreads + threadIdx.x;
  const bool active = rank < in.n;
  const int i = active ? in.order[rank] : 0;
  DD x[3] = {{0}, {0}, {0}}, v[3] = {{0}, {0}, {0}};
  for (int a = 0; a < 3; ++a) {
    if (active) x[a].v = in.pos[3 * i + a];
    if (kJerk && active) v[a].v = in.vel[3 * i + a];
  }
  const std::int64_t ex = (active && in.exclude) ? in.exclude[i] : -1;
  const int ex_slot = ex >= 0 ? j.slot_of[ex] : -1;
  PairSums<DD> s{{0}, {0}, {0}, {0}, {0}, {0}, {0}};
  const int n_tiles = (j.n + kThreads - 1) / kThreads;
  const int t0 = blockIdx.y * tiles_per_row, t1 = min(n_tiles, t0 + tiles_per_row);
  for (int t = t0; t < t1; ++t) {
    const int base = t * kThreads, count = min(kThreads, j.n - base);
    if (threadIdx.x < count) {
      tp[threadIdx.x] = j.pos[base + threadIdx.x];
      if (kJerk) tv[threadIdx.x] = j.vel[base + threadIdx.x];
    }
    __syncthreads();
    for (int k = 0; k < count; ++k) {
      const D4 p = tp[k];
      const DD dx{p.x - x[0].v}, dy{p.y - x[1].v}, dz{p.z - x[2].v};
      DD dvx{0}, dvy{0}, dvz{0};
      if (kJerk) dvx = {tv[k].x - v[0].v}, dvy = {tv[k].y - v[1].v}, dvz = {tv[k].z - v[2].v};
      DD rinv = rsqrt_lane(softened_r2(dx, dy, dz, DD{eps2}));
      if (base + k == ex_slot) rinv = {0};
      add_pair<kJerk>(s, dx, dy, dz, dvx, dvy, dvz, DD{p.w}, rinv, DD{3});
    }
    __syncthreads();
  }
  if (!active) return;
  const std::size_t at = static_cast<std::size_t>(blockIdx.y) * out.stride + i;
  out.ax[at] = s.ax.v, out.ay[at] = s.ay.v, out.az[at] = s.az.v, out.pot[at] = s.pot.v;
  if (kJerk) out.jx[at] = s.jx.v, out.jy[at] = s.jy.v, out.jz[at] = s.jz.v;
}

/// Add the rows of the partials in row order (deterministic), apply G and the sign of the
/// potential: acc, jerk (n_i, 3) row-major and pot (n_i), caller's order.
__global__ void reduce_rows(Partials p, int rows, int n_i, bool jerk, double G, double* acc, double* pot,
                            double* jrk) {
  const int i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= n_i) return;
  double ax = 0, ay = 0, az = 0, ph = 0, jx = 0, jy = 0, jz = 0;
  for (int r = 0; r < rows; ++r) {
    const std::size_t at = static_cast<std::size_t>(r) * p.stride + i;
    ax += p.ax[at], ay += p.ay[at], az += p.az[at], ph += p.pot[at];
    if (jerk) jx += p.jx[at], jy += p.jy[at], jz += p.jz[at];
  }
  acc[3 * i] = G * ax, acc[3 * i + 1] = G * ay, acc[3 * i + 2] = G * az;
  pot[i] = -G * ph;
  if (jerk) jrk[3 * i] = G * jx, jrk[3 * i + 1] = G * jy, jrk[3 * i + 2] = G * jz;
}

}  // namespace gravpipe::cuda
