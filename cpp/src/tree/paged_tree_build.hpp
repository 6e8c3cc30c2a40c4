// The out-of-core tree's build (paged_tree.hpp): the cells counted from the sorted keys in
// the store's pages, then written with their moments into paged cell records by several
// threads at once, each a subtree in depth-first order, so that the same records come out as
// one depth-first pass makes them (and as the in-core build makes them), bit for bit.
// Internal to src/tree.
#pragma once
#include <cstdint>
#include <vector>

#include "cell_moments.hpp"
#include "gravpipe/paged_cells.hpp"
#include "gravpipe/particle_store.hpp"
#include "gravpipe/tree.hpp"

namespace gravpipe {

/// The walk record of a cell from its moments and topology, as fill_walk_cells makes it.
inline PagedCellRecord record_of(const CellMoments& m, std::int64_t b, std::int64_t e, std::int32_t first_child,
                                 int n_children, double theta, double quad_tol) {
  PagedCellRecord r;
  const double size = cell_size(m);
  r.walk = {m.cx, m.cy, m.cz, opening_radius2(m, size, theta),
            monopole_distance2(m.m, m.qxx, m.qxy, m.qxz, m.qyy, m.qyz, m.qzz, theta, quad_tol),
            b, e, first_child, n_children};
  r.moments = {m.m, m.qxx, m.qxy, m.qxz, m.qyy, m.qyz, m.qzz, m.qtr};
  return r;
}

/// The group of a group cell [b, e) (its own particles, its bounding box).
inline Group group_of(const CellMoments& m, std::int64_t b, std::int64_t e) {
  Group g;
  g.i_begin = g.ex_begin = b;
  g.i_end = g.ex_end = e;
  for (int a = 0; a < 3; ++a) g.lo[a] = m.lo[a], g.hi[a] = m.hi[a];
  return g;
}

/// A subtree the build hands to one thread: the first cell on a path from the root that
/// holds at most the shape's task_particles, and the cells and groups below it.
struct BuildTask {
  std::int64_t b = 0, e = 0;           // its particles [b, e)
  int level = 0;                       // of its root
  std::vector<std::int64_t> below;     // cells of its subtree at levels level + 1, level + 2, ...
  std::int64_t groups = 0;             // group cells in its subtree (its root included)
};

/// The octree's size, from the keys: the table to allocate, where each level begins in
/// breadth-first order, and the subtrees the build shares among its threads, in curve order.
struct PagedTreeShape {
  std::int64_t n = 0;  // particles
  std::int64_t cells = 0, leaves = 0, groups = 0;
  std::vector<std::int64_t> per_level;  // cells at each level
  std::int64_t task_particles = 0;
  std::vector<BuildTask> tasks;
};

/// Count the cells over the store's sorted keys (depth first, in curve order); subtrees of
/// at most `task_particles` become tasks. InputError when the keys are not sorted.
PagedTreeShape count_paged_tree(ParticleStore& store, int n_leaf, int n_crit, std::int64_t task_particles);

/// Write every cell's record (walk record, monopole and quadrupole) into `cells`, at its
/// breadth-first index, and the group cells into `groups` (resized to shape.groups), in curve
/// order. The tasks run on `threads` OpenMP threads; the cells above them on the calling
/// thread, before (their indices) and after (their moments, from their children's).
void build_paged_tree(ParticleStore& store, const PagedTreeShape& shape, const PagedCells& cells,
                      const TreeParams& params, int threads, std::vector<Group>& groups);

}  // namespace gravpipe
