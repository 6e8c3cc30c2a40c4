// Device-side layouts of the j- and i-sets and the kernels that fill them: packing float64
// input into (x, y, z, m) records, bounding boxes, Morton keys, the gather/scatter between
// the caller's order and curve order, the Hermite predictor, and per-tile bounding boxes.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "gravpipe/morton.hpp"

namespace gravpipe::cuda {

constexpr int kThreads = 128;  // threads per block = i-particles per block = j per shared tile

/// Four doubles, 32-byte aligned (one 256-bit load; CUDA 13 deprecates double4).
struct alignas(32) D4 {
  double x, y, z, w;
};

/// Axis-aligned box, float64.
struct Box {
  double lo[3], hi[3];
};

/// The j-memory in curve order (slot s holds the caller's particle user_of[s]).
struct JView {
  const D4* pos;           // (x, y, z, m) per slot
  const D4* vel;           // (vx, vy, vz, 0) per slot, or null
  const Box* boxes;        // per tile of kThreads slots: the bounding box of its positions
  const int* slot_of;      // caller's index -> slot
  int n;
};

/// The bounding box of kThreads points (one per thread; invalid threads ignored), returned
/// to every thread of the block. Contains two __syncthreads.
__device__ inline Box block_box(const double p[3], bool valid) {
  __shared__ double part[6][kThreads / 32];
  double v[6];
  for (int a = 0; a < 3; ++a) {
    v[a] = valid ? p[a] : INFINITY;
    v[3 + a] = valid ? p[a] : -INFINITY;
  }
  for (int off = 16; off > 0; off >>= 1)
    for (int a = 0; a < 3; ++a) {
      v[a] = fmin(v[a], __shfl_xor_sync(0xffffffffu, v[a], off));
      v[3 + a] = fmax(v[3 + a], __shfl_xor_sync(0xffffffffu, v[3 + a], off));
    }
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0)
    for (int k = 0; k < 6; ++k) part[k][warp] = v[k];
  __syncthreads();
  Box b;
  for (int a = 0; a < 3; ++a) {
    b.lo[a] = part[a][0], b.hi[a] = part[3 + a][0];
    for (int w = 1; w < kThreads / 32; ++w) b.lo[a] = fmin(b.lo[a], part[a][w]), b.hi[a] = fmax(b.hi[a], part[3 + a][w]);
  }
  __syncthreads();  // part[] may be reused by the caller's next block_box
  return b;
}

/// Pass 1 of a bounding box over n points (3n row-major): one box per block.
__global__ void box_partials(const double* xyz, int n, Box* partial) {
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (int k = blockIdx.x * kThreads + threadIdx.x; k < n; k += gridDim.x * kThreads)
    for (int a = 0; a < 3; ++a) lo[a] = fmin(lo[a], xyz[3 * k + a]), hi[a] = fmax(hi[a], xyz[3 * k + a]);
  const Box bl = block_box(lo, true), bh = block_box(hi, true);
  if (threadIdx.x == 0) {
    Box b;
    for (int a = 0; a < 3; ++a) b.lo[a] = bl.lo[a], b.hi[a] = bh.hi[a];
    partial[blockIdx.x] = b;
  }
}

/// Pass 2: one block folds the partial boxes (count <= kThreads) into box[0].
__global__ void box_fold(const Box* partial, int count, Box* box) {
  const bool valid = threadIdx.x < count;
  const Box p = valid ? partial[threadIdx.x] : Box{};
  const Box bl = block_box(p.lo, valid), bh = block_box(p.hi, valid);
  if (threadIdx.x == 0) {
    Box b;
    for (int a = 0; a < 3; ++a) b.lo[a] = bl.lo[a], b.hi[a] = bh.hi[a];
    *box = b;
  }
}

/// 30-bit Morton keys (10 bits per axis) of n points inside *box (outside points clamp to
/// its faces) and the identity permutation. Keys decide only the tiling, never results.
__global__ void curve_keys(const double* xyz, int n, const Box* box, std::uint32_t* key, int* index) {
  const int k = blockIdx.x * kThreads + threadIdx.x;
  if (k >= n) return;
  const Box b = *box;
  const double size = fmax(fmax(b.hi[0] - b.lo[0], b.hi[1] - b.lo[1]), fmax(b.hi[2] - b.lo[2], 1e-300));
  std::uint32_t q[3];
  for (int a = 0; a < 3; ++a) {
    const double u = (xyz[3 * k + a] - b.lo[a]) / size * 1024.0;
    q[a] = static_cast<std::uint32_t>(fmin(fmax(u, 0.0), 1023.0));
  }
  key[k] = static_cast<std::uint32_t>(morton_key(q[0], q[1], q[2]));
  index[k] = k;
}

/// j-memory write in curve order: slot s takes caller's particle user_of[s].
__global__ void gather_j(const double* pos, const double* mass, const double* vel, const int* user_of, int n,
                         D4* jpos, D4* jvel, int* slot_of) {
  const int s = blockIdx.x * kThreads + threadIdx.x;
  if (s >= n) return;
  const int u = user_of[s];
  jpos[s] = D4{pos[3 * u], pos[3 * u + 1], pos[3 * u + 2], mass[u]};
  if (vel) jvel[s] = D4{vel[3 * u], vel[3 * u + 1], vel[3 * u + 2], 0.0};
  slot_of[u] = s;
}

/// update_j: new positions/velocities, same slots (masses kept).
__global__ void regather_j(const double* pos, const double* vel, const int* user_of, int n, D4* jpos, D4* jvel) {
  const int s = blockIdx.x * kThreads + threadIdx.x;
  if (s >= n) return;
  const int u = user_of[s];
  jpos[s] = D4{pos[3 * u], pos[3 * u + 1], pos[3 * u + 2], jpos[s].w};
  if (vel) jvel[s] = D4{vel[3 * u], vel[3 * u + 1], vel[3 * u + 2], 0.0};
}

/// The Hermite predictor's coefficients per slot, at each particle's own time t (ticks).
struct TaylorView {
  D4 *x, *v, *a, *j;
  std::int64_t* t;
};

/// Write the coefficients of k particles (caller's indices idx, arrays 3k row-major).
__global__ void scatter_taylor(const std::int64_t* idx, const double* x, const double* v, const double* a,
                               const double* jk, const std::int64_t* t, int k, const int* slot_of, TaylorView tv) {
  const int m = blockIdx.x * kThreads + threadIdx.x;
  if (m >= k) return;
  const int s = slot_of[idx[m]];
  tv.x[s] = D4{x[3 * m], x[3 * m + 1], x[3 * m + 2], 0.0};
  tv.v[s] = D4{v[3 * m], v[3 * m + 1], v[3 * m + 2], 0.0};
  tv.a[s] = D4{a[3 * m], a[3 * m + 1], a[3 * m + 2], 0.0};
  tv.j[s] = D4{jk[3 * m], jk[3 * m + 1], jk[3 * m + 2], 0.0};
  tv.t[s] = t[m];
}

/// Predict every slot to time `now` (ticks of length tick), in float64, with the same
/// expression as the host predictor (hermite.cpp): x + dt (v + dt (a/2 + dt j/6)).
__global__ void predict_j_kernel(TaylorView tv, int n, std::int64_t now, double tick, D4* jpos, D4* jvel) {
  const int s = blockIdx.x * kThreads + threadIdx.x;
  if (s >= n) return;
  const double dt = static_cast<double>(now - tv.t[s]) * tick;
  const D4 x = tv.x[s], v = tv.v[s], a = tv.a[s], j = tv.j[s];
  jpos[s] = D4{x.x + dt * (v.x + dt * (0.5 * a.x + dt * j.x / 6.0)),
               x.y + dt * (v.y + dt * (0.5 * a.y + dt * j.y / 6.0)),
               x.z + dt * (v.z + dt * (0.5 * a.z + dt * j.z / 6.0)), jpos[s].w};
  jvel[s] = D4{v.x + dt * (a.x + 0.5 * dt * j.x), v.y + dt * (a.y + 0.5 * dt * j.y),
               v.z + dt * (a.z + 0.5 * dt * j.z), 0.0};
}

/// Bounding box of each tile of kThreads slots.
__global__ void tile_boxes(const D4* jpos, int n, Box* boxes) {
  const int s = blockIdx.x * kThreads + threadIdx.x;
  const bool valid = s < n;
  const double p[3] = {valid ? jpos[s].x : 0.0, valid ? jpos[s].y : 0.0, valid ? jpos[s].z : 0.0};
  const Box b = block_box(p, valid);
  if (threadIdx.x == 0) boxes[blockIdx.x] = b;
}

/// Squared distance between two boxes (0 when they overlap).
__device__ inline double box_gap2(const Box& a, const Box& b) {
  double d2 = 0;
  for (int k = 0; k < 3; ++k) {
    const double g = fmax(0.0, fmax(a.lo[k] - b.hi[k], b.lo[k] - a.hi[k]));
    d2 += g * g;
  }
  return d2;
}

}  // namespace gravpipe::cuda
