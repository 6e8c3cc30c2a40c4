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
/// Squared distance from the point (x, y, z) to the box [lo, hi] (0 inside).
inline double box_distance2(const Group& g, double x, double y, double z) {
  const double dx = std::max({g.lo[0] - x, 0.0, x - g.hi[0]});
  const double dy = std::max({g.lo[1] - y, 0.0, y - g.hi[1]});
  const double dz = std::max({g.lo[2] - z, 0.0, z - g.hi[2]});
  return dx * dx + dy * dy + dz * dz;
}
}  // namespace

void walk_group(const TreeNodes& t, const Group& g, const MacParams& mac, InteractionList& out) {
  out.cells.clear();
  out.ranges.clear();
  out.mac_tests = 0;
  const bool relative = mac.alpha > 0 && g.a_min > 0;
  // a fixed-size stack: at most 7 siblings wait per level, 22 levels
  std::int32_t stack[8 * (kTreeMaxLevel + 2)];
  int top = 0;
  stack[top++] = 0;
  while (top > 0) {
    const std::int32_t c = stack[--top];
    ++out.mac_tests;
    // a cell holding an excluded particle of the group (its own particles, for
    // self-gravity) must never be used whole: its mass would include them
    const bool holds_excluded = t.begin[c] < g.ex_end && g.ex_begin < t.end[c];
    bool accept = false;
    if (!holds_excluded) {
      const double d2 = box_distance2(g, t.cx[c], t.cy[c], t.cz[c]);
      accept = d2 > t.r_open2[c];
      // GADGET's relative criterion: the cell's error term G M l^2 / d^4 must stay below
      // alpha |a_old| of the most sensitive particle in the group
      if (accept && relative)
        accept = mac.G * t.mass[c] * t.size[c] * t.size[c] <= mac.alpha * g.a_min * d2 * d2;
    }
    if (accept) {
      out.cells.push_back(c);
    } else if (t.is_leaf(c)) {
      if (!out.ranges.empty() && out.ranges.back().second == t.begin[c])
        out.ranges.back().second = t.end[c];  // adjacent leaves: one longer run
      else
        out.ranges.emplace_back(t.begin[c], t.end[c]);
    } else {
      for (int k = t.n_children[c] - 1; k >= 0; --k) stack[top++] = t.first_child[c] + k;
    }
  }
}

}  // namespace gravpipe
