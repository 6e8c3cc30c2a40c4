// The tree's list kernel on the GPU: one thread block per group (a ListJob of a ListBatch,
// tree_list_batch.hpp), the group's i-particles on the block's threads (kListThreads at a
// time), its list staged through shared memory one tile of kListThreads entries at a time,
// as the direct kernels stage j-particles (force_kernels.cuh).
//
// The physics is that of the CPU list kernels (tree_eval_loops.inl), in mixed precision:
// float32 coordinates relative to the group's centre (rounded once, in float64, by gather
// and set_sinks), particles and monopoles through add_pair (pair_interaction.hpp), cells
// through the softened quadrupole term
//   pot: m/R + dQd / (2 R^5),  acc: (m/R^3 + 5/2 dQd/R^7) d - Q.d / R^5,
//   R^2 = |d|^2 + eps^2, d = com - x_i, dQd = d.Q.d - eps^2 T,
// and the masked particles (the first n_masked of the list) leave out the pair whose sorted
// index equals the sink's exclusion, by zeroing 1/r as the CPU does. 1/r is the hardware
// rsqrt (~2^-23 relative, the direct kernels' choice) rather than the CPU's S/r with one
// Newton step; the sums are unscaled (S = 1).
//
// Each tile's float32 sums are flushed to float64, so rounding grows with the tile
// (kListThreads terms), not with the list. A group's sums depend only on its own job,
// visited in a fixed order: results do not depend on the batch or on the other groups.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "device_lanes.cuh"
#include "gravpipe/pair_interaction.hpp"
#include "gravpipe/tree_list_batch.hpp"

namespace gravpipe::cuda {

/// Threads per block = entries per tile. Groups average ~n_crit/2 particles (n_crit 256
/// by default): 128 keeps most threads busy; larger groups take several passes.
constexpr int kListThreads = 128;

/// A packed batch in device memory (the arrays of ListBatch, same records).
struct ListBatchView {
  const ListJob* jobs;
  const float4* particles;      // (x, y, z, m) per entry
  const float4* cells;          // 3 per cell: (x, y, z, m), (qxx, qxy, qxz, qyy), (qyz, qzz, qtr, pad)
  const std::int64_t* pidx;     // sorted index of each masked particle
  const float4* sinks;          // (x, y, z, unused) per i-particle
  const std::int64_t* exclude;  // per i-particle: the sorted index to leave out, or -1
};

/// One tile of the list in shared memory: 2 + 1 + 6 KiB.
struct ListTiles {
  float4 p[kListThreads];
  std::int64_t idx[kListThreads];
  float4 c[3 * kListThreads];
};

/// One i-particle's float64 sums, each tile's float32 sums added once.
struct Sums64 {
  double ax = 0, ay = 0, az = 0, pot = 0;
  __device__ void flush(float fax, float fay, float faz, float fpot) { ax += fax, ay += fay, az += faz, pot += fpot; }
};

/// The first `count` particles of the tile on the i-particle at xi (ex: its exclusion).
template <bool kMasked>
__device__ inline void particle_tile(const ListTiles& t, int count, float4 xi, std::int64_t ex, DF eps2, Sums64& acc) {
  const DF zero{0.0f};
  PairSums<DF> s{zero, zero, zero, zero, zero, zero, zero};
#pragma unroll 8
  for (int k = 0; k < count; ++k) {
    const float4 e = t.p[k];
    const DF dx{e.x - xi.x}, dy{e.y - xi.y}, dz{e.z - xi.z};
    DF rinv = rsqrt_lane(softened_r2(dx, dy, dz, eps2));
    if (kMasked && t.idx[k] == ex) rinv = zero;  // the excluded pair (its 1/r may be inf)
    add_pair<false>(s, dx, dy, dz, zero, zero, zero, DF{e.w}, rinv, zero);
  }
  acc.flush(s.ax.v, s.ay.v, s.az.v, s.pot.v);
}

/// The first `count` cells of the tile (monopole + softened quadrupole) on xi.
__device__ inline void cell_tile(const ListTiles& t, int count, float4 xi, float eps2, Sums64& acc) {
  float ax = 0, ay = 0, az = 0, pot = 0;
#pragma unroll 4
  for (int k = 0; k < count; ++k) {
    const float4 a = t.c[3 * k], q1 = t.c[3 * k + 1], q2 = t.c[3 * k + 2];
    const float dx = a.x - xi.x, dy = a.y - xi.y, dz = a.z - xi.z;
    const float rinv = rsqrt_lane(softened_r2(DF{dx}, DF{dy}, DF{dz}, DF{eps2})).v;
    const float qdx = fmaf(q1.z, dz, fmaf(q1.y, dy, q1.x * dx));  // qxz dz + qxy dy + qxx dx
    const float qdy = fmaf(q2.x, dz, fmaf(q1.w, dy, q1.y * dx));  // qyz dz + qyy dy + qxy dx
    const float qdz = fmaf(q2.y, dz, fmaf(q2.x, dy, q1.z * dx));  // qzz dz + qyz dy + qxz dx
    const float dqd = fmaf(dz, qdz, fmaf(dy, qdy, fmaf(dx, qdx, -eps2 * q2.z)));  // d.Q.d - eps^2 T
    const float rinv2 = rinv * rinv, mr = a.w * rinv;
    const float rinv5 = rinv2 * rinv2 * rinv, dqd_r5 = dqd * rinv5;
    pot += fmaf(0.5f, dqd_r5, mr);
    const float coef = rinv2 * fmaf(2.5f, dqd_r5, mr);  // m/R^3 + 5/2 dQd/R^7
    ax = fmaf(-rinv5, qdx, fmaf(coef, dx, ax));
    ay = fmaf(-rinv5, qdy, fmaf(coef, dy, ay));
    az = fmaf(-rinv5, qdz, fmaf(coef, dz, az));
  }
  acc.flush(ax, ay, az, pot);
}

// The range loops below are entered by every thread of the block with the same bounds (they
// depend on the job only), so their __syncthreads are reached uniformly. The first barrier
// of a tile keeps its loads from overwriting a tile that another thread still reads.

/// Particles [begin, end) of the job, masked (exclusion tested) or not.
template <bool kMasked>
__device__ inline void particle_range(const ListBatchView& v, const ListJob& job, int begin, int end, float4 xi,
                                      std::int64_t ex, DF eps2, ListTiles& t, Sums64& acc) {
  for (int t0 = begin; t0 < end; t0 += kListThreads) {
    const int count = min(kListThreads, end - t0);
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < count) {
      const std::int64_t j = t0 + static_cast<int>(threadIdx.x);
      t.p[threadIdx.x] = v.particles[job.p_begin + j];
      if (kMasked) t.idx[threadIdx.x] = v.pidx[job.m_begin + j];
    }
    __syncthreads();
    particle_tile<kMasked>(t, count, xi, ex, eps2, acc);
  }
}

/// The job's quadrupole cells.
__device__ inline void cell_range(const ListBatchView& v, const ListJob& job, float4 xi, float eps2, ListTiles& t,
                                  Sums64& acc) {
  for (int t0 = 0; t0 < job.nc; t0 += kListThreads) {
    const int count = min(kListThreads, job.nc - t0);
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < count) {
      const std::int64_t c = job.c_begin + t0 + static_cast<int>(threadIdx.x);
      for (int w = 0; w < 3; ++w) t.c[3 * threadIdx.x + w] = v.cells[3 * c + w];
    }
    __syncthreads();
    cell_tile(t, count, xi, eps2, acc);
  }
}

/// One block per job: out[4 s + (0..3)] = (ax, ay, az, pot) of every sink s of the job,
/// unscaled by G, pot positive. Threads past the job's last sink compute on its first
/// (harmlessly: they write nothing) so that every thread reaches every barrier.
__global__ void __launch_bounds__(kListThreads) evaluate_lists(ListBatchView v, float eps2, double* out) {
  __shared__ ListTiles tiles;
  const ListJob job = v.jobs[blockIdx.x];
  const DF e2{eps2};
  for (int i0 = 0; i0 < job.ni; i0 += kListThreads) {
    const int i = i0 + static_cast<int>(threadIdx.x);
    const bool active = i < job.ni;
    const std::int64_t s = job.i_begin + (active ? i : 0);
    const float4 xi = v.sinks[s];
    const std::int64_t ex = active ? v.exclude[s] : -1;
    Sums64 acc;
    particle_range<true>(v, job, 0, job.n_masked, xi, ex, e2, tiles, acc);
    particle_range<false>(v, job, job.n_masked, job.np, xi, ex, e2, tiles, acc);
    cell_range(v, job, xi, eps2, tiles, acc);
    if (active) {
      double* o = out + kListResultWords * s;
      o[0] = acc.ax, o[1] = acc.ay, o[2] = acc.az, o[3] = acc.pot;
    }
  }
}

}  // namespace gravpipe::cuda
