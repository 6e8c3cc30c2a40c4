// The octree's one rule, shared by the in-core build (tree_build.cpp) and the out-of-core one
// (paged_tree_build.cpp), so that both make the same cells: a cell at level L holds the
// particles whose keys share the top 3L bits, so its children are the runs of equal 3-bit
// digit at level L+1, found by binary search in the sorted keys. Internal to src/tree.
#pragma once
#include <cstdint>

#include "gravpipe/tree.hpp"

namespace gravpipe {

/// The octant digit of `key` below a cell at `level` (0 = root).
inline unsigned octant_digit(std::uint64_t key, int level) {
  return static_cast<unsigned>(key >> (3 * (kTreeMaxLevel - 1 - level))) & 7u;
}

/// Whether the cell [b, e) at `level` is split: more than n_leaf particles above the depth
/// limit (at level 21 all keys in a cell are equal: identical grid points).
inline bool splits(std::int64_t b, std::int64_t e, int level, int n_leaf) {
  return e - b > n_leaf && level < kTreeMaxLevel;
}

/// Whether a cell of `count` particles, not below another group cell, is a self-gravity group
/// (group_cells, and the out-of-core build's groups): at most n_crit particles, or a leaf.
inline bool is_group_cell(std::int64_t count, bool split, int n_crit) { return count <= n_crit || !split; }

/// Call child(lo, hi) for each non-empty octant of the cell [b, e) at `level`, in curve
/// order. key(i): the i-th sorted key (an array or pages).
template <class Keys, class Child>
void for_each_child(const Keys& key, std::int64_t b, std::int64_t e, int level, Child child) {
  std::int64_t lo = b;
  while (lo < e) {
    const unsigned d = octant_digit(key(lo), level);
    // the first index in (lo, e) whose digit exceeds d
    std::int64_t first = lo + 1, count = e - first;
    while (count > 0) {
      const std::int64_t half = count / 2, mid = first + half;
      if (octant_digit(key(mid), level) <= d)
        first = mid + 1, count -= half + 1;
      else
        count = half;
    }
    child(lo, first);
    lo = first;
  }
}

}  // namespace gravpipe
