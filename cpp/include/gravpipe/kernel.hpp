// Entry points of the i x j force kernels, one set per instruction set. The loops are one
// template (cpp/src/pipeline/kernel_loops.inl) compiled once per ISA; the pairwise
// interaction they share is pair_interaction.hpp.
#pragma once
#include <cstddef>
#include <cstdint>

#include "gravpipe/j_memory.hpp"
#include "gravpipe/span.hpp"

namespace gravpipe::kernel {

/// What every kernel call shares: i-particles [i_begin, i_end) (multiples of kIPad, within
/// the padded i-memory) against all j-particles. Results are *added* to `out`, unscaled by
/// G: out.a += sum m d / r^3, out.pot += sum m / r, out.j += sum m (v/r^3 - 3 (d.v) d / r^5).
struct CallArgs {
  ResultMemory* out = nullptr;
  std::size_t i_begin = 0, i_end = 0;
  double eps2 = 0;
  bool with_jerk = false;
  bool with_exclude = false;
};

/// Mixed precision: j-memory in tiles (j_memory.hpp), exclusions as j-memory slots.
struct MixedArgs : CallArgs {
  Span<const JPosMixed> j_pos;
  Span<const JVelMixed> j_vel;          // empty unless with_jerk
  Span<const JRelMixed> j_rel;
  Span<const JVelRelMixed> j_vel_rel;   // empty unless with_jerk
  Span<const JTileMixed> tiles;
  const IMemoryMixed* i_mem = nullptr;
};

struct DoubleArgs : CallArgs {
  Span<const JPosDouble> j_pos;
  Span<const JVelDouble> j_vel;  // empty unless with_jerk
  const IMemoryDouble* i_mem = nullptr;
};

// forces_mixed returns how many (i-vector, j-tile) pairs took the far path.
namespace generic {
std::uint64_t forces_mixed(const MixedArgs& a);
void forces_double(const DoubleArgs& a);
}  // namespace generic

#if defined(GRAVPIPE_HAVE_AVX2_KERNELS)
namespace avx2 {
std::uint64_t forces_mixed(const MixedArgs& a);
void forces_double(const DoubleArgs& a);
}  // namespace avx2
#endif

#if defined(GRAVPIPE_HAVE_AVX512_KERNELS)
namespace avx512 {
std::uint64_t forces_mixed(const MixedArgs& a);
void forces_double(const DoubleArgs& a);
}  // namespace avx512
#endif

}  // namespace gravpipe::kernel
