// The octree from sorted curve keys (the splitting rule: octree_split.hpp). Cells are
// created breadth first, which puts the children of a cell next to each other and after
// their parent.
#include "gravpipe/debug_checks.hpp"
#include "gravpipe/error.hpp"
#include "gravpipe/tree.hpp"
#include "octree_split.hpp"

namespace gravpipe {

namespace {

#if GRAVPIPE_DEBUG_CHECKS
/// The octree's shape against its keys: each split cell's children come after it, one level
/// down, tile its particle range in order and each hold one octant digit (increasing); a
/// leaf is a cell the rule does not split; the root holds every particle.
void check_octree(const TreeNodes& t, Span<const std::uint64_t> keys, int n_leaf) {
  const auto n = static_cast<std::int64_t>(keys.size());
  GRAVPIPE_DEBUG_ASSERT(t.count() >= 1 && t.begin[0] == 0 && t.end[0] == n, "the root does not hold every particle");
  for (std::size_t c = 0; c < t.count(); ++c) {
    const std::int64_t b = t.begin[c], e = t.end[c];
    const int level = t.level[c];
    const std::string cell = "cell " + std::to_string(c) + " [" + std::to_string(b) + ", " + std::to_string(e) + ")";
    GRAVPIPE_DEBUG_ASSERT(b >= 0 && b < e && e <= n, cell + " is empty or outside the particles");
    GRAVPIPE_DEBUG_ASSERT(t.is_leaf(c) == !splits(b, e, level, n_leaf), cell + " split against the rule");
    if (t.is_leaf(c)) continue;
    const auto first = static_cast<std::size_t>(t.first_child[c]);
    const int kids = t.n_children[c];
    GRAVPIPE_DEBUG_ASSERT(first > c && kids >= 1 && kids <= 8 && first + static_cast<std::size_t>(kids) <= t.count(),
                          cell + ": children outside the table");
    std::int64_t at = b;
    int digit = -1;
    for (std::size_t k = first; k < first + static_cast<std::size_t>(kids); ++k) {
      GRAVPIPE_DEBUG_ASSERT(t.level[k] == level + 1 && t.begin[k] == at,
                            cell + ": child " + std::to_string(k) + " does not follow its sibling one level down");
      const auto d = static_cast<int>(octant_digit(keys[static_cast<std::size_t>(t.begin[k])], level));
      GRAVPIPE_DEBUG_ASSERT(d > digit && octant_digit(keys[static_cast<std::size_t>(t.end[k] - 1)], level) ==
                                             static_cast<unsigned>(d),
                            cell + ": child " + std::to_string(k) + " spans octants or repeats one");
      digit = d, at = t.end[k];
    }
    GRAVPIPE_DEBUG_ASSERT(at == e, cell + ": its children hold particles up to " + std::to_string(at));
  }
}
#endif

void push_node(TreeNodes& t, std::int64_t b, std::int64_t e, int level) {
  t.begin.push_back(b);
  t.end.push_back(e);
  t.first_child.push_back(-1);
  t.n_children.push_back(0);
  t.level.push_back(static_cast<std::int8_t>(level));
}
}  // namespace

TreeNodes build_octree(Span<const std::uint64_t> keys, int n_leaf) {
  TreeNodes t;
  build_octree_into(keys, n_leaf, t);
  return t;
}

void build_octree_into(Span<const std::uint64_t> keys, int n_leaf, TreeNodes& t) {
  if (n_leaf < 1) throw InputError("n_leaf: must be >= 1");
  for (auto* v : {&t.begin, &t.end}) v->clear();
  t.first_child.clear(), t.n_children.clear(), t.level.clear();
  const auto n = static_cast<std::int64_t>(keys.size());
  const std::size_t guess = 2 * static_cast<std::size_t>(n / n_leaf) + 1;
  t.begin.reserve(guess), t.end.reserve(guess), t.first_child.reserve(guess);
  t.n_children.reserve(guess), t.level.reserve(guess);
  push_node(t, 0, n, 0);
  const auto key = [&keys](std::int64_t i) { return keys[static_cast<std::size_t>(i)]; };
  for (std::size_t c = 0; c < t.count(); ++c) {
    const std::int64_t b = t.begin[c], e = t.end[c];
    const int level = t.level[c];
    if (!splits(b, e, level, n_leaf)) continue;
    t.first_child[c] = static_cast<std::int32_t>(t.count());
    int made = 0;
    for_each_child(key, b, e, level, [&](std::int64_t lo, std::int64_t hi) {
      push_node(t, lo, hi, level + 1);
      ++made;
    });
    t.n_children[c] = static_cast<std::int8_t>(made);
  }
#if GRAVPIPE_DEBUG_CHECKS
  check_octree(t, keys, n_leaf);
#endif
}

}  // namespace gravpipe
