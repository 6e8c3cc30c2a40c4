// Morton (Z-order) keys: 21 bits per axis interleaved into 63 bits, on the host and in CUDA
// kernels. On the host they are the octant digits that hilbert.hpp turns into the curve
// keys the pipeline, the tree, the out-of-core pages and the MPI domains sort by
// (curve_order.hpp); the CUDA backend tiles its sets by 30-bit Morton keys directly.
#pragma once
#include <cstdint>

#include "gravpipe/host_device.hpp"

namespace gravpipe {

constexpr int kMortonBitsPerAxis = 21;

/// Spread the low 21 bits of v so that bit k moves to bit 3k.
GRAVPIPE_HOST_DEVICE inline std::uint64_t spread_bits_3(std::uint64_t v) {
  v &= 0x1fffffULL;
  v = (v | (v << 32)) & 0x1f00000000ffffULL;
  v = (v | (v << 16)) & 0x1f0000ff0000ffULL;
  v = (v | (v << 8)) & 0x100f00f00f00f00fULL;
  v = (v | (v << 4)) & 0x10c30c30c30c30c3ULL;
  v = (v | (v << 2)) & 0x1249249249249249ULL;
  return v;
}

GRAVPIPE_HOST_DEVICE inline std::uint64_t morton_key(std::uint32_t ix, std::uint32_t iy, std::uint32_t iz) {
  return spread_bits_3(ix) | (spread_bits_3(iy) << 1) | (spread_bits_3(iz) << 2);
}

}  // namespace gravpipe
