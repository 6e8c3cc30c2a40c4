// Portable one-lane "vectors" for the generic kernels: the same loop template as the SIMD
// builds, compiled for any CPU. Plain a*b + c, not std::fma, which is a slow library call
// on targets without hardware FMA.
#pragma once
#include <cmath>
#include <cstdint>

namespace gravpipe::kernel::generic {

struct VF {
  float v;
  static constexpr int W = 1;
};
struct VD {
  double v;
  static constexpr int W = 1;
};
struct ExclF {
  std::int64_t v;
};
using ExclD = ExclF;

inline VF operator+(VF a, VF b) { return {a.v + b.v}; }
inline VF operator-(VF a, VF b) { return {a.v - b.v}; }
inline VF operator*(VF a, VF b) { return {a.v * b.v}; }
inline VF fmadd(VF a, VF b, VF c) { return {a.v * b.v + c.v}; }
inline VF fnmadd(VF a, VF b, VF c) { return {c.v - a.v * b.v}; }
inline VD operator+(VD a, VD b) { return {a.v + b.v}; }
inline VD operator-(VD a, VD b) { return {a.v - b.v}; }
inline VD operator*(VD a, VD b) { return {a.v * b.v}; }
inline VD fmadd(VD a, VD b, VD c) { return {a.v * b.v + c.v}; }
inline VD fnmadd(VD a, VD b, VD c) { return {c.v - a.v * b.v}; }

inline VF splat(float x) { return {x}; }
inline VD splat(double x) { return {x}; }
inline VF broadcast(const float* p) { return {*p}; }
inline VD broadcast(const double* p) { return {*p}; }
inline VF load(const float* p) { return {*p}; }
inline VD load(const double* p) { return {*p}; }
template <class V>
inline V zero() { return {0}; }

/// rsqrt_scale / sqrt(x), the scale a power of two (as for the AVX2 float Newton step).
inline VF rsqrt_scaled(VF x) { return {2.0f / std::sqrt(x.v)}; }
constexpr double rsqrt_scale(VF) { return 2.0; }
inline VD rsqrt_scaled(VD x) { return {1.0 / std::sqrt(x.v)}; }
constexpr double rsqrt_scale(VD) { return 1.0; }

inline ExclF load_exclude_f(const std::int64_t* p) { return {*p}; }
inline ExclD load_exclude_d(const std::int64_t* p) { return {*p}; }
/// rsqrt_scaled(r2), or zero for an excluded pair, whose r2 (0 for the self pair without
/// softening) never reaches the division: 1 / sqrt(0) would raise FE_DIVBYZERO in the host
/// (simd_avx2.hpp), and the compiler may compute both sides of a select.
inline VF rsqrt_scaled_excluding(VF r2, ExclF ex, std::int64_t j) {
  const bool out = ex.v == j;
  const VF rinv = rsqrt_scaled(VF{out ? 1.0f : r2.v});
  return {out ? 0.0f : rinv.v};
}
inline VD rsqrt_scaled_excluding(VD r2, ExclD ex, std::int64_t j) {
  const bool out = ex.v == j;
  const VD rinv = rsqrt_scaled(VD{out ? 1.0 : r2.v});
  return {out ? 0.0 : rinv.v};
}

inline bool all_greater(VF a, VF b) { return a.v > b.v; }

/// *dst += scale * x in float64; scale is a power of two, so the product is exact.
inline void add_to(double* dst, VF x, double scale) { *dst += scale * static_cast<double>(x.v); }
inline void add_to(double* dst, VD x, double scale) { *dst += scale * x.v; }

}  // namespace gravpipe::kernel::generic
