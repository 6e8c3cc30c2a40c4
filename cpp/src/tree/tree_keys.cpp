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
  // LSD radix sort of (key, index) pairs, 11-bit digits. Each pass is stable, so equal keys
  // keep index order: the result is the unique order of the pairs, whatever the thread
  // count. Chunks of the input are counted and scattered by one thread each; a chunk's
  // elements of digit d land after those of the chunks before it (stability again).
  constexpr int kBits = 11;
  constexpr std::size_t kBuckets = std::size_t{1} << kBits;
  const std::size_t n = keys.size();
  std::vector<std::int64_t> order(n), order_tmp(n);
  std::vector<std::uint64_t> keys_tmp(n);
  for (std::size_t k = 0; k < n; ++k) order[k] = static_cast<std::int64_t>(k);
  const int chunks = (n < 65536) ? 1 : std::max(1, threads);
  std::vector<std::size_t> bounds(chunks + 1), count(chunks * kBuckets);
  for (int c = 0; c <= chunks; ++c) bounds[c] = n * c / chunks;
  for (int shift = 0; shift < 64; shift += kBits) {
    auto digit = [shift](std::uint64_t key) { return (key >> shift) & (kBuckets - 1); };
#pragma omp parallel for num_threads(chunks) schedule(static, 1)
    for (int c = 0; c < chunks; ++c) {
      std::size_t* h = &count[c * kBuckets];
      std::fill(h, h + kBuckets, std::size_t{0});
      for (std::size_t k = bounds[c]; k < bounds[c + 1]; ++k) ++h[digit(keys[k])];
    }
    // a pass where every key has the same digit (the high bits of a compact set) moves
    // nothing: skip it
    bool moves = true;
    for (std::size_t d = 0; d < kBuckets && moves; ++d) {
      std::size_t total = 0;
      for (int c = 0; c < chunks; ++c) total += count[c * kBuckets + d];
      moves = total != n;
    }
    if (!moves) continue;
    std::size_t start = 0;  // exclusive prefix sum, digit-major then chunk
    for (std::size_t d = 0; d < kBuckets; ++d)
      for (int c = 0; c < chunks; ++c) {
        const std::size_t m = count[c * kBuckets + d];
        count[c * kBuckets + d] = start;
        start += m;
      }
#pragma omp parallel for num_threads(chunks) schedule(static, 1)
    for (int c = 0; c < chunks; ++c) {
      std::size_t* at = &count[c * kBuckets];
      for (std::size_t k = bounds[c]; k < bounds[c + 1]; ++k) {
        const std::size_t to = at[digit(keys[k])]++;
        keys_tmp[to] = keys[k];
        order_tmp[to] = order[k];
      }
    }
    keys.swap(keys_tmp);
    order.swap(order_tmp);
  }
  return order;
}

}  // namespace gravpipe
