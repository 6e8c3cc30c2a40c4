// The multipole acceptance criterion (MAC), the one test that decides whether a cell may be
// used whole. Internal to src/tree: the walks (tree_walk.cpp) and the export of locally
// essential pieces (tree_essential.cpp) both test cells through Acceptor, so that what a
// rank prunes from the piece it sends is exactly what the receiver's walks accept.
#pragma once
#include <algorithm>

#include "gravpipe/tree.hpp"

namespace gravpipe {

/// Squared distance from the point (x, y, z) to the box [lo, hi] of g (0 inside). std::max,
/// not std::fmax: fmax's NaN rules make it a library call. It only grows as the box shrinks,
/// which is what makes a pruned export safe (tree_essential.hpp).
inline double box_distance2(const Group& g, double x, double y, double z) {
  const double dx = std::max(std::max(g.lo[0] - x, x - g.hi[0]), 0.0);
  const double dy = std::max(std::max(g.lo[1] - y, y - g.hi[1]), 0.0);
  const double dz = std::max(std::max(g.lo[2] - z, z - g.hi[2]), 0.0);
  return dx * dx + dy * dy + dz * dz;
}

/// The acceptance test of one group (or of a domain's box): the Barnes-Hut criterion from
/// its box and, with old accelerations, GADGET's relative criterion. Cells through an
/// accessor (tree.hpp), which must outlive the Acceptor.
template <class Cells>
class Acceptor {
 public:
  Acceptor(const Cells& t, const Group& g, const MacParams& mac)
      : t_(t), g_(g), relative_(mac.alpha > 0 && g.a_min > 0),
        rel_bound_(relative_ ? mac.alpha * g.a_min / mac.G : 0.0) {}
  /// Whether the group may use cell k (whose walk record is c) whole; d2: its squared
  /// distance from the box.
  bool accepts(std::int32_t k, const WalkCell& c, double& d2) const {
    // a cell holding an excluded particle of the group (its own particles, for
    // self-gravity) must never be used whole: its mass would include them
    const bool holds_excluded = c.begin < g_.ex_end && g_.ex_begin < c.end;
    d2 = box_distance2(g_, c.cx, c.cy, c.cz);
    bool accept = !holds_excluded && d2 > c.r_open2;
    // the relative criterion: the cell's error term G M l^2 / d^4 must stay below
    // alpha |a_old| of the most sensitive particle in the group (a smaller a_min, a
    // larger box: fewer cells accepted)
    if (accept && relative_) accept = t_.mass_size2(k) <= rel_bound_ * d2 * d2;
    return accept;
  }
  bool accepts(std::int32_t k, double& d2) const { return accepts(k, t_.walk(k), d2); }

 private:
  const Cells& t_;
  const Group& g_;
  bool relative_;
  double rel_bound_;
};

}  // namespace gravpipe
