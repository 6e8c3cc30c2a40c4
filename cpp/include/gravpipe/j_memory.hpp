// The pipeline's particle memories: what the "j-particle write" and "i-particle write"
// stages of the GRAPE model produce, in the layouts the kernels stream.
//
// j-particles are packed records (one 32-byte record per particle) because the kernels
// broadcast one j at a time to all SIMD lanes: a record is one cache-line half, read once.
// i-particles are structure-of-arrays, padded to a whole number of SIMD vectors, because
// the kernels load W consecutive i-particles into the W lanes of a vector.
#pragma once
#include <cstdint>
#include <vector>

#include "gravpipe/mixed_precision.hpp"  // split_double: the hi + lo pairs below

namespace gravpipe {

/// Mixed precision j-position: each coordinate as a float pair (hi + lo) that carries
/// ~48 bits, so differences keep float64-level precision relative to |x| (translation
/// invariance), while the inner arithmetic is float32.
struct JPosMixed {
  float xh, yh, zh, m;
  float xl, yl, zl, pad;
};
struct JVelMixed {
  float vxh, vyh, vzh, pad0;
  float vxl, vyl, vzl, pad1;
};
struct JPosDouble {
  double x, y, z, m;
};
struct JVelDouble {
  double vx, vy, vz, pad;
};
static_assert(sizeof(JPosMixed) == 32 && sizeof(JVelMixed) == 32, "j records are 32 bytes");
static_assert(sizeof(JPosDouble) == 32 && sizeof(JVelDouble) == 32, "j records are 32 bytes");

/// Mixed precision j-particles are grouped in tiles of kJTile consecutive particles (in
/// curve order, so a tile is compact in space). Within a tile, positions and velocities
/// are also stored relative to the tile's centre: for an i-particle far from the tile the
/// kernel forms d = (x_j - c) + (c - x_i) with one float add per coordinate, (c - x_i)
/// being computed once per tile from the hi+lo pairs. Near tiles use the hi+lo pairs.
constexpr std::size_t kJTile = 32;
/// A tile is "far" from an i-particle when |c - x_i| > kFarRadii * (tile radius); then
/// |d| > (kFarRadii - 1) R and the float error of d stays below (2 + 2/(kFarRadii - 1)) =
/// 6 ulp of |d| (measured force errors are unchanged from kFarRadii = 3; 1.5 puts ~80%
/// of the tiles of a Plummer sphere on the fast path at N = 16384).
constexpr double kFarRadii = 1.5;

struct JRelMixed {
  float xr, yr, zr, m;
};
struct JVelRelMixed {
  float vxr, vyr, vzr, pad;
};
struct JTileMixed {
  float cxh, cyh, czh, far_r2;    // centre (hi), (kFarRadii * radius)^2
  float cxl, cyl, czl, pad0;      // centre (lo)
  float cvxh, cvyh, cvzh, pad1;   // velocity centre (hi)
  float cvxl, cvyl, cvzl, pad2;   // velocity centre (lo)
};

/// i-particles for the mixed kernels, SoA, length padded to a multiple of kIPad.
struct IMemoryMixed {
  std::vector<float> xh, yh, zh, xl, yl, zl;
  std::vector<float> vxh, vyh, vzh, vxl, vyl, vzl;
  std::vector<std::int64_t> exclude;
};
/// i-particles for the double kernels, SoA, padded likewise.
struct IMemoryDouble {
  std::vector<double> x, y, z;
  std::vector<double> vx, vy, vz;
  std::vector<std::int64_t> exclude;
};

/// Results in float64 SoA, padded like the i-memory; G is applied when they are read out.
struct ResultMemory {
  std::vector<double> ax, ay, az, pot, jx, jy, jz;
};

/// Every i-memory is padded to a multiple of this: the widest i-block of the kernels (two
/// i-vectors of 8 float lanes, kernel_loops.inl).
constexpr std::size_t kIPad = 16;

}  // namespace gravpipe
