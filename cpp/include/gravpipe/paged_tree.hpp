// The treecode out of core (DESIGN.md, "What comes after"; Salmon & Warren, seed 004): the
// same octree rule (octree_split.hpp), moment arithmetic (cell_moments.hpp), walk, MAC and
// kernels as the in-core Tree (tree.hpp), with the particles read from the pages of a store
// through PagedParticles, the cells from pages of their own through PagedCellReader, and the
// results written back to the store's pages. The store must be in curve order with its
// sorted keys (store_sort.hpp); then the octree, the groups, the runs and every sum are those
// of the in-core Tree over the same particles, and so are the forces, bit for bit.
//
// The cells are built from the store's pages after the sort, or taken from a build that rode
// on the sort (streamed_tree_build.hpp: the same records, bit for bit).
//
// Memory: the cells live in pages (paged_cells.hpp) served by a cache of their own whose
// frames are charged to the store's budget: all that the budget has left when the tree is
// built, less `keep_free` (the particle blocks the walk copies) and the groups. The build
// reads the sorted keys from the store's pages, never all at once. Nothing that grows with N
// stays in memory outside the budget: a budget that cannot hold the fewest frames stops with
// a BudgetError naming the least budget that works.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gravpipe/cpu_features.hpp"
#include "gravpipe/memory_budget.hpp"
#include "gravpipe/paged_cells.hpp"
#include "gravpipe/streamed_tree_build.hpp"
#include "gravpipe/particle_store.hpp"
#include "gravpipe/tree.hpp"

namespace gravpipe {

/// Called with each run of i-particles' results as self_forces writes them: particles
/// [begin, begin + n) of the store, acc (3n) and pot (n). From the walk's OpenMP threads,
/// several at once.
using RunResultsHook = std::function<void(std::int64_t begin, std::int64_t n, const double* acc, const double* pot)>;

class PagedTree {
 public:
  /// Build from the store's "key" (sorted), "pos" and "mass". Throws InputError for bad
  /// parameters (alpha > 0: the relative criterion needs old accelerations, not kept out of
  /// core), BudgetError when the budget cannot hold the cells' fewest frames and the groups.
  /// `keep_free`: bytes of the budget the cell cache leaves to others (copied particle blocks).
  PagedTree(ParticleStore& store, const TreeParams& params, std::uint64_t keep_free = 0);
  /// The tree whose cells a sort built as it wrote the particles (StreamedTreeBuild::take,
  /// which checks that they were made for these parameters), its cell cache widened to what
  /// the budget has left, less `keep_free`.
  PagedTree(ParticleStore& store, const TreeParams& params, std::uint64_t keep_free, BuiltCells built);

  /// Self-gravity of every particle of the store (self excluded) into its fields `acc_field`
  /// and `pot_field` (curve order), as Tree::self_forces computes it. An empty `acc_field`
  /// writes only the potentials (diagnostics: the run's accelerations stay untouched).
  /// `hook` (optional) sees every run's results while they are in memory (the closing kick).
  void self_forces(const std::string& acc_field = "acc", const std::string& pot_field = "pot",
                   const RunResultsHook& hook = {});

  /// Runs of groups a compute thread whose pages self_forces loads ahead of the threads,
  /// which walk the runs side by side (the walk's prefetch, walk_prefetch.hpp); 0 turns it off, and so does a particle cache that holds
  /// every page the walk touches. Changes I/O only, never a result bit. The default is 4 for
  /// a scratch file on a device and 0 for one in memory (tmpfs, /dev/shm): there a load is a
  /// copy with no latency to hide, and the prefetch's planning walks only take CPU from the
  /// compute threads (N = 1e7 at 1/10 of its data, 2 threads: the walk ~0.8 s faster
  /// without it in /dev/shm, ~2 s slower without it on disk; BENCHMARKS.md).
  void set_prefetch_runs(int runs);
  /// OpenMP threads of the walk (what a RunResultsHook must serve at once).
  int threads() const { return threads_; }
  int prefetch_runs() const { return prefetch_runs_; }

  const TreeStats& stats() const { return stats_; }
  TreeStats& stats() { return stats_; }
  Isa isa() const { return isa_; }
  std::int64_t cell_count() const { return cells_->count(); }
  /// The cells and the self-gravity groups (for the domain tree, paged_domain_tree.hpp).
  const PagedCells& cells() const { return *cells_; }
  const std::vector<Group>& groups() const { return groups_; }
  /// Give up to `bytes` of the cell cache's frames back to the budget (at least the fewest
  /// frames stay): room for what the domain tree imports. Returns the bytes given back.
  std::uint64_t shrink_cell_cache(std::uint64_t bytes);
  /// Bytes of the cell cache's frames (charged to the store's budget).
  std::uint64_t cell_cache_bytes() const;
  /// Page traffic of the cell tables since the build began.
  StoreCounters cell_counters() const { return cells_->counters(); }
  /// The least bytes the tree charges beyond the store's: the cells' fewest frames (and
  /// their page tables for `cells` cells, the threads' readers' among them) and `groups` groups.
  static std::uint64_t least_bytes(std::int64_t cells, std::int64_t groups, std::size_t page_bytes, int threads);
  /// The most bytes one thread holds in particle blocks copied out of the pages (blocks that
  /// straddle a page, or come when its share of pinned frames is full), for groups of up to
  /// `n_crit` and leaves of up to `n_leaf` particles: the walk holds its run's sinks block
  /// (at most max(2048, n_crit) particles) and the one source piece being gathered (1024),
  /// the moments one leaf at a time; 32 bytes a particle (x, y, z, m). A leaf that cannot be
  /// split (particles closer than the curve's finest cell) may ask for more: the budget then
  /// refuses it by name.
  static std::uint64_t copy_allowance(std::int64_t n_crit, std::int64_t n_leaf);
  /// The most bytes one thread's copied blocks held at once in the last self_forces().
  std::uint64_t copy_peak_bytes() const { return copy_peak_bytes_; }

 private:
  struct Unbuilt {};
  /// The members, the parameters checked, no cells yet (what both builds start from).
  PagedTree(ParticleStore& store, const TreeParams& params, std::uint64_t keep_free, Unbuilt);
  /// The cell table for `cells` cells, its cache taking what the budget has left; charges
  /// the `groups` groups first.
  void make_cell_table(std::int64_t cells, std::int64_t groups);
  /// Frames of the cell cache for `pages` pages: what the budget has left, `charged` bytes of
  /// it the cells' own already (their frames and tables), less keep_free and `tables` bytes
  /// of page tables still to charge; at least the fewest frames, at most one a page.
  std::int64_t cell_frames(std::int64_t pages, std::uint64_t charged, std::uint64_t tables) const;

  ParticleStore& store_;
  TreeParams params_;
  int threads_;
  Isa isa_;
  int prefetch_runs_;
  std::uint64_t keep_free_;
  std::unique_ptr<PagedCells> cells_;
  Reservation groups_charge_;
  std::vector<Group> groups_;
  TreeStats stats_;
  std::uint64_t copy_peak_bytes_ = 0;
};

}  // namespace gravpipe
