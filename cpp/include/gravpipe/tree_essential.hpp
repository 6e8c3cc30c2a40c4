// Locally essential trees (Salmon & Warren; seed 004): the treecode over MPI domains.
//
// Each rank builds a tree over its own particles (a contiguous range of the curve). For
// every other rank it exports the part of that tree the other rank's walks can need: a walk
// from the root with the walks' own MAC (tree_mac.hpp) against the receiver's domain box.
// Cells the box accepts go out with their moments and no children ("pruned"); opened
// internal cells with their structure; opened leaves with their particles. The MAC
// distance from a box to a com only grows as the box shrinks, and every group (and run)
// of the receiver lies inside its domain box, so every cell pruned for the box is accepted
// by every walk of the receiver: it never needs a pruned cell's children. The receiver
// grafts its tree and the pieces it got under synthetic cells and runs the serial walk,
// gather, evaluation and local expansions unchanged on the result. A walk that would open
// a pruned cell (the contract broken: a wrong box, another MAC) is an error, never a
// missing contribution.
//
// Pieces are flat arrays that go into MPI buffers as they are:
//   cells      kPieceCellDoubles float64 per cell (kPieceCol* below); the box columns
//              (lo, hi, size) are the piece root's box on its first row and 0 on the
//              others: only the synthetic cells above the roots are made from boxes, and
//              the out-of-core tree keeps no box in its cell records
//   links      kPieceCellInts int64 per cell: first child (index in the piece, -1 for a
//              leaf), child count, particle range [begin, end) in the piece's particles
//              (kPrunedRange, kPrunedRange for a pruned cell)
//   particles  4 float64 per particle: x, y, z, m
// Children follow their parent contiguously (breadth-first), as TreeNodes requires.
#pragma once
#include <cstdint>
#include <vector>

#include "gravpipe/span.hpp"
#include "gravpipe/tree.hpp"

namespace gravpipe {

/// The float64 columns of a piece's cells, in order: the TreeNodes fields a walk, a gather
/// and a local expansion read (the structure goes in the links).
constexpr int kPieceCellDoubles = 19;
using CellColumn = std::vector<double> TreeNodes::*;
inline constexpr CellColumn kPieceColumns[kPieceCellDoubles] = {
    &TreeNodes::mass, &TreeNodes::cx,   &TreeNodes::cy,   &TreeNodes::cz,      &TreeNodes::lo_x,
    &TreeNodes::lo_y, &TreeNodes::lo_z, &TreeNodes::hi_x, &TreeNodes::hi_y,    &TreeNodes::hi_z,
    &TreeNodes::size, &TreeNodes::r_open2, &TreeNodes::qxx, &TreeNodes::qxy, &TreeNodes::qxz,
    &TreeNodes::qyy,  &TreeNodes::qyz,  &TreeNodes::qzz,  &TreeNodes::qtr};
constexpr int kPieceCellInts = 4;
constexpr int kPieceParticleDoubles = 4;

/// One box of a receiver's domain: the bounding box of some of its particles and, for the
/// relative criterion, the smallest old |a| among them (0: none). An empty box has lo > hi.
struct DomainBox {
  double lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
  double a_min = 0;
  bool empty() const { return lo[0] > hi[0] || lo[1] > hi[1] || lo[2] > hi[2]; }
};

/// A domain is described by the boxes of its self-gravity groups (curve order), one each:
/// every walk of the receiver is one group's, so a cell that every box accepts is accepted
/// by every walk, and a piece for these boxes holds what the walks open and no more. A box
/// around several groups holds space of none of them; where the curve jumps (from a group
/// by a Plummer core to halo groups tens of units out) it reaches into the other rank's
/// core and the piece for it opens all of that. The export tests a cell against unions of
/// runs of the boxes first (export_piece), so that their number costs ~log of it a cell.
/// The boxes of a domain whose self-gravity groups are `groups` (curve order).
std::vector<DomainBox> group_boxes(const std::vector<Group>& groups);

struct EssentialPiece {
  std::vector<double> cells;
  std::vector<std::int64_t> links;
  std::vector<double> particles;
  std::size_t n_cells() const { return links.size() / kPieceCellInts; }
  std::size_t n_particles() const { return particles.size() / kPieceParticleDoubles; }
};

/// The locally essential piece of tree t (moments done; particles p in its curve order)
/// for a receiver whose domain is the boxes d (a cell is sent pruned when every box accepts
/// it), under the walks' MAC. An empty domain gets an empty piece. Instantiated for
/// InCoreParticles.
template <class Particles>
EssentialPiece export_essential(const TreeNodes& t, const Particles& p, Span<const DomainBox> d,
                                const MacParams& mac);

class PagedCells;
class PagedParticles;
/// The same piece from an out-of-core tree (paged_domain_tree.hpp): its cells in pages,
/// its particles p in the store's curve order, `own` the box of all of them (the root's).
/// Byte for byte the piece export_essential makes from the in-core tree of those particles.
EssentialPiece export_essential_paged(const PagedCells& cells, const PagedParticles& p, const DomainBox& own,
                                      Span<const DomainBox> d, const MacParams& mac);

/// The size of a piece, known before it is made.
struct PieceSize {
  std::int64_t cells = 0, particles = 0;
  /// Bytes of its arrays: the cell rows and links, the particles' x y z m.
  std::uint64_t bytes() const {
    return static_cast<std::uint64_t>(cells) * (kPieceCellDoubles + kPieceCellInts) * 8 +
           static_cast<std::uint64_t>(particles) * kPieceParticleDoubles * 8;
  }
};
/// The size of export_essential_paged's piece for d, from the same walk without its rows
/// and particles (a rank makes room for a piece before making it).
PieceSize essential_size_paged(const PagedCells& cells, Span<const DomainBox> d, const MacParams& mac);

/// Pieces as they arrive, concatenated in sender order: for sender s, cells_per_piece[s]
/// cells and particles_per_piece[s] particles (either may be 0: nothing from s).
struct ReceivedPieces {
  Span<const double> cells;
  Span<const std::int64_t> links;
  Span<const double> particles;
  Span<const std::int64_t> cells_per_piece, particles_per_piece;
};

/// The local tree (its particles first, [0, n_local)) and the received pieces (their
/// particles after, in sender order) as one tree; local_index maps each local cell to its
/// grafted index. Synthetic cells take their moments from their children (theta: their
/// opening radii; quad_tol: the walk cells, as compute_moments).
struct GraftedTree {
  TreeNodes nodes;
  std::vector<std::int32_t> local_index;
};
GraftedTree graft_tree(const TreeNodes& local, const ReceivedPieces& in, double theta, double quad_tol, int threads);

/// graft_tree's top over a local tree that stays in its pages (paged_domain_tree.hpp):
/// `root` is the local root alone (one cell: moments, box, first_child the paged index of
/// its first child, n_children, particles [0, n_local)); the result is every grafted cell
/// but the paged ones below the root, each numbered `base` (the paged cells' count) plus its
/// index here, the local root's stand-in among them. The walk over the paged cells and
/// these (paged_graft_view.hpp) visits the cells graft_tree's would, in the same order.
TreeNodes graft_over(const TreeNodes& root, std::int32_t base, const ReceivedPieces& in, double theta, double quad_tol,
                     int threads);

/// The tree of one rank: its own particles (a local tree), then, after graft(), the
/// pieces of the others under synthetic cells. Forces are on the own particles only.
class DomainTree {
 public:
  /// pos 3n, mass n (n >= 1): this rank's particles, in its own (caller's) order. frame:
  /// the cube the octree divides; every rank should pass the same one (curve_box of the
  /// global bounding box), so that the local trees' cells are cells of one global octree
  /// and only the few cells on a domain boundary are split between ranks. Without it,
  /// the cube of the own particles (cells then differ from rank to rank and from the
  /// serial tree's, which costs ~8% more interactions).
  DomainTree(Span<const double> pos, Span<const double> mass, const TreeParams& params,
             const CurveBox* frame = nullptr);

  /// The piece for a receiver whose domain is the boxes d (from the local tree).
  EssentialPiece export_for(Span<const DomainBox> d) const;
  /// This rank's domain: the boxes of its groups (group_boxes), with the smallest old |a|
  /// when the relative criterion is on.
  std::vector<DomainBox> domain() const;
  /// Graft the received pieces under the local tree's root. Throws InputError for
  /// malformed pieces (counts that do not add up, links outside a piece).
  void graft(const ReceivedPieces& in);
  /// Self-gravity of the own particles (caller order: acc 3n, pot n) from the grafted tree
  /// (or the local one alone before graft); cost (n, or empty): each particle's
  /// interactions. Throws DeviceError if a walk needed a pruned cell's children.
  void forces(Span<double> acc, Span<double> pot, Span<std::int64_t> cost);
  /// |a| of the own particles from the last step (n, caller's order) for alpha > 0.
  void set_old_accelerations(Span<const double> a_abs);

  std::size_t size() const { return n_local_; }
  const TreeNodes& local_nodes() const { return local_; }
  const TreeNodes& grafted_nodes() const { return grafted_.count() ? grafted_ : local_; }
  const TreeStats& stats() const { return stats_; }
  Isa isa() const { return isa_; }

 private:
  InCoreParticles local_particles() const;
  InCoreParticles all_particles() const;
  /// The own particles' self-gravity groups (local cell indices; grafted: their grafted ones).
  std::vector<Group> own_groups() const;

  TreeParams params_;
  int threads_;
  Isa isa_;
  std::size_t n_local_ = 0;
  std::vector<std::int64_t> order_;     // local curve position -> caller index
  std::vector<double> x_, y_, z_, m_;   // own particles in curve order, then imported ones
  std::vector<double> a_old_;           // |a_old| in curve order (empty: none)
  TreeNodes local_, grafted_;
  std::vector<std::int32_t> group_cells_;  // group cells of the local tree (local indices)
  std::vector<std::int32_t> local_index_;  // local tree cell -> grafted cell (after graft)
  TreeStats stats_;
};

}  // namespace gravpipe
