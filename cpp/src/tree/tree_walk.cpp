// Groups, the multipole acceptance criterion (MAC) and interaction lists (Barnes 1990):
// the i-particles of a group share one walk, so the MAC is tested once per group rather
// than once per particle, and the resulting list is long and regular, the shape the
// pipeline's SIMD lanes (and GRAPE's pipelines) want.
#include <algorithm>

#include "gravpipe/tree.hpp"

namespace gravpipe {

std::vector<std::int32_t> group_cells(const TreeNodes& t, int n_crit) {
  std::vector<std::int32_t> groups, stack{0};
  while (!stack.empty()) {
    const std::int32_t c = stack.back();
    stack.pop_back();
    if (t.end[c] - t.begin[c] <= n_crit || t.is_leaf(c)) {
      groups.push_back(c);
      continue;
    }
    // children pushed in reverse so that groups come out in curve order
    for (int k = t.n_children[c] - 1; k >= 0; --k) stack.push_back(t.first_child[c] + k);
  }
  return groups;
}

namespace {
/// Squared distance from the point (x, y, z) to the box [lo, hi] (0 inside). std::max,
/// not std::fmax: fmax's NaN rules make it a library call.
inline double box_distance2(const Group& g, double x, double y, double z) {
  const double dx = std::max(std::max(g.lo[0] - x, x - g.hi[0]), 0.0);
  const double dy = std::max(std::max(g.lo[1] - y, y - g.hi[1]), 0.0);
  const double dz = std::max(std::max(g.lo[2] - z, z - g.hi[2]), 0.0);
  return dx * dx + dy * dy + dz * dz;
}

/// Append particles [b, e) to the ranges, joining it to the last range when adjacent.
inline void add_range(InteractionList& out, std::int64_t b, std::int64_t e) {
  if (!out.ranges.empty() && out.ranges.back().second == b)
    out.ranges.back().second = e;
  else
    out.ranges.emplace_back(b, e);
}
}  // namespace

void walk_group(const TreeNodes& t, const Group& g, const MacParams& mac, InteractionList& out) {
  if (out.near_buf.size() < t.count()) out.near_buf.resize(t.count()), out.far_buf.resize(t.count());
  out.n_near = out.n_far = 0;
  out.ranges.clear();
  const bool relative = mac.alpha > 0 && g.a_min > 0;
  const double rel_bound = relative ? mac.alpha * g.a_min / mac.G : 0.0;
  const WalkCell* cells = t.walk.data();
  std::int32_t* near = out.near_buf.data();
  std::int32_t* far = out.far_buf.data();
  std::size_t n_near = 0, n_far = 0;
  std::uint64_t tests = 0;
  // depth first; at most 7 siblings wait per level
  std::int32_t stack[8 * (kTreeMaxLevel + 2)];
  int top = 0;
  stack[top++] = 0;
  while (top > 0) {
    const std::int32_t k = stack[--top];
    const WalkCell& c = cells[k];
    ++tests;
    // a cell holding an excluded particle of the group (its own particles, for
    // self-gravity) must never be used whole: its mass would include them
    const bool holds_excluded = c.begin < g.ex_end && g.ex_begin < c.end;
    const double d2 = box_distance2(g, c.cx, c.cy, c.cz);
    bool accept = !holds_excluded && d2 > c.r_open2;
    // GADGET's relative criterion: the cell's error term G M l^2 / d^4 must stay below
    // alpha |a_old| of the most sensitive particle in the group
    if (accept && relative) accept = t.mass[k] * t.size[k] * t.size[k] <= rel_bound * d2 * d2;
    if (accept) {
      // the quadrupole term is below quad_tol of the monopole's (or not wanted)
      if (d2 >= c.mono_d2 || !mac.quadrupole)
        far[n_far++] = k;
      else
        near[n_near++] = k;
    } else if (c.first_child < 0) {
      add_range(out, c.begin, c.end);  // an opened leaf: its particles
    } else {
      for (std::int32_t q = c.first_child + c.n_children - 1; q >= c.first_child; --q) stack[top++] = q;
    }
  }
  out.n_near = n_near, out.n_far = n_far;
  out.mac_tests = tests;
}

}  // namespace gravpipe
