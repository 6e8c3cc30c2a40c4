// Export of a locally essential piece (tree_essential.hpp): a breadth-first walk of the
// local tree against the receiver's domain box with the walks' own Acceptor, so that
// children stay contiguous after their parent in the piece, as in every TreeNodes. The
// same walk serves the in-core tree (TreeNodes) and the out-of-core one (paged cells).
#include "gravpipe/tree_essential.hpp"

#include <algorithm>
#include <climits>
#include <cmath>

#include "gravpipe/paged_cells.hpp"
#include "gravpipe/paged_particles.hpp"
#include "tree_mac.hpp"

namespace gravpipe {

namespace {

void put_links(std::vector<std::int64_t>& links, std::int64_t first_child, std::int64_t n_children,
               std::int64_t begin, std::int64_t end) {
  const std::int64_t row[kPieceCellInts] = {first_child, n_children, begin, end};
  links.insert(links.end(), row, row + kPieceCellInts);
}

/// Boxes of a receiver's domain (or unions of them) that one union stands for in the
/// export's tests.
constexpr std::size_t kBoxesPerUnion = 32;

/// A domain box as the group the MAC tests against (it excludes nothing).
Group group_of(const DomainBox& b) {
  Group g;
  for (int a = 0; a < 3; ++a) g.lo[a] = b.lo[a], g.hi[a] = b.hi[a];
  g.a_min = b.a_min;
  return g;
}

/// The box around groups [first, last), with the smallest positive old |a| among them: a
/// cell it accepts, each of them accepts.
Group union_of(const std::vector<Group>& groups, std::size_t first, std::size_t last) {
  Group u = groups[first];
  for (std::size_t k = first + 1; k < last; ++k) {
    const Group& g = groups[k];
    for (int a = 0; a < 3; ++a) u.lo[a] = std::min(u.lo[a], g.lo[a]), u.hi[a] = std::max(u.hi[a], g.hi[a]);
    u.a_min = u.a_min > 0 && g.a_min > 0 ? std::min(u.a_min, g.a_min) : std::max(u.a_min, g.a_min);
  }
  return u;
}

/// A receiver's boxes, each as a group that excludes nothing (it holds none of our
/// particles), under levels of unions of kBoxesPerUnion consecutive ones up to a few: a
/// union that accepts a cell stands for every box below it (the MAC distance only grows as
/// a box shrinks), so a cell far from a run of boxes is settled by one test, and only near
/// a box does the test go down to it.
template <class Cells>
class BoxHierarchy {
 public:
  BoxHierarchy(const Cells& cells, std::vector<Group> boxes, const MacParams& mac) {
    levels_.push_back(std::move(boxes));
    while (levels_.back().size() > kBoxesPerUnion) {
      const std::vector<Group>& below = levels_.back();
      std::vector<Group> unions;
      for (std::size_t b = 0; b < below.size(); b += kBoxesPerUnion)
        unions.push_back(union_of(below, b, std::min(below.size(), b + kBoxesPerUnion)));
      levels_.push_back(std::move(unions));
    }
    // the acceptors hold references to the groups: made once every level is in place
    acceptors_.resize(levels_.size());
    for (std::size_t l = 0; l < levels_.size(); ++l) {
      acceptors_[l].reserve(levels_[l].size());
      for (const Group& g : levels_[l]) acceptors_[l].emplace_back(cells, g, mac);
    }
  }

  /// Whether every box accepts cell k (walk record c).
  bool every_box_accepts(std::int32_t k, const WalkCell& c) const {
    const std::size_t top = levels_.size() - 1;
    for (std::size_t i = 0; i < levels_[top].size(); ++i)
      if (!accepted_below(top, i, k, c)) return false;
    return true;
  }

 private:
  bool accepted_below(std::size_t level, std::size_t i, std::int32_t k, const WalkCell& c) const {
    double d2 = 0;
    if (acceptors_[level][i].accepts(k, c, d2)) return true;
    if (level == 0) return false;
    const std::size_t end = std::min(levels_[level - 1].size(), (i + 1) * kBoxesPerUnion);
    for (std::size_t j = i * kBoxesPerUnion; j < end; ++j)
      if (!accepted_below(level - 1, j, k, c)) return false;
    return true;
  }

  std::vector<std::vector<Group>> levels_;  // [0]: the boxes; [l + 1]: unions of [l]
  std::vector<std::vector<Acceptor<Cells>>> acceptors_;
};

/// The root's box in a piece row: lo (3), hi (3), size, at kPieceColumns' places 4..10.
void put_box(double* row, const double lo[3], const double hi[3]) {
  for (int a = 0; a < 3; ++a) row[4 + a] = lo[a], row[7 + a] = hi[a];
  row[10] = std::max({hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2]});
}

/// The receiver's boxes (empty ones left out) as groups that exclude nothing.
std::vector<Group> receiver_groups(Span<const DomainBox> d) {
  std::vector<Group> boxes;
  for (const DomainBox& b : d)
    if (!b.empty()) boxes.push_back(group_of(b));
  return boxes;
}

/// What a cell of a piece is: accepted by every box (sent without children), an opened
/// leaf (its particles sent) or an opened cell (its children sent).
enum class PieceCell { Pruned, OpenedLeaf, Opened };

/// The cells of the piece for `receiver`, breadth first from the root, so that children
/// stay contiguous after their parent: visit(k, walk record, kind, the piece position of an
/// opened cell's first child) for each. Returns the cells in piece order.
template <class Cells, class Visit>
std::vector<std::int32_t> piece_cells(const Cells& cells, const BoxHierarchy<Cells>& receiver, const Visit& visit) {
  std::vector<std::int32_t> queue{cells.root()};
  for (std::size_t q = 0; q < queue.size(); ++q) {
    const std::int32_t k = queue[q];
    const WalkCell c = cells.walk(k);
    if (receiver.every_box_accepts(k, c)) {
      visit(k, c, PieceCell::Pruned, 0);  // every walk of the receiver accepts it too (its boxes lie inside d)
    } else if (c.first_child < 0) {
      visit(k, c, PieceCell::OpenedLeaf, 0);
    } else {
      visit(k, c, PieceCell::Opened, queue.size());
      for (std::int32_t ch = c.first_child; ch < c.first_child + c.n_children; ++ch) queue.push_back(ch);
    }
  }
  return queue;
}

/// The piece of the tree that `cells` (a cell accessor) reads, whose cell rows `row(k,
/// out)` writes (kPieceCellDoubles values, the box left 0) and whose root's box is
/// [lo, hi], for a receiver with domain d.
template <class Cells, class Row, class Particles>
EssentialPiece export_piece(const Cells& cells, const Row& row, const Particles& p, const double lo[3],
                            const double hi[3], Span<const DomainBox> d, const MacParams& mac) {
  EssentialPiece out;
  std::vector<Group> boxes = receiver_groups(d);
  if (boxes.empty()) return out;
  const BoxHierarchy<Cells> receiver(cells, std::move(boxes), mac);
  const auto put = [&](std::int32_t k, const WalkCell& c, PieceCell kind, std::size_t first_child) {
    out.cells.resize(out.cells.size() + kPieceCellDoubles, 0.0);
    row(k, &out.cells[out.cells.size() - kPieceCellDoubles]);
    if (kind == PieceCell::Pruned)
      put_links(out.links, -1, 0, kPrunedRange, kPrunedRange);
    else if (kind == PieceCell::OpenedLeaf)
      put_links(out.links, -1, 0, 0, 0);  // particles below
    else
      put_links(out.links, static_cast<std::int64_t>(first_child), c.n_children, 0, 0);
  };
  const std::vector<std::int32_t> queue = piece_cells(cells, receiver, put);
  put_box(out.cells.data(), lo, hi);
  // the opened leaves' particles depth first, so that every cell's particles are one range
  std::vector<std::int64_t> stack{0};
  while (!stack.empty()) {
    const auto q = static_cast<std::size_t>(stack.back());
    stack.pop_back();
    std::int64_t* links = &out.links[q * kPieceCellInts];
    if (links[0] >= 0) {
      for (std::int64_t c = links[0] + links[1] - 1; c >= links[0]; --c) stack.push_back(c);
    } else if (links[2] != kPrunedRange) {
      const WalkCell c = cells.walk(queue[q]);
      links[2] = static_cast<std::int64_t>(out.n_particles());
      links[3] = links[2] + (c.end - c.begin);
      const ParticleBlock block = p.block(c.begin, c.end);
      for (std::int64_t i = c.begin; i < c.end; ++i)
        out.particles.insert(out.particles.end(), {block.x(i), block.y(i), block.z(i), block.m(i)});
      p.done_with(block);
    }
  }
  p.release_thread();
  // internal cells' particle ranges: the union of their children's (reverse: children first)
  for (std::size_t q = queue.size(); q-- > 0;) {
    std::int64_t* links = &out.links[q * kPieceCellInts];
    if (links[0] < 0) continue;
    std::int64_t r_lo = INT64_MAX, r_hi = INT64_MIN;
    for (std::int64_t c = links[0]; c < links[0] + links[1]; ++c) {
      const std::int64_t* child = &out.links[static_cast<std::size_t>(c) * kPieceCellInts];
      if (child[2] == kPrunedRange || child[2] == child[3]) continue;  // nothing of it here
      r_lo = std::min(r_lo, child[2]), r_hi = std::max(r_hi, child[3]);
    }
    links[2] = r_lo <= r_hi ? r_lo : 0, links[3] = r_lo <= r_hi ? r_hi : 0;
  }
  return out;
}

/// The size of export_piece's piece, without making it.
template <class Cells>
PieceSize piece_size(const Cells& cells, Span<const DomainBox> d, const MacParams& mac) {
  PieceSize size;
  std::vector<Group> boxes = receiver_groups(d);
  if (boxes.empty()) return size;
  const BoxHierarchy<Cells> receiver(cells, std::move(boxes), mac);
  piece_cells(cells, receiver, [&size](std::int32_t, const WalkCell& c, PieceCell kind, std::size_t) {
    ++size.cells;
    if (kind == PieceCell::OpenedLeaf) size.particles += c.end - c.begin;
  });
  return size;
}

}  // namespace

std::vector<DomainBox> group_boxes(const std::vector<Group>& groups) {
  std::vector<DomainBox> boxes(groups.size());
  for (std::size_t k = 0; k < groups.size(); ++k) {
    for (int a = 0; a < 3; ++a) boxes[k].lo[a] = groups[k].lo[a], boxes[k].hi[a] = groups[k].hi[a];
    boxes[k].a_min = groups[k].a_min;
  }
  return boxes;
}

template <class Particles>
EssentialPiece export_essential(const TreeNodes& t, const Particles& p, Span<const DomainBox> d,
                                const MacParams& mac) {
  if (t.count() == 0) return {};
  const auto row = [&t](std::int32_t k, double* out) {
    for (int c = 0; c < kPieceCellDoubles; ++c)
      if (c < 4 || c > 10) out[c] = (t.*kPieceColumns[c])[static_cast<std::size_t>(k)];
  };
  const double lo[3] = {t.lo_x[0], t.lo_y[0], t.lo_z[0]}, hi[3] = {t.hi_x[0], t.hi_y[0], t.hi_z[0]};
  return export_piece(InCoreCells(t), row, p, lo, hi, d, mac);
}

EssentialPiece export_essential_paged(const PagedCells& cells, const PagedParticles& p, const DomainBox& own,
                                      Span<const DomainBox> d, const MacParams& mac) {
  if (cells.count() == 0) return {};
  const PagedCellReader reader = cells.reader();
  const auto row = [&reader](std::int32_t k, double* out) {
    const PagedCellRecord r = reader.record(k);
    const double v[kPieceCellDoubles] = {r.moments.m, r.walk.cx, r.walk.cy, r.walk.cz, 0, 0, 0, 0, 0, 0, 0,
                                         r.walk.r_open2, r.moments.qxx, r.moments.qxy, r.moments.qxz,
                                         r.moments.qyy, r.moments.qyz, r.moments.qzz, r.moments.qtr};
    std::copy(v, v + kPieceCellDoubles, out);
  };
  return export_piece(reader, row, p, own.lo, own.hi, d, mac);
}

PieceSize essential_size_paged(const PagedCells& cells, Span<const DomainBox> d, const MacParams& mac) {
  if (cells.count() == 0) return {};
  const PagedCellReader reader = cells.reader();
  return piece_size(reader, d, mac);
}

template EssentialPiece export_essential<InCoreParticles>(const TreeNodes&, const InCoreParticles&,
                                                          Span<const DomainBox>, const MacParams&);

}  // namespace gravpipe
