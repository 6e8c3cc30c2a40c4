// AVX-512 lane types for the force kernels: VF = 16 float lanes, VD = 8 double lanes.
// Include only from translation units compiled with -mavx512f -mavx512dq -mavx512vl -mfma,
// inside an ISA namespace. The interface is simd_avx2.hpp's, operation for operation, so
// the loops (kernel_loops.inl, tree_eval_loops.inl) run unchanged and every lane does the
// same arithmetic in the same order as under AVX2; only the rsqrt estimate differs.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace gravpipe::kernel::avx512 {

struct VF {
  __m512 v;
  static constexpr int W = 16;
};
struct VD {
  __m512d v;
  static constexpr int W = 8;
};
/// Per-lane excluded j index, in the integer width matching the float lanes.
struct ExclF {
  __m512i v;
};
struct ExclD {
  __m512i v;
};

inline VF operator+(VF a, VF b) { return {_mm512_add_ps(a.v, b.v)}; }
inline VF operator-(VF a, VF b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline VF operator*(VF a, VF b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline VF fmadd(VF a, VF b, VF c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline VF fnmadd(VF a, VF b, VF c) { return {_mm512_fnmadd_ps(a.v, b.v, c.v)}; }
inline VD operator+(VD a, VD b) { return {_mm512_add_pd(a.v, b.v)}; }
inline VD operator-(VD a, VD b) { return {_mm512_sub_pd(a.v, b.v)}; }
inline VD operator*(VD a, VD b) { return {_mm512_mul_pd(a.v, b.v)}; }
inline VD fmadd(VD a, VD b, VD c) { return {_mm512_fmadd_pd(a.v, b.v, c.v)}; }
inline VD fnmadd(VD a, VD b, VD c) { return {_mm512_fnmadd_pd(a.v, b.v, c.v)}; }

inline VF splat(float x) { return {_mm512_set1_ps(x)}; }
inline VD splat(double x) { return {_mm512_set1_pd(x)}; }
/// Broadcast from memory: the compiler folds it into a load (or an embedded {1to16}
/// broadcast operand), no shuffle.
inline VF broadcast(const float* p) { return {_mm512_set1_ps(*p)}; }
inline VD broadcast(const double* p) { return {_mm512_set1_pd(*p)}; }
inline VF load(const float* p) { return {_mm512_loadu_ps(p)}; }
inline VD load(const double* p) { return {_mm512_loadu_pd(p)}; }
template <class V>
inline V zero();
template <>
inline VF zero<VF>() { return {_mm512_setzero_ps()}; }
template <>
inline VD zero<VD>() { return {_mm512_setzero_pd()}; }

/// rsqrt_scaled(x) = rsqrt_scale(x) / sqrt(x), as in simd_avx2.hpp: the estimate y0 refined
/// by one Newton-Raphson step less its factor 1/2, 2 y1 = y0 (3 - x y0^2). rsqrt14's y0 is
/// better than AVX2's (relative error < 2^-14 against ~1.5 * 2^-12), so the step leaves
/// float rounding, not the estimate, as the error: within the AVX2 bound.
inline VF rsqrt_scaled(VF x) {
  const __m512 y = _mm512_rsqrt14_ps(x.v);
  const __m512 t = _mm512_fnmadd_ps(_mm512_mul_ps(x.v, y), y, _mm512_set1_ps(3.0f));
  return {_mm512_mul_ps(y, t)};
}
constexpr double rsqrt_scale(VF) { return 2.0; }
/// Double: correctly rounded square root and division, unscaled (bitwise as AVX2's).
inline VD rsqrt_scaled(VD x) { return {_mm512_div_pd(_mm512_set1_pd(1.0), _mm512_sqrt_pd(x.v))}; }
constexpr double rsqrt_scale(VD) { return 1.0; }

inline ExclF load_exclude_f(const std::int64_t* p) {
  alignas(64) std::int32_t e[16];
  for (int k = 0; k < 16; ++k) e[k] = static_cast<std::int32_t>(p[k]);
  return {_mm512_load_si512(e)};
}
inline ExclD load_exclude_d(const std::int64_t* p) { return {_mm512_loadu_si512(p)}; }
/// rsqrt_scaled(r2) in the lanes whose excluded index is not j, zero in those that is; an
/// excluded lane's r2 (0 for the self pair without softening) is replaced by 1 first, so
/// that no lane raises a floating-point exception (simd_avx2.hpp says why).
inline VF rsqrt_scaled_excluding(VF r2, ExclF ex, std::int64_t j) {
  const __mmask16 eq = _mm512_cmpeq_epi32_mask(ex.v, _mm512_set1_epi32(static_cast<std::int32_t>(j)));
  const VF rinv = rsqrt_scaled(VF{_mm512_mask_mov_ps(r2.v, eq, _mm512_set1_ps(1.0f))});
  return {_mm512_maskz_mov_ps(static_cast<__mmask16>(~eq), rinv.v)};
}
inline VD rsqrt_scaled_excluding(VD r2, ExclD ex, std::int64_t j) {
  const __mmask8 eq = _mm512_cmpeq_epi64_mask(ex.v, _mm512_set1_epi64(j));
  const VD rinv = rsqrt_scaled(VD{_mm512_mask_mov_pd(r2.v, eq, _mm512_set1_pd(1.0))});
  return {_mm512_maskz_mov_pd(static_cast<__mmask8>(~eq), rinv.v)};
}

/// True when every lane of a is greater than the same lane of b.
inline bool all_greater(VF a, VF b) {
  return _mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ) == static_cast<__mmask16>(0xffff);
}

/// dst[0..W) += scale * lanes of x, in float64: the blocked float64 accumulation of mixed
/// mode. scale is a power of two, so the product is exact.
inline void add_to(double* dst, VF x, double scale) {
  const __m512d s = _mm512_set1_pd(scale);
  const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x.v));
  const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x.v), 1)));
  _mm512_storeu_pd(dst, _mm512_fmadd_pd(lo, s, _mm512_loadu_pd(dst)));
  _mm512_storeu_pd(dst + 8, _mm512_fmadd_pd(hi, s, _mm512_loadu_pd(dst + 8)));
}
inline void add_to(double* dst, VD x, double scale) {
  _mm512_storeu_pd(dst, _mm512_fmadd_pd(x.v, _mm512_set1_pd(scale), _mm512_loadu_pd(dst)));
}

}  // namespace gravpipe::kernel::avx512
