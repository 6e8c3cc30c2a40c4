// The locally essential tree of one MPI rank out of core (Salmon & Warren, seed 004: each
// processor pages its own share): DomainTree (tree_essential.hpp) over a rank's particles
// in the pages of its ParticleStore, with the out-of-core tree's cells (paged_tree.hpp).
//
// The store must hold the rank's particles in curve order of the frame every rank shares
// (store_sort.hpp with a frame), with their sorted keys. Then the local tree is the cells of
// the in-core DomainTree of those particles, record for record; export_for() writes the
// piece DomainTree::export_for writes, byte for byte; graft() puts the received pieces and
// the synthetic cells above them in memory, beside the paged cells (graft_over), and
// forces() walks the two as one tree (paged_graft_view.hpp) in the order DomainTree's walk
// takes: the forces are DomainTree's, bit for bit, written to the store's fields.
//
// Memory: the local tree's cells and the store's particles are paged under the store's
// budget (PagedTree); the grafted top and the imported particles (the locally essential
// part, ~ the domain's surface) are held in memory charged to the same budget, the cell
// cache giving frames back for them when the budget is short; so are, on the owner's word
// (hold_beside), the pieces in transit, which live outside the store.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gravpipe/memory_budget.hpp"
#include "gravpipe/paged_tree.hpp"
#include "gravpipe/particle_store.hpp"
#include "gravpipe/tree_essential.hpp"

namespace gravpipe {

class PagedDomainTree {
 public:
  /// The tree of the store's particles (sorted, with their keys; at least one); `own`: the
  /// bounding box of their positions (the sort's bounds: min and max are exact, so they are
  /// the root cell's box). Parameters as PagedTree takes them (alpha must be 0).
  PagedDomainTree(ParticleStore& store, const TreeParams& params, std::uint64_t keep_free, const DomainBox& own);

  /// This rank's domain: the boxes of its groups (group_boxes), as DomainTree::domain.
  std::vector<DomainBox> domain() const { return group_boxes(tree_->groups()); }
  /// The piece for a receiver whose domain is the boxes d.
  EssentialPiece export_for(Span<const DomainBox> d) const;
  /// Its size, without making it.
  PieceSize export_size(Span<const DomainBox> d) const;
  /// Graft the received pieces (InputError for malformed ones; BudgetError when what they
  /// import does not fit the budget, even with the cell cache at its fewest frames).
  void graft(const ReceivedPieces& in);
  /// Self-gravity of the store's particles into its fields `acc_field`, `pot_field` and
  /// (non-empty) the int64 `cost_field` (each particle's interactions), curve order;
  /// `hook` sees each run's results (the closing kick). Throws EssentialTreeError when a
  /// walk needed a pruned cell's children.
  void forces(const std::string& acc_field, const std::string& pot_field, const std::string& cost_field,
              const RunResultsHook& hook = {});

  std::int64_t size() const { return store_.size(); }
  std::int64_t imported_particles() const { return static_cast<std::int64_t>(m_.size()); }
  std::int64_t top_cells() const { return static_cast<std::int64_t>(top_.count()); }
  /// Bytes of memory the grafted top and imported particles hold (charged to the budget).
  std::uint64_t graft_bytes() const { return graft_charge_.bytes(); }
  /// Charge `bytes` of the budget for arrays its owner holds beside the tree (the essential
  /// pieces on their way through MPI), the cell cache giving frames back for them; replaces
  /// the last such charge (0: none). Returns what was charged: all of `bytes`, or less where
  /// the cell cache is down to its fewest frames (never a BudgetError: the owner says it).
  /// The graft's own charge comes first: held_beside() may be less after it.
  std::uint64_t hold_beside(std::uint64_t bytes);
  std::uint64_t held_beside() const { return beside_charge_.bytes(); }
  const PagedTree& tree() const { return *tree_; }
  const TreeStats& stats() const { return tree_->stats(); }

 private:
  /// The local root as one TreeNodes cell (moments from its record, the box from own_).
  TreeNodes root_row() const;
  /// Room in the budget for `bytes`: the cell cache gives frames back when it must, and
  /// then what is held beside.
  Reservation charge(std::uint64_t bytes);
  /// What the budget has free, less the page tables of the readers still to be made.
  std::uint64_t room() const;

  ParticleStore& store_;
  TreeParams params_;
  DomainBox own_;
  std::unique_ptr<PagedTree> tree_;
  TreeNodes top_;                     // synthetic cells, the local root's stand-in, the pieces
  std::vector<double> x_, y_, z_, m_;  // imported particles (index size() + k)
  Reservation graft_charge_;
  Reservation beside_charge_;
};

}  // namespace gravpipe
