// The force kernels compiled for AVX-512 (this file alone gets -mavx512f -mavx512dq
// -mavx512vl -mfma), chosen at run time when the CPU and the OS support them. Nothing but
// the kernels goes in here, so no AVX-512-compiled inline function can leak into code
// that runs on other CPUs.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "gravpipe/cpu_features.hpp"
#include "gravpipe/kernel.hpp"
#include "gravpipe/pair_interaction.hpp"
#include "simd_avx512.hpp"

namespace gravpipe::kernel::avx512 {
static_assert(VF::W == isa_float_lanes(Isa::Avx512), "lane count known to the dispatch");
#include "kernel_loops.inl"
}  // namespace gravpipe::kernel::avx512
