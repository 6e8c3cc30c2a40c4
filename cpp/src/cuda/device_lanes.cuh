// One-lane device types for add_pair (pair_interaction.hpp) and the hardware reciprocal
// square root, shared by the direct kernels (force_kernels.cuh) and the tree's list kernel
// (tree_list_kernels.cuh): both evaluate the one pairwise function on the same lanes.
#pragma once
#include <cuda_runtime.h>

namespace gravpipe::cuda {

// ---- one-lane device types for add_pair -------------------------------------------------
struct DF {
  float v;
};
struct DD {
  double v;
};
__device__ inline DF operator+(DF a, DF b) { return {a.v + b.v}; }
__device__ inline DF operator*(DF a, DF b) { return {a.v * b.v}; }
__device__ inline DF fmadd(DF a, DF b, DF c) { return {fmaf(a.v, b.v, c.v)}; }
__device__ inline DF fnmadd(DF a, DF b, DF c) { return {fmaf(-a.v, b.v, c.v)}; }
__device__ inline DD operator+(DD a, DD b) { return {a.v + b.v}; }
__device__ inline DD operator*(DD a, DD b) { return {a.v * b.v}; }
__device__ inline DD fmadd(DD a, DD b, DD c) { return {fma(a.v, b.v, c.v)}; }
__device__ inline DD fnmadd(DD a, DD b, DD c) { return {fma(-a.v, b.v, c.v)}; }

/// Hardware reciprocal square root (MUFU, ~2^-23 relative), flush-to-zero: no slow path.
__device__ inline DF rsqrt_lane(DF x) {
  float r;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x.v));
  return {r};
}
__device__ inline DD rsqrt_lane(DD x) { return {rsqrt(x.v)}; }

}  // namespace gravpipe::cuda
