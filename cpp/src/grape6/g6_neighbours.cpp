#include "g6_neighbours.hpp"

#include <algorithm>
#include <cmath>

namespace gravpipe::grape6 {

namespace {
constexpr std::size_t kTile = 32;
constexpr std::size_t kTilesPerGroup = 16;

std::size_t group_end(std::size_t g, std::size_t n_tiles) { return std::min(n_tiles, (g + 1) * kTilesPerGroup); }

void kd_split(Span<const double> pos, std::vector<std::int64_t>& order, std::size_t begin, std::size_t end) {
  while (end - begin > kTile) {
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (std::size_t s = begin; s < end; ++s)
      for (int c = 0; c < 3; ++c) lo[c] = std::min(lo[c], pos[3 * order[s] + c]), hi[c] = std::max(hi[c], pos[3 * order[s] + c]);
    int axis = 0;
    for (int c = 1; c < 3; ++c)
      if (hi[c] - lo[c] > hi[axis] - lo[axis]) axis = c;
    // the left part holds a whole number of tiles, so every leaf starts on a tile boundary
    const std::size_t half_tiles = ((end - begin + kTile - 1) / kTile + 1) / 2;
    const std::size_t mid = begin + half_tiles * kTile;
    // ties broken by index: the order does not depend on the library's nth_element
    std::nth_element(order.begin() + static_cast<std::ptrdiff_t>(begin), order.begin() + static_cast<std::ptrdiff_t>(mid),
                     order.begin() + static_cast<std::ptrdiff_t>(end), [&](std::int64_t a, std::int64_t b) {
                       const double pa = pos[3 * a + axis], pb = pos[3 * b + axis];
                       return pa < pb || (pa == pb && a < b);
                     });
    kd_split(pos, order, begin, mid);
    begin = mid;
  }
}
}  // namespace

std::vector<std::int64_t> kd_order(Span<const double> pos) {
  const std::size_t n = pos.size() / 3;
  std::vector<std::int64_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::int64_t>(i);
  kd_split(pos, order, 0, n);
  return order;
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
  groups_.resize((boxes_.size() + kTilesPerGroup - 1) / kTilesPerGroup);
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    Box& b = groups_[g];
    for (int c = 0; c < 3; ++c) b.lo[c] = INFINITY, b.hi[c] = -INFINITY;
    for (std::size_t t = g * kTilesPerGroup; t < group_end(g, boxes_.size()); ++t)
      for (int c = 0; c < 3; ++c) b.lo[c] = std::min(b.lo[c], boxes_[t].lo[c]), b.hi[c] = std::max(b.hi[c], boxes_[t].hi[c]);
  }
}

double NeighbourSearch::box_distance2(const Box& b, const double x[3]) {
  double d2 = 0;
  for (int c = 0; c < 3; ++c) {
    const double below = b.lo[c] - x[c], above = x[c] - b.hi[c];  // at most one is > 0
    const double d = below > 0 ? below : (above > 0 ? above : 0.0);
    d2 += d * d;
  }
  return d2;
}

// Ties go to the smaller index, so the answer does not depend on the tile order.
void NeighbourSearch::scan_tile(std::size_t t, const double xi[3], int index_i, Nearest& best) const {
  const std::size_t end = std::min(x_.size(), (t + 1) * kTile);
  for (std::size_t s = t * kTile; s < end; ++s) {
    if (index_[s] == index_i) continue;
    const double dx = x_[s] - xi[0], dy = y_[s] - xi[1], dz = z_[s] - xi[2];
    const double r2 = dx * dx + dy * dy + dz * dz;
    if (r2 < best.r2 || (r2 == best.r2 && index_[s] < best.index)) best = {index_[s], r2};
  }
}

// The tile whose box is closest to xi (usually the one holding it), through the closest group.
std::size_t NeighbourSearch::closest_tile(const double xi[3]) const {
  std::size_t group = 0, tile = 0;
  double d2_min = INFINITY;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const double d2 = box_distance2(groups_[g], xi);
    if (d2 < d2_min) d2_min = d2, group = g;
  }
  d2_min = INFINITY;
  for (std::size_t t = group * kTilesPerGroup; t < group_end(group, boxes_.size()); ++t) {
    const double d2 = box_distance2(boxes_[t], xi);
    if (d2 < d2_min) d2_min = d2, tile = t;
  }
  return tile;
}

NeighbourSearch::Nearest NeighbourSearch::nearest(const double xi[3], int index_i) const {
  Nearest best;
  if (boxes_.empty()) return best;
  // A tight first bound from the closest tile lets the sweep skip almost every other group.
  const std::size_t first = closest_tile(xi);
  scan_tile(first, xi, index_i, best);
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (box_distance2(groups_[g], xi) > best.r2) continue;
    for (std::size_t t = g * kTilesPerGroup; t < group_end(g, boxes_.size()); ++t)
      if (t != first && box_distance2(boxes_[t], xi) <= best.r2) scan_tile(t, xi, index_i, best);
  }
  return best;
}

std::size_t NeighbourSearch::within(const double xi[3], int index_i, double h2, std::size_t cap,
                                    std::vector<int>& out) const {
  const std::size_t start = out.size();
  std::size_t count = 0;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (!(box_distance2(groups_[g], xi) < h2)) continue;
    for (std::size_t t = g * kTilesPerGroup; t < group_end(g, boxes_.size()); ++t) {
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
  }
  std::sort(out.begin() + static_cast<std::ptrdiff_t>(start), out.end());
  return count;
}

}  // namespace gravpipe::grape6
