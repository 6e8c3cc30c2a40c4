// Curve keys and the deterministic sort (curve_order.hpp).
#include "gravpipe/curve_order.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "gravpipe/debug_checks.hpp"
#include "gravpipe/error.hpp"
#include "gravpipe/hilbert.hpp"

namespace gravpipe {

namespace {

// Loops over fewer particles than this stay on the calling thread: a fork/join costs more
// than the loop (the pipeline sorts every small Hermite block's i-set).
constexpr std::int64_t kMinParallel = 16384;
// Below this many keys a comparison sort beats the radix sort's fixed cost (up to six passes
// over 2048 buckets; measured crossover ~3000 uniform keys, one thread); both give the same,
// stable order.
constexpr std::size_t kMinRadix = 3072;
// Below this many keys the radix sort runs as one chunk (one thread).
constexpr std::size_t kMinParallelRadix = 65536;

constexpr int kDigitBits = 11;  // 6 passes over 64-bit keys; fewer when high digits are constant
constexpr std::size_t kBuckets = std::size_t{1} << kDigitBits;

/// Equal share of [0, n) per chunk: chunk c is [bounds[c], bounds[c + 1]).
std::vector<std::size_t> chunk_bounds(std::size_t n, int chunks) {
  std::vector<std::size_t> bounds(chunks + 1);
  for (int c = 0; c <= chunks; ++c) bounds[c] = n * c / chunks;
  return bounds;
}

/// The stable LSD radix sort's state: the chunks, and per chunk a count (then an output
/// offset) for each digit value.
struct RadixPass {
  std::vector<std::size_t> bounds, count;
  int chunks;
  int shift = 0;
  std::size_t digit(std::uint64_t key) const { return (key >> shift) & (kBuckets - 1); }
  std::size_t* at(int c) { return &count[c * kBuckets]; }
};

void count_digits(RadixPass& p, const std::vector<std::uint64_t>& keys) {
#pragma omp parallel for num_threads(p.chunks) schedule(static, 1) if (p.chunks > 1)
  for (int c = 0; c < p.chunks; ++c) {
    std::size_t* h = p.at(c);
    std::fill(h, h + kBuckets, std::size_t{0});
    for (std::size_t k = p.bounds[c]; k < p.bounds[c + 1]; ++k) ++h[p.digit(keys[k])];
  }
}

/// Whether every key has the same digit (the high digits of a compact set): then the pass
/// moves nothing and is skipped.
bool digit_is_constant(const RadixPass& p, std::size_t n) {
  for (std::size_t d = 0; d < kBuckets; ++d) {
    std::size_t total = 0;
    for (int c = 0; c < p.chunks; ++c) total += p.count[c * kBuckets + d];
    if (total == n) return true;
  }
  return false;
}

/// Counts -> output offsets, digit-major then chunk: a chunk's keys of digit d land after
/// those of the chunks before it, which keeps the pass stable whatever the chunking.
void prefix_offsets(RadixPass& p) {
  std::size_t start = 0;
  for (std::size_t d = 0; d < kBuckets; ++d)
    for (int c = 0; c < p.chunks; ++c) {
      const std::size_t m = p.count[c * kBuckets + d];
      p.count[c * kBuckets + d] = start;
      start += m;
    }
}

void scatter(RadixPass& p, const std::vector<std::uint64_t>& keys, const std::vector<std::int64_t>& values,
             std::vector<std::uint64_t>& keys_out, std::vector<std::int64_t>& values_out) {
#pragma omp parallel for num_threads(p.chunks) schedule(static, 1) if (p.chunks > 1)
  for (int c = 0; c < p.chunks; ++c) {
    std::size_t* at = p.at(c);
    for (std::size_t k = p.bounds[c]; k < p.bounds[c + 1]; ++k) {
      const std::size_t to = at[p.digit(keys[k])]++;
      keys_out[to] = keys[k];
      values_out[to] = values[k];
    }
  }
}

/// Stable LSD radix sort, 11-bit digits; chunks of the input are counted and scattered by
/// one thread each.
void radix_sort(std::vector<std::uint64_t>& keys, std::vector<std::int64_t>& values, int threads,
                SortScratch& scratch) {
  const std::size_t n = keys.size();
  RadixPass p;
  p.chunks = n < kMinParallelRadix ? 1 : std::max(1, threads);
  p.bounds = chunk_bounds(n, p.chunks);
  p.count.resize(p.chunks * kBuckets);
  std::vector<std::uint64_t>& keys_tmp = scratch.keys;
  std::vector<std::int64_t>& values_tmp = scratch.values;
  keys_tmp.resize(n);
  values_tmp.resize(n);
  for (p.shift = 0; p.shift < 64; p.shift += kDigitBits) {
    count_digits(p, keys);
    if (digit_is_constant(p, n)) continue;
    prefix_offsets(p);
    scatter(p, keys, values, keys_tmp, values_tmp);
    // the buffers trade places: both stay allocated, the caller's and the scratch's
    keys.swap(keys_tmp);
    values.swap(values_tmp);
  }
}

/// Small sets: sort (key, input position) pairs, which are all distinct, so the order is
/// the stable one, the radix sort's.
void comparison_sort(std::vector<std::uint64_t>& keys, std::vector<std::int64_t>& values) {
  const std::size_t n = keys.size();
  std::vector<std::pair<std::uint64_t, std::size_t>> keyed(n);
  for (std::size_t k = 0; k < n; ++k) keyed[k] = {keys[k], k};
  std::sort(keyed.begin(), keyed.end());
  const std::vector<std::int64_t> old(values);
  for (std::size_t k = 0; k < n; ++k) keys[k] = keyed[k].first, values[k] = old[keyed[k].second];
}

}  // namespace

CurveBox curve_box(const double lo[3], const double hi[3]) {
  CurveBox box;
  double side = 0;
  for (int c = 0; c < 3; ++c) {
    box.lo[c] = lo[c];
    side = std::max(side, hi[c] - lo[c]);
  }
  // (cells - 1) / side keeps the largest coordinate inside the last cell.
  const double cells = static_cast<double>(1u << kMortonBitsPerAxis);
  box.scale = side > 0 ? (cells - 1) / side : 0.0;
  return box;
}

AxisBounds axis_bounds(Span<const double> pos, int threads) {
  const auto n = static_cast<std::int64_t>(pos.size() / 3);
  double lx = INFINITY, ly = INFINITY, lz = INFINITY, hx = -INFINITY, hy = -INFINITY, hz = -INFINITY;
#pragma omp parallel for num_threads(threads) if (n >= kMinParallel) \
    reduction(min : lx, ly, lz) reduction(max : hx, hy, hz)
  for (std::int64_t k = 0; k < n; ++k) {
    lx = std::min(lx, pos[3 * k]), hx = std::max(hx, pos[3 * k]);
    ly = std::min(ly, pos[3 * k + 1]), hy = std::max(hy, pos[3 * k + 1]);
    lz = std::min(lz, pos[3 * k + 2]), hz = std::max(hz, pos[3 * k + 2]);
  }
  AxisBounds b;
  b.lo[0] = lx, b.lo[1] = ly, b.lo[2] = lz, b.hi[0] = hx, b.hi[1] = hy, b.hi[2] = hz;
  return b;
}

CurveBox bounding_cube(Span<const double> pos, int threads) {
  if (pos.size() < 3) return CurveBox{};
  return axis_bounds(pos, threads).cube();
}

AxisBounds with_room(const AxisBounds& before) {
  double extent = 0;
  for (int c = 0; c < 3; ++c) extent = std::max(extent, before.hi[c] - before.lo[c]);
  // 1/256 of the extent: a power of two, so the room itself is exact
  const double room = std::ldexp(extent, -8);
  AxisBounds grown;
  for (int c = 0; c < 3; ++c) grown.lo[c] = before.lo[c] - room, grown.hi[c] = before.hi[c] + room;
  return grown;
}

CurveBox step_frame(const AxisBounds& before, const AxisBounds& after) {
  const AxisBounds grown = with_room(before);
  bool inside = true;
  for (int c = 0; c < 3; ++c)
    inside = inside && std::isfinite(grown.lo[c]) && std::isfinite(grown.hi[c]) && after.lo[c] >= grown.lo[c] &&
             after.hi[c] <= grown.hi[c];
  return inside ? grown.cube() : after.cube();
}

std::vector<std::uint64_t> curve_keys(Span<const double> pos, const CurveBox& box, int threads) {
  std::vector<std::uint64_t> keys;
  curve_keys_into(pos, box, threads, keys);
  return keys;
}

std::uint64_t curve_key(double x, double y, double z, const CurveBox& box) {
  constexpr double top = static_cast<double>((1u << kMortonBitsPerAxis) - 1);
  const double p[3] = {x, y, z};
  std::uint32_t q[3];
  for (int c = 0; c < 3; ++c) q[c] = static_cast<std::uint32_t>(std::clamp((p[c] - box.lo[c]) * box.scale, 0.0, top));
  return hilbert_from_morton(morton_key(q[0], q[1], q[2]));
}

void curve_keys_into(Span<const double> pos, const CurveBox& box, int threads, std::vector<std::uint64_t>& keys) {
  const auto n = static_cast<std::int64_t>(pos.size() / 3);
  keys.resize(static_cast<std::size_t>(n));
#pragma omp parallel for num_threads(threads) schedule(static) if (n >= kMinParallel)
  for (std::int64_t k = 0; k < n; ++k) keys[k] = curve_key(pos[3 * k], pos[3 * k + 1], pos[3 * k + 2], box);
}

void sort_by_key(std::vector<std::uint64_t>& keys, std::vector<std::int64_t>& values, int threads,
                 SortScratch* scratch) {
  if (values.size() != keys.size()) throw InputError("sort_by_key: keys and values have different lengths");
  if (keys.size() < kMinRadix) {
    comparison_sort(keys, values);
  } else if (scratch != nullptr) {
    radix_sort(keys, values, threads, *scratch);
  } else {
    SortScratch mine;
    radix_sort(keys, values, threads, mine);
  }
#if GRAVPIPE_DEBUG_CHECKS
  const auto out_of_order = std::is_sorted_until(keys.begin(), keys.end());
  GRAVPIPE_DEBUG_ASSERT(out_of_order == keys.end(),
                        "key " + std::to_string(out_of_order - keys.begin()) + " of " + std::to_string(keys.size()) +
                            " is below the one before it after the sort");
#endif
}

std::vector<std::int64_t> sort_keys(std::vector<std::uint64_t>& keys, int threads) {
  std::vector<std::int64_t> order;
  sort_keys_into(keys, order, threads);
  return order;
}

void sort_keys_into(std::vector<std::uint64_t>& keys, std::vector<std::int64_t>& order, int threads,
                    SortScratch* scratch) {
  order.resize(keys.size());
  std::iota(order.begin(), order.end(), std::int64_t{0});
  sort_by_key(keys, order, threads, scratch);
#if GRAVPIPE_DEBUG_CHECKS
  // stable: equal keys keep their input order, so the order is the same for any thread count
  for (std::size_t k = 1; k < keys.size(); ++k)
    GRAVPIPE_DEBUG_ASSERT(keys[k - 1] != keys[k] || order[k - 1] < order[k],
                          "equal keys at " + std::to_string(k - 1) + " and " + std::to_string(k) +
                              " hold input positions " + std::to_string(order[k - 1]) + " and " +
                              std::to_string(order[k]) + ": the sort was not stable");
#endif
}

std::vector<std::int64_t> curve_order(Span<const double> pos, int threads) {
  std::vector<std::uint64_t> keys = curve_keys(pos, bounding_cube(pos, threads), threads);
  return sort_keys(keys, threads);
}

}  // namespace gravpipe
