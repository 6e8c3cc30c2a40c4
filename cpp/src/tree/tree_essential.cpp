// Export of a locally essential piece (tree_essential.hpp): a breadth-first walk of the
// local tree against the receiver's domain box with the walks' own Acceptor, so that
// children stay contiguous after their parent in the piece, as in every TreeNodes.
#include "gravpipe/tree_essential.hpp"

#include <algorithm>
#include <climits>

#include "tree_mac.hpp"

namespace gravpipe {

namespace {

/// Cell k's moments as one row of a piece's cells.
void put_cell_row(const TreeNodes& t, std::int32_t k, std::vector<double>& cells) {
  for (const CellColumn col : kPieceColumns) cells.push_back((t.*col)[k]);
}

void put_links(std::vector<std::int64_t>& links, std::int64_t first_child, std::int64_t n_children,
               std::int64_t begin, std::int64_t end) {
  const std::int64_t row[kPieceCellInts] = {first_child, n_children, begin, end};
  links.insert(links.end(), row, row + kPieceCellInts);
}

}  // namespace

template <class Particles>
EssentialPiece export_essential(const TreeNodes& t, const Particles& p, const DomainBox& d, const MacParams& mac) {
  EssentialPiece out;
  if (d.empty() || t.count() == 0) return out;
  // the receiver's domain as one group that excludes nothing: it holds none of our particles
  Group box;
  for (int a = 0; a < 3; ++a) box.lo[a] = d.lo[a], box.hi[a] = d.hi[a];
  box.a_min = d.a_min;
  const InCoreCells cells(t);
  const Acceptor<InCoreCells> acceptor(cells, box, mac);
  std::vector<std::int32_t> queue{0};  // source cells in piece order (breadth first)
  for (std::size_t q = 0; q < queue.size(); ++q) {
    const std::int32_t k = queue[q];
    put_cell_row(t, k, out.cells);
    double d2 = 0;
    if (acceptor.accepts(k, d2)) {
      // every walk of the receiver accepts it too (its boxes lie inside d): no children
      put_links(out.links, -1, 0, kPrunedRange, kPrunedRange);
    } else if (t.is_leaf(k)) {
      put_links(out.links, -1, 0, 0, 0);  // an opened leaf: particles below
    } else {
      put_links(out.links, static_cast<std::int64_t>(queue.size()), t.n_children[k], 0, 0);
      for (std::int32_t c = t.first_child[k]; c < t.first_child[k] + t.n_children[k]; ++c) queue.push_back(c);
    }
  }
  // the opened leaves' particles depth first, so that every cell's particles are one range
  std::vector<std::int64_t> stack{0};
  while (!stack.empty()) {
    const auto q = static_cast<std::size_t>(stack.back());
    stack.pop_back();
    std::int64_t* row = &out.links[q * kPieceCellInts];
    if (row[0] >= 0) {
      for (std::int64_t c = row[0] + row[1] - 1; c >= row[0]; --c) stack.push_back(c);
    } else if (row[2] != kPrunedRange) {
      const std::int32_t k = queue[q];
      row[2] = static_cast<std::int64_t>(out.n_particles());
      row[3] = row[2] + (t.end[k] - t.begin[k]);
      const ParticleBlock block = p.block(t.begin[k], t.end[k]);
      for (std::int64_t i = t.begin[k]; i < t.end[k]; ++i)
        out.particles.insert(out.particles.end(), {block.x(i), block.y(i), block.z(i), block.m(i)});
    }
  }
  // internal cells' particle ranges: the union of their children's (reverse: children first)
  for (std::size_t q = queue.size(); q-- > 0;) {
    std::int64_t* row = &out.links[q * kPieceCellInts];
    if (row[0] < 0) continue;
    std::int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (std::int64_t c = row[0]; c < row[0] + row[1]; ++c) {
      const std::int64_t* child = &out.links[static_cast<std::size_t>(c) * kPieceCellInts];
      if (child[2] == kPrunedRange || child[2] == child[3]) continue;  // nothing of it here
      lo = std::min(lo, child[2]), hi = std::max(hi, child[3]);
    }
    row[2] = lo <= hi ? lo : 0, row[3] = lo <= hi ? hi : 0;
  }
  return out;
}

template EssentialPiece export_essential<InCoreParticles>(const TreeNodes&, const InCoreParticles&, const DomainBox&,
                                                          const MacParams&);

}  // namespace gravpipe
