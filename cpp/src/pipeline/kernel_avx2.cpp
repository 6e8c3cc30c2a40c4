// The force kernels compiled for AVX2 + FMA (this file alone gets -mavx2 -mfma), chosen at
// run time when the CPU supports them. Nothing but the kernels goes in here, so no
// AVX2-compiled inline function can leak into code that runs on older CPUs.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "gravpipe/cpu_features.hpp"
#include "gravpipe/kernel.hpp"
#include "gravpipe/pair_interaction.hpp"
#include "simd_avx2.hpp"

namespace gravpipe::kernel::avx2 {
static_assert(VF::W == isa_float_lanes(Isa::Avx2), "lane count known to the dispatch");
#include "kernel_loops.inl"
}  // namespace gravpipe::kernel::avx2
