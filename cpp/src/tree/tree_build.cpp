// The octree from sorted Morton keys. A cell at level L holds the particles whose keys
// share the top 3L bits, so its children are the runs of equal 3-bit digit at level L+1:
// found by binary search, no geometry needed. Cells are created breadth first, which
// puts the children of a cell next to each other and after their parent.
#include <algorithm>

#include "gravpipe/error.hpp"
#include "gravpipe/tree.hpp"

namespace gravpipe {

namespace {
/// The octant digit of `key` below a cell at `level` (0 = root).
inline unsigned digit(std::uint64_t key, int level) {
  return static_cast<unsigned>(key >> (3 * (kTreeMaxLevel - 1 - level))) & 7u;
}

void push_node(TreeNodes& t, std::int64_t b, std::int64_t e, int level) {
  t.begin.push_back(b);
  t.end.push_back(e);
  t.first_child.push_back(-1);
  t.n_children.push_back(0);
  t.level.push_back(static_cast<std::int8_t>(level));
}
}  // namespace

TreeNodes build_octree(Span<const std::uint64_t> keys, int n_leaf) {
  if (n_leaf < 1) throw InputError("n_leaf: must be >= 1");
  TreeNodes t;
  const auto n = static_cast<std::int64_t>(keys.size());
  const std::size_t guess = 2 * static_cast<std::size_t>(n / n_leaf) + 1;
  t.begin.reserve(guess), t.end.reserve(guess), t.first_child.reserve(guess);
  t.n_children.reserve(guess), t.level.reserve(guess);
  push_node(t, 0, n, 0);
  for (std::size_t c = 0; c < t.count(); ++c) {
    const std::int64_t b = t.begin[c], e = t.end[c];
    const int level = t.level[c];
    // depth limit: at level 21 all keys in the cell are equal (identical grid points)
    if (e - b <= n_leaf || level >= kTreeMaxLevel) continue;
    t.first_child[c] = static_cast<std::int32_t>(t.count());
    std::int64_t lo = b;
    int made = 0;
    while (lo < e) {
      const unsigned d = digit(keys[lo], level);
      const auto* hi_ptr = std::partition_point(keys.begin() + lo, keys.begin() + e,
                                                [&](std::uint64_t k) { return digit(k, level) <= d; });
      const std::int64_t hi = hi_ptr - keys.begin();
      push_node(t, lo, hi, level + 1);
      ++made;
      lo = hi;
    }
    t.n_children[c] = static_cast<std::int8_t>(made);
  }
  return t;
}

}  // namespace gravpipe
