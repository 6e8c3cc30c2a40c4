// Groups, the multipole acceptance criterion (MAC) and interaction lists (Barnes 1990):
// the i-particles of a group share one walk, so the MAC is tested once per group rather
// than once per particle, and the resulting list is long and regular, the shape the
// pipeline's SIMD lanes (and GRAPE's pipelines) want.
#include <algorithm>

#include "gravpipe/tree.hpp"
#include "gravpipe/paged_cells.hpp"
#include "octree_split.hpp"
#include "paged_graft_view.hpp"
#include "tree_mac.hpp"

namespace gravpipe {

std::vector<std::int32_t> group_cells(const TreeNodes& t, int n_crit) {
  std::vector<std::int32_t> groups, stack{0};
  while (!stack.empty()) {
    const std::int32_t c = stack.back();
    stack.pop_back();
    if (is_group_cell(t.end[c] - t.begin[c], !t.is_leaf(c), n_crit)) {
      groups.push_back(c);
      continue;
    }
    // children pushed in reverse so that groups come out in curve order
    for (int k = t.n_children[c] - 1; k >= 0; --k) stack.push_back(t.first_child[c] + k);
  }
  return groups;
}

namespace {
/// Append particles [b, e) to the ranges, joining it to the last range when adjacent.
inline void add_range(InteractionList& out, std::int64_t b, std::int64_t e) {
  if (!out.ranges.empty() && out.ranges.back().second == b)
    out.ranges.back().second = e;
  else
    out.ranges.emplace_back(b, e);
}

void reset(InteractionList& out) {
  out.n_near = out.n_far = 0;
  out.ranges.clear();
  out.mac_tests = 0;
  out.pruned_opened = 0;
}

/// Append k to buf[0, n), growing buf when full.
inline void push_cell(std::vector<std::int32_t>& buf, std::size_t& n, std::int32_t k) {
  if (n == buf.size()) buf.resize(2 * n + 256);
  buf[n++] = k;
}

/// An accepted cell: multipole, or monopole alone where its quadrupole term is below
/// quad_tol (WalkCell::mono_d2) or quadrupoles are off.
inline void add_cell(InteractionList& out, std::int32_t k, double d2, const WalkCell& c, const MacParams& mac) {
  if (d2 >= c.mono_d2 || !mac.quadrupole)
    push_cell(out.far_buf, out.n_far, k);
  else
    push_cell(out.near_buf, out.n_near, k);
}
}  // namespace

template <class Cells>
void walk_group(const Cells& t, const Group& g, const MacParams& mac, InteractionList& out,
                Span<const std::int32_t> start) {
  reset(out);
  const Acceptor<Cells> acceptor(t, g, mac);
  std::vector<std::int32_t>& stack = out.stack;
  stack.clear();
  if (start.empty())
    stack.push_back(t.root());
  else
    for (std::size_t q = start.size(); q-- > 0;) stack.push_back(start[q]);  // in order
  while (!stack.empty()) {
    const std::int32_t k = stack.back();
    stack.pop_back();
    ++out.mac_tests;
    double d2 = 0;
    const WalkCell& c = t.walk(k);
    if (acceptor.accepts(k, c, d2))
      add_cell(out, k, d2, c, mac);
    else if (c.first_child < 0 && c.begin == kPrunedRange)
      ++out.pruned_opened;  // an imported cell whose children were never sent: the caller throws
    else if (c.first_child < 0)
      add_range(out, c.begin, c.end);  // an opened leaf: its particles
    else
      for (std::int32_t q = c.first_child + c.n_children - 1; q >= c.first_child; --q) stack.push_back(q);
  }
}

template <class Cells>
void walk_run(const Cells& t, const Group& run, Span<const Group> members, const MacParams& mac,
              InteractionList& shared, std::vector<std::int32_t>& frontier) {
  reset(shared);
  frontier.clear();
  const Acceptor<Cells> run_acceptor(t, run, mac);
  std::vector<Acceptor<Cells>> member_acceptors;
  member_acceptors.reserve(members.size());
  for (const Group& g : members) member_acceptors.emplace_back(t, g, mac);
  std::vector<std::int32_t>& stack = shared.stack;
  stack.assign(1, t.root());
  while (!stack.empty()) {
    const std::int32_t k = stack.back();
    stack.pop_back();
    ++shared.mac_tests;
    double d2 = 0;
    const WalkCell& c = t.walk(k);
    // every member's box lies in the run's box, so what the run accepts they all do
    if (run_acceptor.accepts(k, c, d2)) {
      add_cell(shared, k, d2, c, mac);
      continue;
    }
    // a leaf, or a cell that some member accepts: each member decides for itself
    bool member_accepts = c.first_child < 0;
    for (std::size_t m = 0; m < member_acceptors.size() && !member_accepts; ++m) {
      double dm = 0;
      ++shared.mac_tests;
      member_accepts = member_acceptors[m].accepts(k, c, dm);
    }
    if (member_accepts)
      frontier.push_back(k);
    else  // every member would open it
      for (std::int32_t q = c.first_child + c.n_children - 1; q >= c.first_child; --q) stack.push_back(q);
  }
}

#define GRAVPIPE_INSTANTIATE_WALKS(Cells)                                                                \
  template void walk_group<Cells>(const Cells&, const Group&, const MacParams&, InteractionList&,          \
                                  Span<const std::int32_t>);                                              \
  template void walk_run<Cells>(const Cells&, const Group&, Span<const Group>, const MacParams&,          \
                                InteractionList&, std::vector<std::int32_t>&);
GRAVPIPE_INSTANTIATE_WALKS(InCoreCells)
GRAVPIPE_INSTANTIATE_WALKS(PagedCellReader)
GRAVPIPE_INSTANTIATE_WALKS(GraftedPagedCellReader)
#undef GRAVPIPE_INSTANTIATE_WALKS

}  // namespace gravpipe
