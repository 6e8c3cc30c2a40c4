// Nearest neighbours and neighbour lists over the predicted j-particles (g6calc_lasthalf2,
// g6_read/get_neighbour_list). GRAPE-6 builds them in its pipelines during the force
// calculation; here they come from a separate search over tiles of 32 particles with
// bounding boxes: a tile whose box lies farther than the best distance so far (nearest) or
// than h (lists) is skipped. Tiles are the leaves of a k-d split (kd_order): unlike curve
// runs, which in a cluster's sparse halo can span the whole core, k-d leaves stay compact
// everywhere. The order is refreshed only when the context re-sorts its pipeline, so tiles
// loosen as particles move, but boxes are rebuilt from the current predicted positions, so
// results are exact whatever the order. Tiles are grouped (16) under one more box, so a far
// group costs one test, not one per tile.
// Distances are unsoftened; a j-particle with the i-particle's index is skipped.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "g6_jmemory.hpp"

namespace gravpipe::grape6 {

/// A permutation of the particles (3n positions, row-major) whose consecutive runs of 32 are
/// the leaves of a k-d tree (each split halves the longest side of a node's box at a
/// multiple of 32 particles). Deterministic.
std::vector<std::int64_t> kd_order(Span<const double> pos);

class NeighbourSearch {
 public:
  /// Rebuild tiles and boxes over j (predicted), visiting particles in `order` (a
  /// permutation of [0, j.size())).
  void build(const PredictedJ& j, const std::vector<std::int64_t>& order);

  struct Nearest {
    int index = -1;        // GRAPE index of the nearest j-particle, -1 when there is none
    double r2 = INFINITY;  // its squared distance
  };
  Nearest nearest(const double xi[3], int index_i) const;
  /// Appends to `out` (at most `cap` of them) the indices of j-particles with r^2 < h2,
  /// sorted ascending; returns how many there are in all (may exceed cap).
  std::size_t within(const double xi[3], int index_i, double h2, std::size_t cap, std::vector<int>& out) const;

 private:
  struct Box {
    double lo[3], hi[3];
  };
  static double box_distance2(const Box& b, const double x[3]);
  void scan_tile(std::size_t t, const double xi[3], int index_i, Nearest& best) const;
  std::size_t closest_tile(const double xi[3]) const;

  std::vector<double> x_, y_, z_;  // tile order
  std::vector<int> index_;
  std::vector<Box> boxes_;   // one per tile
  std::vector<Box> groups_;  // one per kTilesPerGroup consecutive tiles
};

}  // namespace gravpipe::grape6
