// The tree list kernels compiled for generic.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "gravpipe/pair_interaction.hpp"
#include "../pipeline/simd_scalar.hpp"
#include "tree_kernel.hpp"

namespace gravpipe::tree_kernel::generic {
namespace kernel_lanes = gravpipe::kernel::generic;
#include "tree_eval_loops.inl"
}  // namespace gravpipe::tree_kernel::generic
