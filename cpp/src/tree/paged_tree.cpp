// The out-of-core tree (paged_tree.hpp): the cells counted from the sorted keys in the store's
// pages, then built with their moments into paged cell records, subtrees on several threads
// (paged_tree_build.hpp), or taken from the build that rode on the sort
// (streamed_tree_build.hpp); and the evaluation through PagedParticles and PagedCellReader
// with results to the store's pages. Its TreeStats: seconds_build is the count (which checks
// the keys' order), seconds_moments the build of the records (for cells built in the sort:
// 0, and the widening of their cache).
#include "gravpipe/paged_tree.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <memory>

#include "cell_moments.hpp"
#include "gravpipe/error.hpp"
#include "gravpipe/paged_particles.hpp"
#include "gravpipe/stopwatch.hpp"
#include "paged_tree_build.hpp"
#include "store_results.hpp"
#include "tree_runs.hpp"
#include "walk_prefetch.hpp"

namespace gravpipe {

namespace {

/// Runs the walk's prefetch plans ahead of each compute thread, by default (scratch on a device).
constexpr int kPrefetchRuns = 4;
/// Particles of a subtree the build gives one thread at most: ~32 subtrees a thread, so that
/// the threads' ends balance, for a Plummer sphere's dense core too.
std::int64_t task_particles(std::int64_t n, int threads, int n_leaf) {
  return std::max<std::int64_t>(n / (32 * std::max(threads, 1)), 4 * n_leaf);
}

}  // namespace

std::uint64_t PagedTree::least_bytes(std::int64_t cells, std::int64_t groups, std::size_t page_bytes, int threads) {
  const auto pages = static_cast<std::uint64_t>(PagedCells::pages_for(cells, page_bytes));
  return static_cast<std::uint64_t>(PagedCells::least_frames(threads)) * page_bytes + pages * PageCache::kTableBytesPerPage +
         PagedCells::reader_table_bytes(static_cast<std::int64_t>(pages), threads) + static_cast<std::uint64_t>(groups) * sizeof(Group);
}

std::uint64_t PagedTree::cell_cache_bytes() const {
  return static_cast<std::uint64_t>(cells_->frames()) * store_.page_bytes();
}

PagedTree::PagedTree(ParticleStore& store, const TreeParams& params, std::uint64_t keep_free, Unbuilt)
    : store_(store),
      params_(params),
      threads_(params.threads > 0 ? params.threads : omp_get_max_threads()),
      isa_(resolve_isa(params.isa)),
      prefetch_runs_(store.file().in_memory() ? 0 : kPrefetchRuns),
      keep_free_(keep_free) {
  check_tree_params(params_);
  refuse_tree_cuda(params_, "the out-of-core tree (memory_budget/scratch)");
  if (params_.alpha > 0)
    throw InputError("out-of-core tree: alpha > 0 (the relative opening criterion) needs the old accelerations, "
                     "which the out-of-core tree does not keep; use alpha = 0");
}

PagedTree::PagedTree(ParticleStore& store, const TreeParams& params, std::uint64_t keep_free)
    : PagedTree(store, params, keep_free, Unbuilt{}) {
  auto t0 = Clock::now();
  const PagedTreeShape shape =
      count_paged_tree(store_, params_.n_leaf, params_.n_crit, task_particles(store_.size(), threads_, params_.n_leaf));
  make_cell_table(shape.cells, shape.groups);
  stats_.seconds_build = seconds_since(t0);
  t0 = Clock::now();
  build_paged_tree(store_, shape, *cells_, params_, threads_, groups_);
  stats_.seconds_moments = seconds_since(t0);
  stats_.n_j = static_cast<std::uint64_t>(store_.size());
  stats_.nodes = static_cast<std::uint64_t>(cells_->count());
  stats_.leaves = static_cast<std::uint64_t>(shape.leaves);
}

PagedTree::PagedTree(ParticleStore& store, const TreeParams& params, std::uint64_t keep_free, BuiltCells built)
    : PagedTree(store, params, keep_free, Unbuilt{}) {
  if (!built.cells) throw std::logic_error("out-of-core tree: built cells without a table");
  const auto t0 = Clock::now();
  cells_ = std::move(built.cells);
  groups_ = std::move(built.groups);
  groups_charge_ = std::move(built.groups_charge);
  const std::size_t page = store_.page_bytes();
  const std::int64_t pages = PagedCells::pages_for(cells_->count(), page);
  cells_->set_frames(cell_frames(pages, static_cast<std::uint64_t>(cells_->frames()) * page, 0));
  stats_.seconds_moments = seconds_since(t0);  // the build rode on the sort: this is the cache's widening
  stats_.n_j = static_cast<std::uint64_t>(store_.size());
  stats_.nodes = static_cast<std::uint64_t>(cells_->count());
  stats_.leaves = static_cast<std::uint64_t>(built.leaves);
}

std::int64_t PagedTree::cell_frames(std::int64_t pages, std::uint64_t charged, std::uint64_t tables) const {
  const std::size_t page = store_.page_bytes();
  const MemoryBudget& b = store_.budget();
  // the readers charge their page tables when the build and the walk make them
  const std::uint64_t taken =
      b.used() - charged + keep_free_ + tables + PagedCells::reader_table_bytes(pages, threads_);
  const std::int64_t fit = taken < b.total() ? static_cast<std::int64_t>((b.total() - taken) / page) : 0;
  return std::max(PagedCells::least_frames(threads_), std::min(fit, pages));
}

void PagedTree::make_cell_table(std::int64_t cells, std::int64_t groups) {
  if (cells > INT32_MAX)
    throw InputError("out-of-core tree: " + std::to_string(cells) + " cells exceed the 32-bit cell index");
  groups_charge_ = store_.budget().reserve(static_cast<std::uint64_t>(groups) * sizeof(Group),
                                           "the tree's " + std::to_string(groups) + " groups");
  // the cell cache: what the budget has left, less keep_free and the page tables; the cache
  // charges it (BudgetError naming the least budget when even the fewest frames do not fit)
  const std::size_t page = store_.page_bytes();
  const std::int64_t pages = PagedCells::pages_for(cells, page);
  const std::int64_t frames = cell_frames(pages, 0, static_cast<std::uint64_t>(pages) * 5);
  cells_ = std::make_unique<PagedCells>(store_.scratch_shelf(), page, store_.file().mode(), store_.eviction(), cells,
                                        frames, threads_, store_.budget());
}

std::uint64_t PagedTree::copy_allowance(std::int64_t n_crit, std::int64_t n_leaf) {
  const std::int64_t held = std::max({kRunParticles, n_crit, n_leaf}) + kSourcePiece;
  return static_cast<std::uint64_t>(held) * 4 * sizeof(double);
}

std::uint64_t PagedTree::shrink_cell_cache(std::uint64_t bytes) {
  const auto page = static_cast<std::uint64_t>(store_.page_bytes());
  const std::int64_t want = static_cast<std::int64_t>((bytes + page - 1) / page);
  const std::int64_t frames = std::max(PagedCells::least_frames(threads_), cells_->frames() - want);
  const std::int64_t given = cells_->frames() - frames;
  if (given > 0) cells_->set_frames(frames);
  return static_cast<std::uint64_t>(std::max<std::int64_t>(given, 0)) * page;
}

void PagedTree::set_prefetch_runs(int runs) {
  if (runs < 0) throw InputError("out-of-core tree: prefetch_runs must be >= 0, got " + std::to_string(runs));
  prefetch_runs_ = runs;
}

void PagedTree::self_forces(const std::string& acc_field, const std::string& pot_field,
                            const RunResultsHook& hook) {
  const auto t_start = Clock::now();
  // no column read-ahead: the walk's leaves jump about the curve; the prefetch loads the
  // pages of each thread's next runs instead
  const PagedParticles particles(store_, "pos", "mass", threads_, false);
  StoreResults results(store_, threads_, acc_field, pot_field, hook);
  std::unique_ptr<WalkPrefetch> prefetch;
  // a cache that holds every page the walk touches (x, y, z, m read; acc and pot written;
  // a hook's velocities) keeps what the moments just read: the prefetch's footprint walks
  // would only take CPU from the compute threads (6% of it at N = 1e7)
  const auto pages_of = [this](const std::string& f) {
    return (store_.size() + store_.particles_per_page(f) - 1) / store_.particles_per_page(f);
  };
  const std::int64_t touched = pages_of("pos") * (store_.page_of("pos", 0, 0) == store_.page_of("mass", 0, 0) ? 1 : 4) +
                               7 * pages_of("acc");
  const bool all_cached = store_.frames() >= touched + threads_ + 2;
  if (prefetch_runs_ > 0 && !all_cached) {
    prefetch = std::make_unique<WalkPrefetch>(store_, *cells_, groups_,
                                              MacParams{params_.G, params_.alpha, params_.quadrupole}, threads_,
                                              prefetch_runs_);
    results.report_runs_to(*prefetch);
  }
  // every i-particle excludes itself (exclude_self): no array of N indices
  // the threads walk the runs side by side: the cache holds one neighbourhood of pages
  const GroupEvaluation<PagedParticles, PagedParticles, StoreResults, PagedCells> e{
      *cells_, params_, isa_, particles, particles, {}, results, true, nullptr, true};
  const GroupWork work = evaluate_groups(e, groups_, threads_);
  copy_peak_bytes_ = particles.peak_bytes_held();
  const double wall = seconds_since(t_start);
  const double busy = work.seconds_walk + work.seconds_evaluate, scale = busy > 0 ? wall / busy : 0.0;
  stats_.n_i = static_cast<std::uint64_t>(store_.size());
  stats_.groups = groups_.size();
  stats_.pp_interactions = work.pp;
  stats_.pc_interactions = work.pc;
  stats_.pc_local_interactions = work.pc_local;
  stats_.mac_tests = work.mac_tests;
  stats_.seconds_walk = work.seconds_walk * scale;
  stats_.seconds_evaluate = work.seconds_evaluate * scale;
  stats_.seconds_forces = wall;
}

}  // namespace gravpipe
