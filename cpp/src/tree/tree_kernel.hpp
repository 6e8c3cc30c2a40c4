// Entry points of the tree list kernels, one per instruction set (tree_eval_loops.inl
// compiled by tree_kernel_generic.cpp, tree_kernel_avx2.cpp and tree_kernel_avx512.cpp).
// Internal to src/tree.
#pragma once
#include <cstddef>

#include "gravpipe/tree.hpp"

namespace gravpipe::tree_kernel {

struct EvalArgs {
  const GatheredList* list = nullptr;
  GroupSinks* sinks = nullptr;
  std::size_t n_i = 0;  // padded to a multiple of tree_i_pad(isa)
  double eps2 = 0;
  bool mixed = false;
};

namespace generic {
void evaluate(const EvalArgs& a);
}
#if defined(GRAVPIPE_HAVE_AVX2_KERNELS)
namespace avx2 {
void evaluate(const EvalArgs& a);
}
#endif
#if defined(GRAVPIPE_HAVE_AVX512_KERNELS)
namespace avx512 {
void evaluate(const EvalArgs& a);
}
#endif

}  // namespace gravpipe::tree_kernel
