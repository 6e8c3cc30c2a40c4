// The treecode over particles in the out-of-core store (particle_store.hpp): the same curve
// keys, octree, moments, walks, lists and kernels as Tree (tree.hpp), with the particles
// read through PagedParticles (paged_particles.hpp) instead of arrays in memory. One tree
// code: compute_moments, GatheredList::gather and evaluate_groups are the templates Tree
// uses, instantiated for the paged accessor, so the forces are bitwise identical to Tree's
// for the same particles, parameters and thread count.
//
// What lives in memory, charged to the store's budget: the curve keys (8 bytes per
// particle), the tree cells (~N / n_leaf of them) and the group list; particle blocks
// copied out of pages for one run of groups at a time (released when the run ends).
// Not yet out of core: the keys are sorted in memory (the store must already be in curve
// order, as gravpipe.store.from_particles writes it), and the results acc, pot are arrays
// the caller holds.
#pragma once
#include <cstdint>
#include <vector>

#include "gravpipe/cpu_features.hpp"
#include "gravpipe/memory_budget.hpp"
#include "gravpipe/paged_particles.hpp"
#include "gravpipe/particle_store.hpp"
#include "gravpipe/span.hpp"
#include "gravpipe/tree.hpp"

namespace gravpipe {

class PagedTree {
 public:
  /// A tree over the store's particles (fields pos, mass). They must be in the curve order
  /// of their own bounding cube (InputError otherwise). alpha > 0 is refused (the relative
  /// criterion needs |a| of a previous step, which is not kept out of core yet).
  PagedTree(ParticleStore& store, const TreeParams& params);

  /// Self-gravity (self excluded), in store order: acc 3n, pot n (pot positive, scaled by G
  /// as Tree's).
  void self_forces(Span<double> acc, Span<double> pot);

  const TreeStats& stats() const { return stats_; }
  std::size_t size() const { return particles_.size(); }

 private:
  std::vector<std::uint64_t> sorted_keys(int threads);

  ParticleStore& store_;
  TreeParams params_;
  int threads_;
  Isa isa_;
  PagedParticles particles_;
  Reservation keys_charge_, cells_charge_;
  TreeNodes nodes_;
  std::vector<std::int32_t> groups_;
  TreeStats stats_;
};

}  // namespace gravpipe
