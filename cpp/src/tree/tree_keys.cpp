// Keys and curve order: every position gets a 63-bit Morton key in the bounding cube of
// the set, and the particles are sorted by key. Curve order makes each octree cell a
// contiguous range, and later makes out-of-core pages and MPI domains contiguous too.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "gravpipe/morton.hpp"
#include "gravpipe/tree.hpp"

namespace gravpipe {

KeyFrame key_frame(Span<const double> pos, int threads) {
  const auto n = static_cast<std::int64_t>(pos.size() / 3);
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  double lx = INFINITY, ly = INFINITY, lz = INFINITY, hx = -INFINITY, hy = -INFINITY, hz = -INFINITY;
#pragma omp parallel for num_threads(threads) reduction(min : lx, ly, lz) reduction(max : hx, hy, hz)
  for (std::int64_t k = 0; k < n; ++k) {
    lx = std::min(lx, pos[3 * k]), hx = std::max(hx, pos[3 * k]);
    ly = std::min(ly, pos[3 * k + 1]), hy = std::max(hy, pos[3 * k + 1]);
    lz = std::min(lz, pos[3 * k + 2]), hz = std::max(hz, pos[3 * k + 2]);
  }
  lo[0] = lx, lo[1] = ly, lo[2] = lz, hi[0] = hx, hi[1] = hy, hi[2] = hz;
  KeyFrame f;
  double side = 0;
  for (int c = 0; c < 3; ++c) {
    f.lo[c] = n > 0 ? lo[c] : 0.0;
    side = std::max(side, n > 0 ? hi[c] - lo[c] : 0.0);
  }
  // (cells - 1) / side keeps the largest coordinate inside the last cell.
  const double cells = static_cast<double>(1u << kMortonBitsPerAxis);
  f.scale = side > 0 ? (cells - 1) / side : 0.0;
  return f;
}

std::vector<std::uint64_t> curve_keys(Span<const double> pos, const KeyFrame& f, int threads) {
  const auto n = static_cast<std::int64_t>(pos.size() / 3);
  std::vector<std::uint64_t> keys(static_cast<std::size_t>(n));
  const double top = static_cast<double>((1u << kMortonBitsPerAxis) - 1);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t k = 0; k < n; ++k) {
    std::uint32_t q[3];
    for (int c = 0; c < 3; ++c) {
      // clamp: points outside the frame (forces_at on foreign positions) keep a valid key
      const double g = std::clamp((pos[3 * k + c] - f.lo[c]) * f.scale, 0.0, top);
      q[c] = static_cast<std::uint32_t>(g);
    }
    keys[k] = morton_key(q[0], q[1], q[2]);
  }
  return keys;
}

std::vector<std::int64_t> curve_sort(std::vector<std::uint64_t>& keys, int threads) {
  const std::size_t n = keys.size();
  std::vector<std::pair<std::uint64_t, std::int64_t>> kv(n);
  for (std::size_t k = 0; k < n; ++k) kv[k] = {keys[k], static_cast<std::int64_t>(k)};
  // (key, index) pairs are all distinct, so the sorted order is unique: the same for any
  // chunking, hence for any thread count.
  const int chunks = (n < 65536) ? 1 : std::max(1, threads);
  std::vector<std::size_t> b(chunks + 1);
  for (int c = 0; c <= chunks; ++c) b[c] = n * c / chunks;
#pragma omp parallel for num_threads(chunks) schedule(static, 1)
  for (int c = 0; c < chunks; ++c) std::sort(kv.begin() + b[c], kv.begin() + b[c + 1]);
  for (int width = 1; width < chunks; width *= 2) {
#pragma omp parallel for num_threads(chunks) schedule(static, 1)
    for (int c = 0; c < chunks; c += 2 * width) {
      if (c + width < chunks)
        std::inplace_merge(kv.begin() + b[c], kv.begin() + b[c + width],
                           kv.begin() + b[std::min(c + 2 * width, chunks)]);
    }
  }
  std::vector<std::int64_t> order(n);
  for (std::size_t k = 0; k < n; ++k) {
    keys[k] = kv[k].first;
    order[k] = kv[k].second;
  }
  return order;
}

}  // namespace gravpipe
