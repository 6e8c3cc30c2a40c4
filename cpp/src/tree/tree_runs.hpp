// One force evaluation of the tree over groups of i-particles (tree_runs.cpp). Internal to
// src/tree: the Tree (tree.cpp) builds the groups and calls evaluate_groups.
#pragma once
#include <cstdint>
#include <vector>

#include "gravpipe/cpu_features.hpp"
#include "gravpipe/span.hpp"
#include "gravpipe/tree.hpp"

namespace gravpipe {

/// What one evaluation reads and writes. Particles on both sides come through accessors
/// (particle_view.hpp): Sources in curve order, Sinks in i order (groups are ranges of it).
template <class Sources, class Sinks>
struct GroupEvaluation {
  const TreeNodes& nodes;
  const TreeParams& params;
  Isa isa;
  const Sources& sources;
  const Sinks& sinks;
  Span<const std::int64_t> i_exclude;  // per i: the sorted j index to leave out, or -1
  Span<const std::int64_t> i_caller;   // i order -> caller's index
  Span<double> acc, pot;               // results, caller's order (3 n_i, n_i)
  /// optional (empty: not written): each i-particle's interactions (particle and cell
  /// terms, its run's shared ones included), caller's order: the cost that balances
  /// MPI domains (gravpipe/parallel/domain.py)
  Span<std::int64_t> cost = {};
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
/// any thread count. Instantiated for InCoreParticles on both sides.
template <class Sources, class Sinks>
GroupWork evaluate_groups(const GroupEvaluation<Sources, Sinks>& e, const std::vector<Group>& groups, int threads);

/// Self-gravity groups: the group cells, each its own excluded range (every particle
/// leaves itself out), with the smallest old |a| when a_old (curve order) is given (tree.cpp).
std::vector<Group> cell_groups(const TreeNodes& t, const std::vector<std::int32_t>& cells,
                               const std::vector<double>& a_old);

/// Write an evaluation's work and its wall time into `stats` (tree.cpp).
void record_group_work(TreeStats& stats, const GroupWork& work, double wall, std::size_t n_i, std::size_t groups);

}  // namespace gravpipe
