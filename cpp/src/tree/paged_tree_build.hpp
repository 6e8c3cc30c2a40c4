// The out-of-core tree's build (paged_tree.hpp): the cells counted from the sorted keys in
// the store's pages, then written with their moments into paged cell records by several
// threads at once, each a subtree in depth-first order, so that the same records come out as
// one depth-first pass makes them (and as the in-core build makes them), bit for bit.
// Internal to src/tree.
#pragma once
#include <cstdint>
#include <vector>

#include "gravpipe/paged_cells.hpp"
#include "gravpipe/particle_store.hpp"
#include "gravpipe/tree.hpp"

namespace gravpipe {

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
