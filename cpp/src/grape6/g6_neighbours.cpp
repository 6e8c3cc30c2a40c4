#include "g6_neighbours.hpp"

#include <algorithm>
#include <cmath>

namespace gravpipe::grape6 {

namespace {
constexpr std::size_t kTile = 32;
}

void NeighbourSearch::build(const PredictedJ& j, const std::vector<std::int64_t>& order) {
  const std::size_t n = j.size();
  x_.resize(n), y_.resize(n), z_.resize(n), index_.resize(n);
  boxes_.resize((n + kTile - 1) / kTile);
  for (std::size_t t = 0; t < boxes_.size(); ++t) {
    Box& b = boxes_[t];
    for (int c = 0; c < 3; ++c) b.lo[c] = INFINITY, b.hi[c] = -INFINITY;
    for (std::size_t s = t * kTile; s < std::min(n, (t + 1) * kTile); ++s) {
      const std::int64_t a = order[s];
      const double p[3] = {j.pos[3 * a], j.pos[3 * a + 1], j.pos[3 * a + 2]};
      x_[s] = p[0], y_[s] = p[1], z_[s] = p[2];
      index_[s] = j.index[a];
      for (int c = 0; c < 3; ++c) b.lo[c] = std::min(b.lo[c], p[c]), b.hi[c] = std::max(b.hi[c], p[c]);
    }
  }
}

double NeighbourSearch::box_distance2(const Box& b, const double x[3]) const {
  double d2 = 0;
  for (int c = 0; c < 3; ++c) {
    const double d = std::max({b.lo[c] - x[c], 0.0, x[c] - b.hi[c]});
    d2 += d * d;
  }
  return d2;
}

// Ties go to the smaller index, so the answer does not depend on the tile order.
double NeighbourSearch::scan_tile(std::size_t t, const double xi[3], int index_i, Nearest& best) const {
  const std::size_t end = std::min(x_.size(), (t + 1) * kTile);
  for (std::size_t s = t * kTile; s < end; ++s) {
    if (index_[s] == index_i) continue;
    const double dx = x_[s] - xi[0], dy = y_[s] - xi[1], dz = z_[s] - xi[2];
    const double r2 = dx * dx + dy * dy + dz * dz;
    if (r2 < best.r2 || (r2 == best.r2 && index_[s] < best.index)) best = {index_[s], r2};
  }
  return best.r2;
}

NeighbourSearch::Nearest NeighbourSearch::nearest(const double xi[3], int index_i) const {
  Nearest best;
  if (boxes_.empty()) return best;
  // Start from the tile whose box is closest (usually the one holding xi): a tight first
  // bound lets the second pass skip almost every other tile.
  std::size_t first = 0;
  double first_d2 = INFINITY;
  for (std::size_t t = 0; t < boxes_.size(); ++t) {
    const double d2 = box_distance2(boxes_[t], xi);
    if (d2 < first_d2) first_d2 = d2, first = t;
  }
  scan_tile(first, xi, index_i, best);
  for (std::size_t t = 0; t < boxes_.size(); ++t)
    if (t != first && box_distance2(boxes_[t], xi) <= best.r2) scan_tile(t, xi, index_i, best);
  return best;
}

std::size_t NeighbourSearch::within(const double xi[3], int index_i, double h2, std::size_t cap,
                                    std::vector<int>& out) const {
  const std::size_t start = out.size();
  std::size_t count = 0;
  for (std::size_t t = 0; t < boxes_.size(); ++t) {
    if (!(box_distance2(boxes_[t], xi) < h2)) continue;
    const std::size_t end = std::min(x_.size(), (t + 1) * kTile);
    for (std::size_t s = t * kTile; s < end; ++s) {
      if (index_[s] == index_i) continue;
      const double dx = x_[s] - xi[0], dy = y_[s] - xi[1], dz = z_[s] - xi[2];
      if (dx * dx + dy * dy + dz * dz < h2) {
        if (count < cap) out.push_back(index_[s]);
        ++count;
      }
    }
  }
  std::sort(out.begin() + static_cast<std::ptrdiff_t>(start), out.end());
  return count;
}

}  // namespace gravpipe::grape6
