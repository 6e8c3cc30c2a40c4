// The tree list kernels compiled for avx2 (this file alone gets -mavx2 -mfma; chosen at run
// time when the CPU has them).
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "gravpipe/pair_interaction.hpp"
#include "../pipeline/simd_avx2.hpp"
#include "tree_kernel.hpp"

namespace gravpipe::tree_kernel::avx2 {
namespace kernel_lanes = gravpipe::kernel::avx2;
#include "tree_eval_loops.inl"
}  // namespace gravpipe::tree_kernel::avx2
