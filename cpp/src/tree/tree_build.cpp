// The octree from sorted curve keys (the splitting rule: octree_split.hpp). Cells are
// created breadth first, which puts the children of a cell next to each other and after
// their parent.
#include "gravpipe/error.hpp"
#include "gravpipe/tree.hpp"
#include "octree_split.hpp"

namespace gravpipe {

namespace {
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
}

}  // namespace gravpipe
