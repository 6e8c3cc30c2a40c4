// Space-filling-curve order, the one module for it: Peano-Hilbert keys of positions within
// a cube (hilbert.hpp), and a deterministic parallel sort of keys. The pipeline orders its
// j- and i-memories along the curve (compact tiles); the tree's cells, the out-of-core
// store's pages and the MPI domains are ranges of it. (The CUDA backend
// keys and sorts on the device with its own 30-bit keys: there the order decides only the
// tiling, never the results.)
//
// Typical use: curve_order(pos, threads). In pieces, for sets that must share one frame
// (an i-set sorted in the tree's frame; ranks that reduce their bounds first):
//   CurveBox box = curve_box(lo, hi);   // or bounding_cube(pos, threads)
//   std::vector<std::uint64_t> keys = curve_keys(pos, box, threads);
//   std::vector<std::int64_t> order = sort_keys(keys, threads);
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gravpipe/morton.hpp"
#include "gravpipe/span.hpp"

namespace gravpipe {

/// The cube that maps positions onto the grid of 2^kMortonBitsPerAxis (21) cells per axis.
struct CurveBox {
  double lo[3] = {0, 0, 0};  // lower corner
  double scale = 0;          // grid cells per length unit (0: every key is 0)
};

/// The cube with corner lo whose side is the largest extent of the box [lo, hi], scaled so
/// that hi falls inside the last cell.
CurveBox curve_box(const double lo[3], const double hi[3]);

/// Per-axis bounds of positions gathered in pieces (blocks of pages, runs of groups, threads):
/// min and max are exact, so any grouping and order gives the bits of one pass.
struct AxisBounds {
  double lo[3] = {INFINITY, INFINITY, INFINITY};
  double hi[3] = {-INFINITY, -INFINITY, -INFINITY};

  void add(const double* x) {
    for (int c = 0; c < 3; ++c) lo[c] = std::min(lo[c], x[c]), hi[c] = std::max(hi[c], x[c]);
  }
  void add(const AxisBounds& o) {
    for (int c = 0; c < 3; ++c) lo[c] = std::min(lo[c], o.lo[c]), hi[c] = std::max(hi[c], o.hi[c]);
  }
  CurveBox cube() const { return curve_box(lo, hi); }
};

/// Whether two frames give every position the same key: the same bits of corner and scale.
inline bool same_frame(const CurveBox& a, const CurveBox& b) {
  return std::memcmp(a.lo, b.lo, sizeof a.lo) == 0 && std::memcmp(&a.scale, &b.scale, sizeof a.scale) == 0;
}

/// curve_box of the per-axis bounds of positions (3n row-major); n = 0 gives scale 0.
CurveBox bounding_cube(Span<const double> pos, int threads);

/// The per-axis bounds of positions (3n row-major), exact (empty: lo inf, hi -inf).
AxisBounds axis_bounds(Span<const double> pos, int threads);

/// The frame of a time step's tree. A leapfrog step's new positions (bounds `after`) are its
/// old ones (bounds `before`) moved a little: while they stay inside the old bounds grown by
/// 1/256 of their largest extent on every side, the frame is that grown box's cube, which
/// the step knows before its last particle has moved (an out-of-core walk can key the next
/// step's positions as it drifts them); otherwise it is the new positions' own cube. The
/// in-core and the out-of-core leapfrog both key their steps so, and so build the same trees.
CurveBox step_frame(const AxisBounds& before, const AxisBounds& after);
/// The old bounds grown by 1/256 of their largest extent on every side: step_frame's box
/// while the new positions stay inside it.
AxisBounds with_room(const AxisBounds& before);

/// Hilbert key of the position (x, y, z) within `box` (clamped to its faces), as curve_keys
/// gives each: one function, so that a key made again from a position is the same bits.
std::uint64_t curve_key(double x, double y, double z, const CurveBox& box);
/// Hilbert key of each position (3n row-major) within `box`; positions outside it clamp to
/// its faces, so foreign points (forces at arbitrary positions) still get valid keys.
std::vector<std::uint64_t> curve_keys(Span<const double> pos, const CurveBox& box, int threads);
/// The same into `keys` (resized; its capacity reused: a rebuild faults no new pages in).
void curve_keys_into(Span<const double> pos, const CurveBox& box, int threads, std::vector<std::uint64_t>& keys);

/// The radix sort's second buffers, kept by a caller that sorts again and again (a tree
/// rebuilt every step), so that each sort reuses their pages instead of faulting new ones in.
struct SortScratch {
  std::vector<std::uint64_t> keys;
  std::vector<std::int64_t> values;
};

/// Sort keys ascending in place and carry values along. Equal keys keep their input order
/// (stable), so the result is the same for any thread count: a parallel LSD radix sort for
/// large sets, a serial comparison sort (same result) for small ones. `scratch` (optional):
/// the radix sort's buffers (otherwise allocated for this call).
void sort_by_key(std::vector<std::uint64_t>& keys, std::vector<std::int64_t>& values, int threads,
                 SortScratch* scratch = nullptr);

/// The permutation that sorts keys: order[k] is the input index of the k-th smallest, ties
/// in index order. Leaves keys sorted.
std::vector<std::int64_t> sort_keys(std::vector<std::uint64_t>& keys, int threads);
/// The same into `order` (resized, capacity reused), the radix buffers from `scratch`.
void sort_keys_into(std::vector<std::uint64_t>& keys, std::vector<std::int64_t>& order, int threads,
                    SortScratch* scratch = nullptr);

/// The curve order of positions (3n row-major) within their bounding cube.
std::vector<std::int64_t> curve_order(Span<const double> pos, int threads);

}  // namespace gravpipe
