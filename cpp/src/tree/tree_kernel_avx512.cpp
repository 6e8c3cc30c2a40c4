// The tree list kernels compiled for AVX-512 (this file alone gets -mavx512f -mavx512dq
// -mavx512vl -mfma; chosen at run time when the CPU and the OS support them).
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "gravpipe/pair_interaction.hpp"
#include "../pipeline/simd_avx512.hpp"
#include "tree_kernel.hpp"

namespace gravpipe::tree_kernel::avx512 {
namespace kernel_lanes = gravpipe::kernel::avx512;
#include "tree_eval_loops.inl"
}  // namespace gravpipe::tree_kernel::avx512
