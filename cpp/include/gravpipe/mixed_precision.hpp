// The float hi + lo split of mixed precision, shared by the CPU pipeline and the CUDA
// kernels: both must cut a float64 coordinate into the same two floats, or the backends
// would disagree by more than their arithmetic does.
#pragma once

#include "gravpipe/host_device.hpp"

namespace gravpipe {

/// Hide a value from the host optimiser. GCC 12.2 at -O2 (SLP vectorizer) folds
/// (double)(float)x back to x when several splits sit side by side, which silently zeroes
/// every lo part (reproduced with a 6-line loop; fixed by -fno-tree-slp-vectorize). The
/// empty asm makes the rounded value opaque, so the round trip must really happen. Device
/// code needs no barrier (nvcc does not fold the round trip) and cannot take the asm.
GRAVPIPE_HOST_DEVICE inline float opaque(float h) {
#if defined(__CUDA_ARCH__)
  // device pass: nothing to hide
#elif defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  asm("" : "+x"(h));
#elif defined(__GNUC__) && defined(__aarch64__)
  asm("" : "+w"(h));
#elif defined(__GNUC__)
  asm("" : "+m"(h));
#endif
  return h;
}

/// Split x into hi + lo floats with hi = fl32(x) and lo = fl32(x - hi): ~48 bits of x, so
/// differences of split values keep float64-level precision relative to |x|.
GRAVPIPE_HOST_DEVICE inline void split_double(double x, float& hi, float& lo) {
  const float h = opaque(static_cast<float>(x));
  hi = h;
  lo = static_cast<float>(x - static_cast<double>(h));
}

}  // namespace gravpipe
