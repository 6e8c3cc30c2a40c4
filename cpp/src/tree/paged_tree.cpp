// The out-of-core tree (paged_tree.hpp): keys from the store, the in-core build, and moments
// and evaluation through PagedParticles with results to the store's pages.
#include "gravpipe/paged_tree.hpp"

#include <omp.h>

#include <algorithm>
#include <memory>
#include <numeric>

#include "gravpipe/error.hpp"
#include "gravpipe/paged_particles.hpp"
#include "gravpipe/stopwatch.hpp"
#include "store_results.hpp"
#include "tree_runs.hpp"
#include "walk_prefetch.hpp"

namespace gravpipe {

namespace {

/// Runs the walk's prefetch plans ahead of each compute thread, by default.
constexpr int kPrefetchRuns = 4;

/// Bytes of the topology build_octree makes per cell: begin, end, first_child, n_children, level.
constexpr std::uint64_t kTopologyBytes = 8 + 8 + 4 + 1 + 1;

}  // namespace

std::uint64_t PagedTree::bytes_per_cell() {
  // topology, 19 moment doubles, the walk's 64-byte copy
  return kTopologyBytes + 19 * sizeof(double) + sizeof(WalkCell);
}

std::uint64_t PagedTree::list_bytes(std::size_t nodes, int threads) {
  // per thread: two lists (shared, own), each a near and a far buffer of one int32 per cell
  return static_cast<std::uint64_t>(threads) * 2 * 2 * sizeof(std::int32_t) * nodes;
}

PagedTree::PagedTree(ParticleStore& store, const TreeParams& params)
    : store_(store),
      params_(params),
      threads_(params.threads > 0 ? params.threads : omp_get_max_threads()),
      isa_(resolve_isa(params.isa)),
      prefetch_runs_(kPrefetchRuns) {
  check_tree_params(params_);
  if (params_.alpha > 0)
    throw InputError("out-of-core tree: alpha > 0 (the relative opening criterion) needs the old accelerations, "
                     "which the out-of-core tree does not keep; use alpha = 0");
  const std::int64_t n = store_.size();
  auto t0 = Clock::now();
  {
    const Reservation keys_charge =
        store_.budget().reserve(static_cast<std::uint64_t>(n) * sizeof(std::uint64_t), "the sorted curve keys");
    std::vector<std::uint64_t> keys(static_cast<std::size_t>(n));
    store_.read_column("key", 0, 0, n, keys.data());
    if (!std::is_sorted(keys.begin(), keys.end()))
      throw InputError("out-of-core tree: the store is not in curve order (sort it first: sort_store_by_curve)");
    nodes_ = build_octree({keys.data(), keys.size()}, params_.n_leaf);
    groups_ = group_cells(nodes_, params_.n_crit);
    // charge the cells before the keys go: both live here
    cells_charge_ = store_.budget().reserve(bytes_per_cell() * nodes_.count(),
                                            "the tree's " + std::to_string(nodes_.count()) + " cells");
  }
  stats_.seconds_build = seconds_since(t0);

  t0 = Clock::now();
  const PagedParticles particles(store_, "pos", "mass", threads_);
  compute_moments(nodes_, particles, params_.theta, params_.quad_tol, threads_);
  stats_.seconds_moments = seconds_since(t0);
  stats_.n_j = static_cast<std::uint64_t>(n);
  stats_.nodes = nodes_.count();
  stats_.leaves = static_cast<std::uint64_t>(std::count(nodes_.first_child.begin(), nodes_.first_child.end(), -1));
}

void PagedTree::set_prefetch_runs(int runs) {
  if (runs < 0) throw InputError("out-of-core tree: prefetch_runs must be >= 0, got " + std::to_string(runs));
  prefetch_runs_ = runs;
}

void PagedTree::self_forces(const std::string& acc_field, const std::string& pot_field) {
  const auto t_start = Clock::now();
  const Reservation lists = store_.budget().reserve(list_bytes(nodes_.count(), threads_),
                                                    "the interaction lists of " + std::to_string(threads_) + " threads");
  const std::vector<Group> groups = cell_groups(nodes_, groups_, {});
  // no column read-ahead: the walk's leaves jump about the curve; the prefetch loads the
  // pages of each thread's next runs instead
  const PagedParticles particles(store_, "pos", "mass", threads_, false);
  StoreResults results(store_, threads_, acc_field, pot_field);
  std::unique_ptr<WalkPrefetch> prefetch;
  if (prefetch_runs_ > 0) {
    prefetch = std::make_unique<WalkPrefetch>(store_, nodes_, groups,
                                              MacParams{params_.G, params_.alpha, params_.quadrupole}, threads_,
                                              prefetch_runs_);
    results.report_runs_to(*prefetch);
  }
  // every i-particle excludes itself (exclude_self): no array of N indices
  const GroupEvaluation<PagedParticles, PagedParticles, StoreResults> e{
      nodes_, params_, isa_, particles, particles, {}, results, true};
  const GroupWork work = evaluate_groups(e, groups, threads_);
  const double wall = seconds_since(t_start);
  const double busy = work.seconds_walk + work.seconds_evaluate, scale = busy > 0 ? wall / busy : 0.0;
  stats_.n_i = static_cast<std::uint64_t>(store_.size());
  stats_.groups = groups.size();
  stats_.pp_interactions = work.pp;
  stats_.pc_interactions = work.pc;
  stats_.pc_local_interactions = work.pc_local;
  stats_.mac_tests = work.mac_tests;
  stats_.seconds_walk = work.seconds_walk * scale;
  stats_.seconds_evaluate = work.seconds_evaluate * scale;
  stats_.seconds_forces = wall;
}

}  // namespace gravpipe
