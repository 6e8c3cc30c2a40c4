// AVX2 + FMA lane types for the force kernels: VF = 8 float lanes, VD = 4 double lanes.
// Include only from translation units compiled with -mavx2 -mfma, inside an ISA namespace.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace gravpipe::kernel::avx2 {

struct VF {
  __m256 v;
  static constexpr int W = 8;
};
struct VD {
  __m256d v;
  static constexpr int W = 4;
};
/// Per-lane excluded j index, in the integer width matching the float lanes.
struct ExclF {
  __m256i v;
};
struct ExclD {
  __m256i v;
};

inline VF operator+(VF a, VF b) { return {_mm256_add_ps(a.v, b.v)}; }
inline VF operator-(VF a, VF b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline VF operator*(VF a, VF b) { return {_mm256_mul_ps(a.v, b.v)}; }
inline VF fmadd(VF a, VF b, VF c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
inline VF fnmadd(VF a, VF b, VF c) { return {_mm256_fnmadd_ps(a.v, b.v, c.v)}; }
inline VD operator+(VD a, VD b) { return {_mm256_add_pd(a.v, b.v)}; }
inline VD operator-(VD a, VD b) { return {_mm256_sub_pd(a.v, b.v)}; }
inline VD operator*(VD a, VD b) { return {_mm256_mul_pd(a.v, b.v)}; }
inline VD fmadd(VD a, VD b, VD c) { return {_mm256_fmadd_pd(a.v, b.v, c.v)}; }
inline VD fnmadd(VD a, VD b, VD c) { return {_mm256_fnmadd_pd(a.v, b.v, c.v)}; }

inline VF splat(float x) { return {_mm256_set1_ps(x)}; }
inline VD splat(double x) { return {_mm256_set1_pd(x)}; }
/// Broadcast from memory: a pure load on current x86 cores (no shuffle port used).
inline VF broadcast(const float* p) { return {_mm256_broadcast_ss(p)}; }
inline VD broadcast(const double* p) { return {_mm256_broadcast_sd(p)}; }
inline VF load(const float* p) { return {_mm256_loadu_ps(p)}; }
inline VD load(const double* p) { return {_mm256_loadu_pd(p)}; }
template <class V>
inline V zero();
template <>
inline VF zero<VF>() { return {_mm256_setzero_ps()}; }
template <>
inline VD zero<VD>() { return {_mm256_setzero_pd()}; }

/// rsqrt_scaled(x) = rsqrt_scale(x) / sqrt(x), the scale an exact power of two that the
/// loops take out when they flush their sums (kernel_loops.inl).
/// Float: the hardware estimate y0 (~12 bits) refined by one Newton-Raphson step, less its
/// factor 1/2: 2 y1 = y0 (3 - x y0^2), ~23 bits (max relative error ~2e-7).
inline VF rsqrt_scaled(VF x) {
  const __m256 y = _mm256_rsqrt_ps(x.v);
  const __m256 t = _mm256_fnmadd_ps(_mm256_mul_ps(x.v, y), y, _mm256_set1_ps(3.0f));
  return {_mm256_mul_ps(y, t)};
}
constexpr double rsqrt_scale(VF) { return 2.0; }
/// Double: correctly rounded square root and division, unscaled.
inline VD rsqrt_scaled(VD x) { return {_mm256_div_pd(_mm256_set1_pd(1.0), _mm256_sqrt_pd(x.v))}; }
constexpr double rsqrt_scale(VD) { return 1.0; }

inline ExclF load_exclude_f(const std::int64_t* p) {
  alignas(32) std::int32_t e[8];
  for (int k = 0; k < 8; ++k) e[k] = static_cast<std::int32_t>(p[k]);
  return {_mm256_load_si256(reinterpret_cast<const __m256i*>(e))};
}
inline ExclD load_exclude_d(const std::int64_t* p) {
  return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))};
}
/// rsqrt_scaled(r2) in the lanes whose excluded index is not j, zero in those that is.
/// An excluded lane's r2 is replaced by 1 before the root: it is 0 for the self pair
/// without softening, and 0 * rsqrt(0) in the Newton step (or 1 / sqrt(0) in double)
/// would raise FE_INVALID (FE_DIVBYZERO) in the host, which traps where the host enables
/// it (gfortran -ffpe-trap=invalid), though the lane is zeroed after.
inline VF rsqrt_scaled_excluding(VF r2, ExclF ex, std::int64_t j) {
  const __m256 eq = _mm256_castsi256_ps(_mm256_cmpeq_epi32(ex.v, _mm256_set1_epi32(static_cast<std::int32_t>(j))));
  const VF rinv = rsqrt_scaled(VF{_mm256_blendv_ps(r2.v, _mm256_set1_ps(1.0f), eq)});
  return {_mm256_andnot_ps(eq, rinv.v)};
}
inline VD rsqrt_scaled_excluding(VD r2, ExclD ex, std::int64_t j) {
  const __m256d eq = _mm256_castsi256_pd(_mm256_cmpeq_epi64(ex.v, _mm256_set1_epi64x(j)));
  const VD rinv = rsqrt_scaled(VD{_mm256_blendv_pd(r2.v, _mm256_set1_pd(1.0), eq)});
  return {_mm256_andnot_pd(eq, rinv.v)};
}

/// True when every lane of a is greater than the same lane of b.
inline bool all_greater(VF a, VF b) {
  return _mm256_movemask_ps(_mm256_cmp_ps(a.v, b.v, _CMP_GT_OQ)) == 0xff;
}

/// dst[0..W) += scale * lanes of x, in float64: the blocked float64 accumulation of mixed
/// mode. scale is a power of two, so the product is exact.
inline void add_to(double* dst, VF x, double scale) {
  const __m256d s = _mm256_set1_pd(scale);
  const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x.v));
  const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x.v, 1));
  _mm256_storeu_pd(dst, _mm256_fmadd_pd(lo, s, _mm256_loadu_pd(dst)));
  _mm256_storeu_pd(dst + 4, _mm256_fmadd_pd(hi, s, _mm256_loadu_pd(dst + 4)));
}
inline void add_to(double* dst, VD x, double scale) {
  _mm256_storeu_pd(dst, _mm256_fmadd_pd(x.v, _mm256_set1_pd(scale), _mm256_loadu_pd(dst)));
}

}  // namespace gravpipe::kernel::avx2
