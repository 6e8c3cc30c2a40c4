// One force evaluation of the tree over groups of i-particles (tree_runs.cpp). Internal to
// src/tree: the Tree (tree.cpp) builds the groups and calls evaluate_groups.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "gravpipe/cpu_features.hpp"
#include "gravpipe/cuda_tree_lists.hpp"
#include "gravpipe/span.hpp"
#include "gravpipe/tree.hpp"

namespace gravpipe {

/// At most this many i-particles a run (make_runs), unless one group has more: with the
/// local expansion; 1024 / 4096 / 8192 slower.
inline constexpr std::int64_t kRunParticles = 2048;
/// A list's source particles are read in pieces of at most this many (tree_evaluate.cpp),
/// each handed back (done_with) once gathered.
inline constexpr std::int64_t kSourcePiece = 1024;

/// Where an evaluation puts its results: arrays in the caller's order. Any other results
/// type (store_results.hpp: pages of the store) has the same four members.
struct CallerResults {
  Span<const std::int64_t> i_caller;  // i order -> caller's index
  Span<double> acc, pot;              // results, caller's order (3 n_i, n_i)
  /// optional (empty: not written): each i-particle's interactions (particle and cell
  /// terms, its run's shared ones included), caller's order: the cost that balances
  /// MPI domains (gravpipe/parallel/domain.py)
  Span<std::int64_t> cost = {};

  /// A run of groups over i-particles [run.i_begin, run.i_end) starts / ends on this thread.
  void begin_run(const Group&) const {}
  void end_run(const Group&) const {}
  /// Results of i-particle i (i order).
  void put(std::int64_t i, double ax, double ay, double az, double pot_i) const {
    const std::int64_t o = i_caller[i];
    acc[3 * o] = ax, acc[3 * o + 1] = ay, acc[3 * o + 2] = az, pot[o] = pot_i;
  }
  bool wants_cost() const { return !cost.empty(); }
  void put_cost(std::int64_t i, std::int64_t terms) const { cost[i_caller[i]] = terms; }
};

/// What one evaluation reads and writes. Particles on both sides come through accessors
/// (particle_view.hpp): Sources in curve order, Sinks in i order (groups are ranges of it);
/// cells through a cell accessor (tree.hpp) whose reader() each thread takes.
template <class Sources, class Sinks, class Results = CallerResults, class Cells = InCoreCells>
struct GroupEvaluation {
  const Cells& cells;
  const TreeParams& params;
  Isa isa;
  const Sources& sources;
  const Sinks& sinks;
  Span<const std::int64_t> i_exclude;  // per i: the sorted j index to leave out, or -1
  const Results& results;
  /// true: i-particle i leaves out source i (self-gravity over the sources themselves) and
  /// i_exclude may be empty, which spares the out-of-core tree an array of N indices
  bool exclude_self = false;
  /// Not null: the lists are evaluated on this GPU (the tree's backend "cuda", mixed
  /// precision), one lane per thread; null: on the CPU's list kernels (isa).
  CudaTreeLists* device = nullptr;
  /// true: the threads take the runs one at a time in curve order, side by side, so that
  /// their lists read one neighbourhood of pages, not one each (the out-of-core walk: the
  /// cache holds one working set); false: contiguous chunks of runs per thread.
  bool side_by_side = false;
};

/// The work of an evaluation, as TreeStats counts it. Seconds are thread-seconds.
struct GroupWork {
  std::uint64_t pp = 0, pc = 0, pc_local = 0, mac_tests = 0;
  std::uint64_t pruned_opened = 0;  // InteractionList::pruned_opened, summed: must stay 0
  double seconds_walk = 0, seconds_evaluate = 0;
  GroupWork& operator+=(const GroupWork& o);
};

/// Forces on every group's i-particles, OpenMP over runs of consecutive groups. A run's
/// sums are computed by one thread in a fixed order, so results are bitwise identical for
/// any thread count and any accessor. Each thread takes contiguous chunks of runs (curve
/// order), or with e.side_by_side the runs one at a time in curve order, so that the pages
/// the lists touch stay near each other; after each run a thread releases its blocks
/// (release_thread). Instantiated for InCoreParticles on both sides
/// with CallerResults and InCoreCells, and for PagedParticles with StoreResults and PagedCells
/// (paged_tree.cpp).
template <class Sources, class Sinks, class Results, class Cells>
GroupWork evaluate_groups(const GroupEvaluation<Sources, Sinks, Results, Cells>& e, const std::vector<Group>& groups,
                          int threads);

/// Runs of consecutive groups (curve order, so spatially compact) that share the top of
/// their walks: [first, last) group indices, at most 2048 i-particles each (a single larger
/// group makes a run alone). evaluate_groups evaluates these runs; the out-of-core walk's
/// prefetch (walk_prefetch.hpp) plans the same ones.
std::vector<std::pair<std::size_t, std::size_t>> make_runs(const std::vector<Group>& groups);

/// The run as one group: the union of the members' boxes and excluded ranges, and the
/// smallest old |a| of those that have one (the relative criterion's most sensitive).
Group run_group(Span<const Group> members);

/// Self-gravity groups: the group cells, each its own excluded range (every particle
/// leaves itself out), with the smallest old |a| when a_old (curve order) is given (tree.cpp).
std::vector<Group> cell_groups(const TreeNodes& t, const std::vector<std::int32_t>& cells,
                               const std::vector<double>& a_old);

/// Write an evaluation's work and its wall time into `stats` (tree.cpp).
void record_group_work(TreeStats& stats, const GroupWork& work, double wall, std::size_t n_i, std::size_t groups);

}  // namespace gravpipe
