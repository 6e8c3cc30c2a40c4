// The force kernels for any CPU: the same loop template with one-lane "vectors".
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "gravpipe/cpu_features.hpp"
#include "gravpipe/kernel.hpp"
#include "gravpipe/pair_interaction.hpp"
#include "simd_scalar.hpp"

namespace gravpipe::kernel::generic {
static_assert(VF::W == isa_float_lanes(Isa::Generic), "lane count known to the dispatch");
#include "kernel_loops.inl"
}  // namespace gravpipe::kernel::generic
