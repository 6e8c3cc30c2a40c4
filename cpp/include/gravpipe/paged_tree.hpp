// The treecode out of core (DESIGN.md, "What comes after"; Salmon & Warren, seed 004): the
// same build, moments, walk, MAC and kernels as the in-core Tree (tree.hpp), with the
// particles read from the pages of a store through PagedParticles and the results written
// back to its pages. The store must be in curve order with its sorted keys (store_sort.hpp);
// then the octree, the groups, the runs and every sum are those of the in-core Tree over the
// same particles, and so are the forces, bit for bit.
//
// Memory: the sorted keys (8 bytes a particle, during the build only), the cells (their
// topology, moments and walk copies) and each thread's interaction lists are charged to the
// store's budget, besides the cache's frames; a budget that cannot hold them stops with a
// BudgetError naming the least budget that works.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gravpipe/cpu_features.hpp"
#include "gravpipe/memory_budget.hpp"
#include "gravpipe/particle_store.hpp"
#include "gravpipe/tree.hpp"

namespace gravpipe {

class PagedTree {
 public:
  /// Build from the store's "key" (sorted), "pos" and "mass". Throws InputError for bad
  /// parameters (alpha > 0: the relative criterion needs old accelerations, not kept out of
  /// core), BudgetError when the cells do not fit.
  PagedTree(ParticleStore& store, const TreeParams& params);

  /// Self-gravity of every particle of the store (self excluded) into its fields `acc_field`
  /// and `pot_field` (curve order), as Tree::self_forces computes it. An empty `acc_field`
  /// writes only the potentials (diagnostics: the run's accelerations stay untouched).
  void self_forces(const std::string& acc_field = "acc", const std::string& pot_field = "pot");

  /// Runs of groups whose pages self_forces loads ahead of each compute thread (the walk's
  /// prefetch, walk_prefetch.hpp); 0 turns it off. Changes I/O only, never a result bit.
  void set_prefetch_runs(int runs);
  int prefetch_runs() const { return prefetch_runs_; }

  const TreeStats& stats() const { return stats_; }
  const TreeNodes& nodes() const { return nodes_; }
  Isa isa() const { return isa_; }
  /// Bytes charged for the cells (and, during self_forces, the lists).
  std::uint64_t cell_bytes() const { return cells_charge_.bytes(); }
  /// Bytes of the cells of a tree with `nodes` cells, and of the lists of `threads` threads.
  static std::uint64_t bytes_per_cell();
  static std::uint64_t list_bytes(std::size_t nodes, int threads);

 private:
  ParticleStore& store_;
  TreeParams params_;
  int threads_;
  Isa isa_;
  int prefetch_runs_;
  TreeNodes nodes_;
  std::vector<std::int32_t> groups_;
  Reservation cells_charge_;
  TreeStats stats_;
};

}  // namespace gravpipe
