// PagedTree (paged_tree.hpp): Tree's construction and self-gravity with the particles read
// from the store's pages; every numerical step is the code Tree runs.
#include "gravpipe/paged_tree.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "gravpipe/curve_order.hpp"
#include "gravpipe/error.hpp"
#include "gravpipe/stopwatch.hpp"
#include "tree_runs.hpp"

namespace gravpipe {

namespace {

/// Particles whose positions one pass reads at a time while the keys are computed.
constexpr std::int64_t kKeyChunk = 1 << 16;

/// Bytes of one cell in TreeNodes: its structure-of-arrays fields and its WalkCell.
constexpr std::uint64_t kCellBytes = 2 * sizeof(std::int64_t) + sizeof(std::int32_t) + 2 * sizeof(std::int8_t) +
                                     (4 + 6 + 2 + 7) * sizeof(double) + sizeof(WalkCell);

/// Positions [b, b + n) of the store as rows x, y, z (3n), the layout curve_keys reads.
void read_positions(ParticleStore& store, std::int64_t b, std::int64_t n, std::vector<double>& rows,
                    std::vector<double>& column) {
  rows.resize(static_cast<std::size_t>(3 * n));
  column.resize(static_cast<std::size_t>(n));
  for (int c = 0; c < 3; ++c) {
    store.read_component("pos", c, b, n, column.data());
    for (std::int64_t k = 0; k < n; ++k) rows[static_cast<std::size_t>(3 * k + c)] = column[static_cast<std::size_t>(k)];
  }
}

}  // namespace

PagedTree::PagedTree(ParticleStore& store, const TreeParams& params)
    : store_(store),
      params_(params),
      threads_(params.threads > 0 ? params.threads : omp_get_max_threads()),
      isa_(resolve_isa(params.isa)),
      particles_(store) {
  check_tree_params(params_);
  if (params_.alpha > 0)
    throw InputError("alpha: the relative opening criterion is not available out of core yet (use alpha = 0)");
  if (store_.size() < 1) throw InputError("PagedTree: the store holds no particles");

  auto t0 = Clock::now();
  std::vector<std::uint64_t> keys = sorted_keys(threads_);
  stats_.seconds_sort = seconds_since(t0);

  t0 = Clock::now();
  nodes_ = build_octree({keys.data(), keys.size()}, params_.n_leaf);
  groups_ = group_cells(nodes_, params_.n_crit);
  cells_charge_ = store_.budget().reserve(nodes_.count() * kCellBytes + groups_.size() * sizeof(std::int32_t),
                                          "the tree's " + std::to_string(nodes_.count()) + " cells");
  stats_.seconds_build = seconds_since(t0);

  t0 = Clock::now();
  compute_moments(nodes_, particles_, params_.theta, params_.quad_tol, threads_);
  particles_.release();  // the leaves' blocks were read once
  stats_.seconds_moments = seconds_since(t0);

  stats_.n_j = store_.size();
  stats_.nodes = nodes_.count();
  stats_.leaves = static_cast<std::uint64_t>(std::count(nodes_.first_child.begin(), nodes_.first_child.end(), -1));
}

/// The curve keys of the store's particles in the cube over their bounding box (as Tree's
/// bounding_cube + curve_keys), read in chunks: one pass for the box, one for the keys.
/// They must come out sorted: the store holds the particles in that curve order.
std::vector<std::uint64_t> PagedTree::sorted_keys(int threads) {
  const std::int64_t n = store_.size();
  // the keys (kept for the tree's life: self_forces reuses the bytes for its index array)
  // and one chunk of positions, rows and a column
  keys_charge_ = store_.budget().reserve(static_cast<std::uint64_t>(n) * sizeof(std::uint64_t) +
                                             static_cast<std::uint64_t>(4 * std::min(kKeyChunk, n)) * sizeof(double),
                                         "the curve keys of " + std::to_string(n) + " particles");
  std::vector<double> rows, column;
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (std::int64_t b = 0; b < n; b += kKeyChunk) {
    const std::int64_t m = std::min(kKeyChunk, n - b);
    read_positions(store_, b, m, rows, column);
    for (std::int64_t k = 0; k < m; ++k)
      for (int c = 0; c < 3; ++c) {
        lo[c] = std::min(lo[c], rows[static_cast<std::size_t>(3 * k + c)]);
        hi[c] = std::max(hi[c], rows[static_cast<std::size_t>(3 * k + c)]);
      }
  }
  const CurveBox box = curve_box(lo, hi);
  std::vector<std::uint64_t> keys;
  keys.reserve(static_cast<std::size_t>(n));
  for (std::int64_t b = 0; b < n; b += kKeyChunk) {
    const std::int64_t m = std::min(kKeyChunk, n - b);
    read_positions(store_, b, m, rows, column);
    const std::vector<std::uint64_t> chunk = curve_keys({rows.data(), rows.size()}, box, threads);
    keys.insert(keys.end(), chunk.begin(), chunk.end());
  }
  const auto unsorted = std::is_sorted_until(keys.begin(), keys.end());
  if (unsorted != keys.end())
    throw InputError("PagedTree: the store's particles are not in curve order (particle " +
                     std::to_string(unsorted - keys.begin()) +
                     " has a smaller key than the one before); write them with gravpipe.store.from_particles");
  return keys;
}

void PagedTree::self_forces(Span<double> acc, Span<double> pot) {
  const std::size_t n = size();
  if (acc.size() != 3 * n || pot.size() != n) throw InputError("self_forces: output sizes differ from the tree's");
  const auto t_start = Clock::now();
  const std::vector<Group> groups = cell_groups(nodes_, groups_, {});
  std::vector<std::int64_t> self(n);  // store order is curve order: i, its j index and its output row agree
  std::iota(self.begin(), self.end(), std::int64_t{0});
  const GroupEvaluation<PagedParticles, PagedParticles> e{nodes_, params_, isa_, particles_, particles_,
                                                          {self.data(), n}, {self.data(), n}, acc, pot};
  const GroupWork work = evaluate_groups(e, groups, threads_);
  particles_.release();
  record_group_work(stats_, work, seconds_since(t_start), n, groups.size());
  stats_.relative_criterion_used = false;
}

}  // namespace gravpipe
