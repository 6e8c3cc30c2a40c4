// Grafting (tree_essential.hpp): the local tree and the pieces received from other ranks
// become one TreeNodes under a few synthetic cells, so that the serial walk, gather and
// evaluation run on it unchanged. n_children is an int8, so the subtrees hang from a
// small synthetic tree of fan-out kGraftFanOut; its cells come first (breadth first), then
// each subtree's cells but its root, in their own order: children stay contiguous and
// after their parent. Particle ranges are re-based onto the own particles followed by the
// pieces' particles in sender order. graft_over makes the same top over a local tree that
// stays in its pages: only the local root's row joins (a stand-in whose children are the
// paged cells), and the top's own links are numbered after the paged cells.
#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

#include "gravpipe/error.hpp"
#include "gravpipe/tree_essential.hpp"

namespace gravpipe {

namespace {

constexpr std::size_t kGraftFanOut = 8;

/// A child of a synthetic cell: another synthetic cell or the root of a subtree.
struct TopItem {
  bool synthetic;
  std::size_t id;  // index of the synthetic cell, or of the subtree
};

/// A subtree's cells as views: the local tree, or one received piece.
struct Subtree {
  const TreeNodes* local = nullptr;  // set for the local tree
  bool stand_in = false;             // the local tree's root only: its children stay where they are
  const double* cells = nullptr;     // else: the piece's rows
  const std::int64_t* links = nullptr;
  std::size_t n_cells = 0;
  std::int64_t particle_base = 0;    // of its particles in the grafted particle order
  std::int64_t n_particles = 0;
  std::size_t root_slot = 0, body_base = 0;  // where its root and its other cells go
  std::size_t slot(std::int64_t k) const { return k == 0 ? root_slot : body_base + static_cast<std::size_t>(k) - 1; }
};

void resize_nodes(TreeNodes& g, std::size_t n) {
  g.begin.assign(n, 0), g.end.assign(n, 0);
  g.first_child.assign(n, -1), g.n_children.assign(n, 0), g.level.assign(n, 0);
  for (const CellColumn col : kPieceColumns) (g.*col).assign(n, 0.0);
}

void copy_cell(const Subtree& s, std::size_t k, TreeNodes& g) {
  const std::size_t dst = s.slot(static_cast<std::int64_t>(k));
  std::int64_t fc, nc, b, e;
  if (s.local) {
    const TreeNodes& t = *s.local;
    fc = t.first_child[k], nc = t.n_children[k], b = t.begin[k], e = t.end[k];
    for (const CellColumn col : kPieceColumns) (g.*col)[dst] = (t.*col)[k];
  } else {
    const std::int64_t* l = s.links + k * kPieceCellInts;
    fc = l[0], nc = l[1], b = l[2], e = l[3];
    for (int c = 0; c < kPieceCellDoubles; ++c) (g.*kPieceColumns[c])[dst] = s.cells[k * kPieceCellDoubles + c];
  }
  g.first_child[dst] = fc < 0 || s.stand_in ? static_cast<std::int32_t>(fc) : static_cast<std::int32_t>(s.slot(fc));
  g.n_children[dst] = static_cast<std::int8_t>(nc);
  const bool pruned = b == kPrunedRange;
  g.begin[dst] = pruned ? kPrunedRange : s.particle_base + b;
  g.end[dst] = pruned ? kPrunedRange : s.particle_base + e;
}

/// A received piece's links must describe a tree of the promised shape: children after
/// their parent and inside the piece, particle ranges inside its particles.
void check_piece(const Subtree& s, std::size_t sender) {
  const auto bad = [&](const std::string& what) {
    throw InputError("graft: the piece from rank " + std::to_string(sender) + " is malformed: " + what);
  };
  const auto n = static_cast<std::int64_t>(s.n_cells);
  for (std::int64_t k = 0; k < n; ++k) {
    const std::int64_t* l = s.links + k * kPieceCellInts;
    if (l[0] >= 0 && (l[0] <= k || l[1] < 1 || l[1] > 127 || l[0] + l[1] > n))
      bad("cell " + std::to_string(k) + " has children outside the piece");
    const bool pruned = l[2] == kPrunedRange && l[3] == kPrunedRange;
    if (!pruned && (l[2] < 0 || l[3] < l[2] || l[3] > s.n_particles))
      bad("cell " + std::to_string(k) + " has particles outside the piece");
    if (pruned && l[0] >= 0) bad("pruned cell " + std::to_string(k) + " has children");
  }
}

}  // namespace

namespace {

/// graft_tree's work; `stand_in`: local is the root row of a tree whose other cells stay in
/// their pages, and the top's own links are numbered from `base` (graft_over).
GraftedTree graft(const TreeNodes& local, bool stand_in, std::int64_t base, const ReceivedPieces& in, double theta,
                  double quad_tol, int threads) {
  if (in.cells_per_piece.size() != in.particles_per_piece.size())
    throw InputError("graft: cells_per_piece and particles_per_piece differ in length");
  std::vector<Subtree> subtrees(1);
  subtrees[0].local = &local;
  subtrees[0].stand_in = stand_in;
  subtrees[0].n_cells = local.count();
  subtrees[0].n_particles = local.count() ? local.end[0] : 0;
  std::size_t cell_at = 0, particle_at = 0;
  std::int64_t particle_base = subtrees[0].n_particles;
  for (std::size_t r = 0; r < in.cells_per_piece.size(); ++r) {
    const std::int64_t nc = in.cells_per_piece[r], np = in.particles_per_piece[r];
    if (nc < 0 || np < 0 || (nc == 0 && np > 0)) throw InputError("graft: negative or inconsistent piece sizes");
    if ((cell_at + nc) * kPieceCellDoubles > in.cells.size() || (cell_at + nc) * kPieceCellInts > in.links.size() ||
        (particle_at + np) * kPieceParticleDoubles > in.particles.size())
      throw InputError("graft: the piece sizes add up to more than the buffers hold");
    if (nc > 0) {
      Subtree s;
      s.cells = in.cells.data() + cell_at * kPieceCellDoubles;
      s.links = in.links.data() + cell_at * kPieceCellInts;
      s.n_cells = static_cast<std::size_t>(nc);
      s.n_particles = np;
      s.particle_base = particle_base;
      check_piece(s, r);
      subtrees.push_back(s);
    }
    cell_at += static_cast<std::size_t>(nc), particle_at += static_cast<std::size_t>(np);
    particle_base += np;
  }
  if (cell_at * kPieceCellDoubles != in.cells.size() || cell_at * kPieceCellInts != in.links.size() ||
      particle_at * kPieceParticleDoubles != in.particles.size())
    throw InputError("graft: the buffers hold more than the piece sizes say");

  // the synthetic cells above the subtrees, bottom up, kGraftFanOut children each
  std::vector<std::vector<TopItem>> synthetic;
  std::vector<TopItem> items;
  for (std::size_t s = 0; s < subtrees.size(); ++s) items.push_back({false, s});
  do {
    std::vector<TopItem> next;
    for (std::size_t b = 0; b < items.size(); b += kGraftFanOut) {
      synthetic.emplace_back(items.begin() + b, items.begin() + std::min(items.size(), b + kGraftFanOut));
      next.push_back({true, synthetic.size() - 1});
    }
    items = std::move(next);
  } while (items.size() > 1);
  // breadth first from the top: a slot per synthetic cell and subtree root
  std::vector<TopItem> top{items[0]};
  std::vector<std::pair<std::size_t, std::size_t>> synthetic_slots;  // (slot, synthetic id)
  for (std::size_t q = 0; q < top.size(); ++q) {
    if (!top[q].synthetic) {
      subtrees[top[q].id].root_slot = q;
      continue;
    }
    synthetic_slots.emplace_back(q, top[q].id);
    for (const TopItem& c : synthetic[top[q].id]) top.push_back(c);
  }
  std::size_t total = top.size();
  for (Subtree& s : subtrees) s.body_base = total, total += s.n_cells - 1;
  if (total + static_cast<std::size_t>(base) > static_cast<std::size_t>(INT32_MAX))
    throw InputError("graft: more cells than a tree can index");

  GraftedTree out;
  TreeNodes& g = out.nodes;
  resize_nodes(g, total);
  for (const Subtree& s : subtrees)
    for (std::size_t k = 0; k < s.n_cells; ++k) copy_cell(s, k, g);
  if (!stand_in) {
    out.local_index.resize(local.count());
    for (std::size_t k = 0; k < local.count(); ++k) out.local_index[k] = static_cast<std::int32_t>(subtrees[0].slot(k));
  }
  // synthetic cells: children first (a higher slot), so a reverse sweep finds them done
  std::size_t child_slot = 1;
  for (const auto& [slot, id] : synthetic_slots) {
    g.first_child[slot] = static_cast<std::int32_t>(child_slot);
    g.n_children[slot] = static_cast<std::int8_t>(synthetic[id].size());
    child_slot += synthetic[id].size();
  }
  for (auto it = synthetic_slots.rbegin(); it != synthetic_slots.rend(); ++it) {
    const std::size_t c = it->first;
    cell_from_children(g, c, theta);
    std::int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (std::int32_t k = g.first_child[c]; k < g.first_child[c] + g.n_children[c]; ++k)
      if (g.begin[k] != kPrunedRange && g.begin[k] < g.end[k]) lo = std::min(lo, g.begin[k]), hi = std::max(hi, g.end[k]);
    g.begin[c] = lo <= hi ? lo : 0, g.end[c] = lo <= hi ? hi : 0;
  }
  // the top's own links after the paged cells (the stand-in's point into them already)
  if (base != 0)
    for (std::size_t c = 0; c < total; ++c)
      if (g.first_child[c] >= 0 && !(stand_in && c == subtrees[0].root_slot))
        g.first_child[c] += static_cast<std::int32_t>(base);
  fill_walk_cells(g, theta, quad_tol, threads);
  return out;
}

}  // namespace

GraftedTree graft_tree(const TreeNodes& local, const ReceivedPieces& in, double theta, double quad_tol, int threads) {
  return graft(local, false, 0, in, theta, quad_tol, threads);
}

TreeNodes graft_over(const TreeNodes& root, std::int32_t base, const ReceivedPieces& in, double theta, double quad_tol,
                     int threads) {
  if (root.count() != 1) throw std::logic_error("graft_over: the local root is one cell");
  return graft(root, true, base, in, theta, quad_tol, threads).nodes;
}

}  // namespace gravpipe
