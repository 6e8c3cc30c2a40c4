// The out-of-core tree (paged_tree.hpp): the octree built from the sorted keys in the store's
// pages into paged cell records, the moments swept level by level over those records, and the
// evaluation through PagedParticles and PagedCellReader with results to the store's pages.
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
/// Cells per chunk of a level in the moments (a thread releases its particle blocks after each).
constexpr std::int64_t kMomentChunk = 64;
/// Slots of the key reader of the build: the binary searches of one cell stay on few pages.
constexpr std::size_t kKeySlots = 4;

/// The store's sorted keys as the build's binary searches read them, from pinned pages.
class PagedKeys {
 public:
  explicit PagedKeys(ParticleStore& s)
      : slots_(s.cache(), kKeySlots, PageCache::Access::Read),
        base_(s.page_of("key", 0, 0)),
        per_page_(s.particles_per_page()) {
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
};

/// Count the cells, leaves and groups of the octree over the keys, depth first: the sizes of
/// the tables before they are written.
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
    const bool split = splits(o.b, o.e, o.level, n_leaf);
    // group_cells' rule: the highest cells with <= n_crit particles, or leaves
    const bool group = !o.in_group && (o.e - o.b <= n_crit || !split);
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

CellMoments moments_of(const PagedCellRecord& r, const CellBuildRecord& b) {
  CellMoments m;
  m.m = r.m, m.cx = r.walk.cx, m.cy = r.walk.cy, m.cz = r.walk.cz;
  for (int a = 0; a < 3; ++a) m.lo[a] = b.lo[a], m.hi[a] = b.hi[a];
  m.qxx = r.qxx, m.qxy = r.qxy, m.qxz = r.qxz, m.qyy = r.qyy, m.qyz = r.qyz, m.qzz = r.qzz, m.qtr = r.qtr;
  return m;
}

/// The walk record of a cell from its moments and topology, as fill_walk_cells makes it.
PagedCellRecord record_of(const CellMoments& m, const CellBuildRecord& b, double theta, double quad_tol) {
  PagedCellRecord r;
  const double size = cell_size(m);
  r.walk = {m.cx, m.cy, m.cz, opening_radius2(m, size, theta),
            monopole_distance2(m.m, m.qxx, m.qxy, m.qxz, m.qyy, m.qyz, m.qzz, theta, quad_tol),
            b.begin, b.end, b.first_child, b.n_children};
  r.m = m.m, r.qxx = m.qxx, r.qxy = m.qxy, r.qxz = m.qxz, r.qyy = m.qyy, r.qyz = m.qyz, r.qzz = m.qzz;
  r.qtr = m.qtr;
  return r;
}

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
  build_cells();
  stats_.seconds_build = seconds_since(t0);
  t0 = Clock::now();
  compute_paged_moments();
  make_groups();
  stats_.seconds_moments = seconds_since(t0);
  stats_.n_j = static_cast<std::uint64_t>(store_.size());
  stats_.nodes = static_cast<std::uint64_t>(cells_->count());
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

void PagedTree::build_cells() {
  const std::int64_t n = store_.size();
  const PagedKeys key(store_);
  const TreeCounts counts = count_cells(key, n, params_.n_leaf, params_.n_crit);
  if (counts.cells > INT32_MAX)
    throw InputError("out-of-core tree: " + std::to_string(counts.cells) + " cells exceed the 32-bit cell index");
  groups_counted_ = counts.groups;
  stats_.leaves = static_cast<std::uint64_t>(counts.leaves);
  groups_charge_ = store_.budget().reserve(static_cast<std::uint64_t>(counts.groups) * sizeof(Group),
                                           "the tree's " + std::to_string(counts.groups) + " groups");
  // the cell cache: what the budget has left, less keep_free and the page tables; the cache
  // charges it (BudgetError naming the least budget when even the fewest frames do not fit)
  const std::size_t page = store_.page_bytes();
  const std::int64_t pages = PagedCells::pages_for(counts.cells, page);
  const MemoryBudget& b = store_.budget();
  const std::uint64_t tables = static_cast<std::uint64_t>(pages) * 5, taken = b.used() + keep_free_ + tables;
  const std::int64_t fit = taken < b.total() ? static_cast<std::int64_t>((b.total() - taken) / page) : 0;
  const std::int64_t frames = std::max(PagedCells::least_frames(threads_), std::min(fit, pages));
  const std::string directory = std::filesystem::path(store_.file().path()).parent_path().string();
  cells_ = std::make_unique<PagedCells>(directory, page, store_.file().mode(), store_.eviction(),
                                        counts.cells, frames, threads_, store_.budget());
  // breadth first, the table itself the queue: cell c's children are appended when c is reached
  PagedCellReader w = cells_->reader(true);
  CellBuildRecord root;
  root.begin = 0, root.end = n;
  w.put_build(0, root);
  std::int64_t made = 1;
  level_begin_.assign(1, 0);
  for (std::int64_t c = 0; c < made; ++c) {
    CellBuildRecord r = w.build(c);
    if (!splits(r.begin, r.end, r.level, params_.n_leaf)) continue;
    r.first_child = static_cast<std::int32_t>(made);
    int kids = 0;
    for_each_child(key, r.begin, r.end, r.level, [&](std::int64_t lo, std::int64_t hi) {
      CellBuildRecord child;
      child.begin = lo, child.end = hi, child.level = static_cast<std::int8_t>(r.level + 1);
      if (child.level >= static_cast<int>(level_begin_.size())) level_begin_.push_back(made);
      w.put_build(made++, child);
      ++kids;
    });
    r.n_children = static_cast<std::int8_t>(kids);
    w.put_build(c, r);
  }
  level_begin_.push_back(made);
  if (made != counts.cells)
    throw std::logic_error("out-of-core tree: the build made " + std::to_string(made) + " cells, the count " +
                           std::to_string(counts.cells));
}

void PagedTree::compute_paged_moments() {
  const PagedParticles particles(store_, "pos", "mass", threads_);
  const double theta = params_.theta, quad_tol = params_.quad_tol;
  std::exception_ptr error;  // the first failure (a page that fails its checksum): rethrown here
#pragma omp parallel num_threads(threads_)
  {
    // children through read pins (their pages stay clean once written back), the cell's own
    // records through write pins
    const PagedCellReader r = cells_->reader(false, 2);
    PagedCellReader w = cells_->reader(true, 2);
    // levels deepest first: a cell's children are done before it
    for (std::size_t level = level_begin_.size() - 1; level-- > 0;) {
      const std::int64_t lo = level_begin_[level], hi = level_begin_[level + 1];
      const std::int64_t chunks = (hi - lo + kMomentChunk - 1) / kMomentChunk;
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t q = 0; q < chunks; ++q) {
        try {
          const std::int64_t c1 = std::min(hi, lo + (q + 1) * kMomentChunk);
          for (std::int64_t c = lo + q * kMomentChunk; c < c1; ++c) {
            CellBuildRecord b = w.build(c);
            CellMoments m;
            if (b.first_child < 0) {
              m = leaf_moments(particles.block(b.begin, b.end), b.begin, b.end);
            } else {
              CellMoments kids[8];
              for (int k = 0; k < b.n_children; ++k)
                kids[k] = moments_of(r.record(b.first_child + k), r.build(b.first_child + k));
              m = parent_moments(kids, b.n_children);
            }
            for (int a = 0; a < 3; ++a) b.lo[a] = m.lo[a], b.hi[a] = m.hi[a];
            w.put_build(c, b);
            w.put(c, record_of(m, b, theta, quad_tol));
          }
        } catch (...) {
#pragma omp critical(gravpipe_paged_moments_error)
          if (!error) error = std::current_exception();
        }
        particles.release_thread();
      }  // the implied barrier: the level is done before the next one starts
    }
  }
  if (error) std::rethrow_exception(error);
}

void PagedTree::make_groups() {
  PagedCellReader r = cells_->reader();
  const std::vector<std::int32_t> cells = group_cells(r, params_.n_crit);
  if (static_cast<std::int64_t>(cells.size()) != groups_counted_)
    throw std::logic_error("out-of-core tree: " + std::to_string(cells.size()) + " groups, counted " +
                           std::to_string(groups_counted_));
  groups_.resize(cells.size());
  for (std::size_t k = 0; k < cells.size(); ++k) {
    const CellBuildRecord b = r.build(cells[k]);
    Group& g = groups_[k];
    g.i_begin = g.ex_begin = b.begin;
    g.i_end = g.ex_end = b.end;
    for (int a = 0; a < 3; ++a) g.lo[a] = b.lo[a], g.hi[a] = b.hi[a];
  }
  r.release();
  cells_->drop_build_records();
}

void PagedTree::set_prefetch_runs(int runs) {
  if (runs < 0) throw InputError("out-of-core tree: prefetch_runs must be >= 0, got " + std::to_string(runs));
  prefetch_runs_ = runs;
}

void PagedTree::self_forces(const std::string& acc_field, const std::string& pot_field) {
  const auto t_start = Clock::now();
  // no column read-ahead: the walk's leaves jump about the curve; the prefetch loads the
  // pages of each thread's next runs instead
  const PagedParticles particles(store_, "pos", "mass", threads_, false);
  StoreResults results(store_, threads_, acc_field, pot_field);
  std::unique_ptr<WalkPrefetch> prefetch;
  if (prefetch_runs_ > 0) {
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
