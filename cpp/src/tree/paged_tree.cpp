// The out-of-core tree (paged_tree.hpp): the cells counted from the sorted keys in the store's
// pages, then built with their moments in one depth-first pass over the particles into paged
// cell records, and the evaluation through PagedParticles and PagedCellReader with results to
// the store's pages. Its TreeStats: seconds_build is the keys' check and count, seconds_moments
// the depth-first pass.
#include "gravpipe/paged_tree.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <memory>

#include "cell_moments.hpp"
#include "gravpipe/error.hpp"
#include "gravpipe/paged_particles.hpp"
#include "gravpipe/stopwatch.hpp"
#include "octree_split.hpp"
#include "store_results.hpp"
#include "tree_runs.hpp"
#include "walk_prefetch.hpp"

namespace gravpipe {

namespace {

/// Runs the walk's prefetch plans ahead of each compute thread, by default.
constexpr int kPrefetchRuns = 4;
/// Keys per block of the sortedness check.
constexpr std::int64_t kKeyBlock = 1 << 16;
/// Slots of the key reader of the build: one, so that with the store's fewest frames (threads
/// + 2, + 1 for read-ahead) the leaves' particle blocks still find a frame beside it.
constexpr std::size_t kKeySlots = 1;

/// The store's sorted keys as the build's binary searches read them, from pinned pages.
class PagedKeys {
 public:
  explicit PagedKeys(ParticleStore& s)
      : slots_(s.cache(), kKeySlots, PageCache::Access::Read),
        base_(s.page_of("key", 0, 0)),
        per_page_(s.particles_per_page("key")) {
    while ((std::int64_t{1} << shift_) < per_page_) ++shift_;
    if ((std::int64_t{1} << shift_) != per_page_) shift_ = -1;  // not a power of two: divide
  }
  std::uint64_t operator()(std::int64_t i) const {
    const std::int64_t page = shift_ >= 0 ? i >> shift_ : i / per_page_;
    const std::int64_t at = i - page * per_page_;
    std::uint64_t k;
    std::memcpy(&k, slots_.data(base_ + page) + static_cast<std::size_t>(at) * sizeof k, sizeof k);
    return k;
  }

 private:
  mutable PinnedSlots slots_;
  std::int64_t base_, per_page_;
  int shift_ = 0;
};

struct TreeCounts {
  std::int64_t cells = 0, leaves = 0, groups = 0;
  std::vector<std::int64_t> per_level;  // cells at each level
};

/// Count the cells (per level), leaves and groups of the octree over the keys, depth first:
/// the size of the table, and where each level begins in breadth-first order.
TreeCounts count_cells(const PagedKeys& key, std::int64_t n, int n_leaf, int n_crit) {
  struct Open {
    std::int64_t b, e;
    int level;
    bool in_group;  // below a group cell
  };
  TreeCounts c;
  std::vector<Open> stack{{0, n, 0, false}};
  while (!stack.empty()) {
    const Open o = stack.back();
    stack.pop_back();
    ++c.cells;
    if (o.level >= static_cast<int>(c.per_level.size())) c.per_level.resize(static_cast<std::size_t>(o.level) + 1, 0);
    ++c.per_level[static_cast<std::size_t>(o.level)];
    const bool split = splits(o.b, o.e, o.level, n_leaf);
    const bool group = !o.in_group && is_group_cell(o.e - o.b, split, n_crit);
    c.groups += group;
    if (!split) {
      ++c.leaves;
      continue;
    }
    for_each_child(key, o.b, o.e, o.level, [&](std::int64_t lo, std::int64_t hi) {
      stack.push_back({lo, hi, o.level + 1, o.in_group || group});
    });
  }
  return c;
}

/// The walk record of a cell from its moments and topology, as fill_walk_cells makes it.
PagedCellRecord record_of(const CellMoments& m, std::int64_t b, std::int64_t e, std::int32_t first_child,
                          int n_children, double theta, double quad_tol) {
  PagedCellRecord r;
  const double size = cell_size(m);
  r.walk = {m.cx, m.cy, m.cz, opening_radius2(m, size, theta),
            monopole_distance2(m.m, m.qxx, m.qxy, m.qxz, m.qyy, m.qyz, m.qzz, theta, quad_tol),
            b, e, first_child, n_children};
  r.m = m.m, r.qxx = m.qxx, r.qxy = m.qxy, r.qxz = m.qxz, r.qyy = m.qyy, r.qyz = m.qyz, r.qzz = m.qzz;
  r.qtr = m.qtr;
  return r;
}

/// Leaves between releases of the particle blocks of the depth-first pass.
constexpr int kLeavesPerRelease = 256;

/// The octree and its moments in one depth-first pass over the sorted particles: each cell's
/// moments from its particles (a leaf) or its children's (in post-order, with the arithmetic
/// of the in-core moments), its record written at its breadth-first index. Within a level,
/// breadth-first order is curve order, so a cell's index is where its level begins plus the
/// cells of that level met before it, and its children's block is reserved when it is
/// reached: each level's records are written as one sequential stream.
class DepthFirstBuild {
 public:
  DepthFirstBuild(const PagedKeys& key, const PagedParticles& particles, PagedCellReader& out,
                  const std::vector<std::int64_t>& per_level, const TreeParams& params, std::vector<Group>& groups)
      : key_(key), particles_(particles), out_(out), params_(params), groups_(groups) {
    next_.assign(per_level.size(), 0);
    for (std::size_t l = 1; l < per_level.size(); ++l) next_[l] = next_[l - 1] + per_level[l - 1];
  }
  /// The whole tree over particles [0, n): the root at index 0.
  void run(std::int64_t n) {
    next_[0] = 1;
    visit(0, n, 0, 0, false);
    particles_.release_thread();
  }

 private:
  CellMoments visit(std::int64_t b, std::int64_t e, int level, std::int64_t index, bool in_group) {
    const bool split = splits(b, e, level, params_.n_leaf);
    const bool group = !in_group && is_group_cell(e - b, split, params_.n_crit);
    CellMoments m;
    std::int32_t first_child = -1;
    int n_children = 0;
    if (!split) {
      m = leaf_moments(particles_.block(b, e), b, e);
      if (++leaves_ % kLeavesPerRelease == 0) particles_.release_thread();
    } else {
      std::pair<std::int64_t, std::int64_t> kids[8];
      for_each_child(key_, b, e, level, [&](std::int64_t lo, std::int64_t hi) { kids[n_children++] = {lo, hi}; });
      const auto child_level = static_cast<std::size_t>(level) + 1;
      const std::int64_t first = next_[child_level];
      next_[child_level] += n_children;
      first_child = static_cast<std::int32_t>(first);
      CellMoments km[8];
      for (int q = 0; q < n_children; ++q)
        km[q] = visit(kids[q].first, kids[q].second, level + 1, first + q, in_group || group);
      m = parent_moments(km, n_children);
    }
    out_.put(index, record_of(m, b, e, first_child, n_children, params_.theta, params_.quad_tol));
    if (group) {  // group cells are disjoint and met in curve order
      Group g;
      g.i_begin = g.ex_begin = b;
      g.i_end = g.ex_end = e;
      for (int a = 0; a < 3; ++a) g.lo[a] = m.lo[a], g.hi[a] = m.hi[a];
      groups_.push_back(g);
    }
    return m;
  }

  const PagedKeys& key_;
  const PagedParticles& particles_;
  PagedCellReader& out_;
  const TreeParams& params_;
  std::vector<Group>& groups_;
  std::vector<std::int64_t> next_;  // per level: the index of the next cell of that level
  std::int64_t leaves_ = 0;
};

}  // namespace

std::uint64_t PagedTree::least_bytes(std::int64_t cells, std::int64_t groups, std::size_t page_bytes, int threads) {
  const auto pages = static_cast<std::uint64_t>(PagedCells::pages_for(cells, page_bytes));
  return static_cast<std::uint64_t>(PagedCells::least_frames(threads)) * page_bytes + pages * 5 +
         static_cast<std::uint64_t>(groups) * sizeof(Group);
}

std::uint64_t PagedTree::cell_cache_bytes() const {
  return static_cast<std::uint64_t>(cells_->frames()) * store_.page_bytes();
}

PagedTree::PagedTree(ParticleStore& store, const TreeParams& params, std::uint64_t keep_free)
    : store_(store),
      params_(params),
      threads_(params.threads > 0 ? params.threads : omp_get_max_threads()),
      isa_(resolve_isa(params.isa)),
      prefetch_runs_(kPrefetchRuns),
      keep_free_(keep_free) {
  check_tree_params(params_);
  if (params_.alpha > 0)
    throw InputError("out-of-core tree: alpha > 0 (the relative opening criterion) needs the old accelerations, "
                     "which the out-of-core tree does not keep; use alpha = 0");
  auto t0 = Clock::now();
  check_sorted_keys();
  const PagedKeys key(store_);
  const TreeCounts counts = count_cells(key, store_.size(), params_.n_leaf, params_.n_crit);
  make_cell_table(counts.cells, counts.groups);
  stats_.seconds_build = seconds_since(t0);
  t0 = Clock::now();
  {
    // the key reader's pins stay while leaves are summed: the particles' leases leave them
    const PagedParticles particles(store_, "pos", "mass", threads_, true, static_cast<int>(kKeySlots));
    PagedCellReader out = cells_->reader(true);
    groups_.reserve(static_cast<std::size_t>(counts.groups));
    DepthFirstBuild(key, particles, out, counts.per_level, params_, groups_).run(store_.size());
  }
  if (static_cast<std::int64_t>(groups_.size()) != counts.groups)
    throw std::logic_error("out-of-core tree: " + std::to_string(groups_.size()) + " groups, counted " +
                           std::to_string(counts.groups));
  stats_.seconds_moments = seconds_since(t0);
  stats_.n_j = static_cast<std::uint64_t>(store_.size());
  stats_.nodes = static_cast<std::uint64_t>(cells_->count());
  stats_.leaves = static_cast<std::uint64_t>(counts.leaves);
}

void PagedTree::check_sorted_keys() {
  const std::int64_t n = store_.size();
  const std::int64_t block = std::min(n, kKeyBlock);
  const Reservation charge = store_.budget().reserve(static_cast<std::uint64_t>(block) * 8, "a block of curve keys");
  std::vector<std::uint64_t> keys(static_cast<std::size_t>(block));
  std::uint64_t last = 0;
  for (std::int64_t b = 0; b < n; b += block) {
    const std::int64_t m = std::min(block, n - b);
    store_.read_column("key", 0, b, m, keys.data());
    if ((b > 0 && keys[0] < last) || !std::is_sorted(keys.begin(), keys.begin() + m))
      throw InputError("out-of-core tree: the store is not in curve order (sort it first: sort_store_by_curve)");
    last = keys[static_cast<std::size_t>(m - 1)];
  }
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
  const MemoryBudget& b = store_.budget();
  const std::uint64_t tables = static_cast<std::uint64_t>(pages) * 5, taken = b.used() + keep_free_ + tables;
  const std::int64_t fit = taken < b.total() ? static_cast<std::int64_t>((b.total() - taken) / page) : 0;
  const std::int64_t frames = std::max(PagedCells::least_frames(threads_), std::min(fit, pages));
  const std::string directory = std::filesystem::path(store_.file().path()).parent_path().string();
  cells_ = std::make_unique<PagedCells>(directory, page, store_.file().mode(), store_.eviction(), cells, frames,
                                        threads_, store_.budget());
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
  const GroupEvaluation<PagedParticles, PagedParticles, StoreResults, PagedCells> e{
      *cells_, params_, isa_, particles, particles, {}, results, true};
  const GroupWork work = evaluate_groups(e, groups_, threads_);
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
