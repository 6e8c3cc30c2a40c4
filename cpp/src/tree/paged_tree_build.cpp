// The out-of-core tree's build (paged_tree_build.hpp).
//
// Every cell's record goes to its breadth-first index: where its level begins plus the cells
// of that level met before it in curve order (within a level, breadth-first order is curve
// order). One depth-first pass finds those indices by reserving each cell's children block
// when the cell is reached. Here the pass is cut in two: the calling thread walks the cells
// above the tasks, reserving for each task, when it reaches the task's root, the blocks of
// its whole subtree at every level (counted beforehand), which is when the one pass would
// have reserved them; each task then fills its blocks on its own thread. The moments of the
// cells above the tasks come last, from their children's, with the in-core arithmetic.
#include "paged_tree_build.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "cell_moments.hpp"
#include "gravpipe/debug_checks.hpp"
#include "gravpipe/error.hpp"
#include "gravpipe/page_divider.hpp"
#include "gravpipe/paged_particles.hpp"
#include "octree_split.hpp"

namespace gravpipe {

namespace {

/// Slots of a key reader: one, so that with the store's fewest frames (threads + 2, + 1 for
/// read-ahead) the leaves' particle blocks still find a frame beside each thread's.
constexpr std::size_t kKeySlots = 1;
/// Key pages hinted ahead of the one a key reader is on.
constexpr std::int64_t kKeyPagesAhead = 8;
/// Leaves between releases of a thread's particle blocks.
constexpr int kLeavesPerRelease = 256;

/// The store's sorted keys as the build's binary searches read them, from pinned pages. One
/// per thread.
class PagedKeys {
 public:
  /// The store, once its keys' pages are known to hold every key.
  static ParticleStore& checked_keys(ParticleStore& s) {
    if (s.stale("key"))
      throw InputError("out-of-core tree: the store's last sort left its keys out (write_keys = false): write them "
                       "to the pages first (gravpipe.store.ParticleStore.materialize('key'))");
    return s;
  }

  explicit PagedKeys(ParticleStore& s)
      : store_(checked_keys(s)),
        slots_(s.cache(), kKeySlots, PageCache::Access::Read),
        base_(s.page_of("key", 0, 0)),
        per_page_(s.particles_per_page("key")),
        page_of_(per_page_),
        last_page_(base_ + (s.size() - 1) / std::max<std::int64_t>(per_page_, 1)) {}
  std::uint64_t operator()(std::int64_t i) const {
    const std::int64_t page = base_ + page_of_(i);
    const std::int64_t at = i - (page - base_) * per_page_;
    // (at the column's end the window stops growing: no call a key there)
    if (page < from_ || std::min(page + kKeyPagesAhead / 2, last_page_) > hinted_) hint_from(page);
    std::uint64_t k;
    std::memcpy(&k, slots_.data(page) + static_cast<std::size_t>(at) * sizeof k, sizeof k);
    return k;
  }

 private:
  /// The keys are read in curve order (a subtree's searches, then its leaves): the pages up to
  /// kKeyPagesAhead after `page` go to the read-ahead thread before they are wanted. A jump
  /// outside the hinted window (a search's far probe, the next task) starts a new one.
  void hint_from(std::int64_t page) const {
    const bool inside = page >= from_ && page <= hinted_;
    const std::int64_t end = std::min(page + kKeyPagesAhead, last_page_);
    std::array<std::int64_t, kKeyPagesAhead> next{};
    std::size_t n = 0;
    for (std::int64_t p = (inside ? hinted_ : page) + 1; p <= end; ++p) next[n++] = p;
    if (n > 0) store_.hint(Span<const std::int64_t>(next.data(), n));
    if (!inside) from_ = page;
    hinted_ = inside ? std::max(hinted_, end) : std::max(end, page);
  }

  ParticleStore& store_;
  mutable PinnedSlots slots_;
  std::int64_t base_, per_page_;
  PageDivider page_of_;
  std::int64_t last_page_;
  mutable std::int64_t from_ = 0, hinted_ = -1;  // the window of pages hinted
};

using Range = std::pair<std::int64_t, std::int64_t>;

/// The children of the split cell [b, e) at `level`, in curve order; returns how many.
int children_of(const PagedKeys& key, std::int64_t b, std::int64_t e, int level, std::array<Range, 8>& kids) {
  int n = 0;
  for_each_child(key, b, e, level, [&](std::int64_t lo, std::int64_t hi) { kids[static_cast<std::size_t>(n++)] = {lo, hi}; });
  return n;
}

/// One subtree in one depth-first pass over its particles: each cell's moments from its
/// particles (a leaf) or its children's (post-order), its record written at its breadth-first
/// index from `next` (per level: the index of the next cell of that level in this subtree),
/// its group cells to `groups` one after the other (disjoint, met in curve order).
class SubtreeBuild {
 public:
  SubtreeBuild(const PagedKeys& key, const PagedParticles& particles, PagedCellReader& out,
               std::vector<std::int64_t> next, const TreeParams& params, Group* groups)
      : key_(key), particles_(particles), out_(out), params_(params), next_(std::move(next)), groups_(groups) {}

  CellMoments visit(std::int64_t b, std::int64_t e, int level, std::int64_t index, bool in_group) {
    const bool split = splits(b, e, level, params_.n_leaf);
    const bool group = !in_group && is_group_cell(e - b, split, params_.n_crit);
    CellMoments m;
    std::int32_t first_child = -1;
    int n_children = 0;
    if (!split) {
      const ParticleBlock leaf = particles_.block(b, e);
      m = leaf_moments(leaf, b, e);
      particles_.done_with(leaf);
      if (++leaves_ % kLeavesPerRelease == 0) particles_.release_thread();
    } else {
      std::array<Range, 8> kids;
      n_children = children_of(key_, b, e, level, kids);
#if GRAVPIPE_DEBUG_CHECKS
      for (int q = 0; q < n_children; ++q)
        GRAVPIPE_DEBUG_ASSERT(kids[static_cast<std::size_t>(q)].first == (q == 0 ? b : kids[static_cast<std::size_t>(q - 1)].second) &&
                                  kids[static_cast<std::size_t>(q)].second > kids[static_cast<std::size_t>(q)].first,
                              "out-of-core cell [" + std::to_string(b) + ", " + std::to_string(e) + "): child " +
                                  std::to_string(q) + " does not follow its sibling");
      GRAVPIPE_DEBUG_ASSERT(n_children >= 1 && kids[static_cast<std::size_t>(n_children - 1)].second == e,
                            "out-of-core cell [" + std::to_string(b) + ", " + std::to_string(e) +
                                "): its children do not hold its particles");
#endif
      const auto child_level = static_cast<std::size_t>(level) + 1;
      const std::int64_t first = next_[child_level];
      next_[child_level] += n_children;
      first_child = static_cast<std::int32_t>(first);
      CellMoments km[8];
      for (int q = 0; q < n_children; ++q) {
        const Range& k = kids[static_cast<std::size_t>(q)];
        km[q] = visit(k.first, k.second, level + 1, first + q, in_group || group);
      }
      m = parent_moments(km, n_children);
    }
    out_.put(index, record_of(m, b, e, first_child, n_children, params_.theta, params_.quad_tol));
    if (group) *groups_++ = group_of(m, b, e);
    return m;
  }

 private:
  const PagedKeys& key_;
  const PagedParticles& particles_;
  PagedCellReader& out_;
  const TreeParams& params_;
  std::vector<std::int64_t> next_;
  Group* groups_;
  std::int64_t leaves_ = 0;
};

/// A cell above the tasks, or a task's root, as the calling thread places it.
struct TopCell {
  std::int64_t b, e, index;
  int level;
  int task = -1;  // a task's root: which
  bool split = false, group = false;
  std::int64_t group_slot = -1;
  std::int32_t first_child = -1;
  int n_children = 0;
  std::array<int, 8> kids{};  // their TopCell numbers
};

/// The cells above the tasks in pre-order, with the indices the one depth-first pass gives
/// them, and each task's starting index at every level and its first group slot.
class TopPlacement {
 public:
  TopPlacement(const PagedKeys& key, const PagedTreeShape& shape, const TreeParams& params)
      : key_(key), shape_(shape), params_(params), next_(shape.per_level.size(), 0),
        task_next(shape.tasks.size()), task_index(shape.tasks.size(), 0), task_group(shape.tasks.size(), 0),
        task_in_group(shape.tasks.size(), 0) {
    for (std::size_t l = 1; l < next_.size(); ++l) next_[l] = next_[l - 1] + shape.per_level[l - 1];
    next_[0] = 1;
    place(0, shape.n, 0, 0, false);
    // what the count found, the placement must have used up exactly
    std::int64_t end = 0;
    for (std::size_t l = 0; l < next_.size(); ++l)
      if (next_[l] != (end += shape.per_level[l]))
        throw std::logic_error("out-of-core tree build: level " + std::to_string(l) + " placed " +
                               std::to_string(next_[l]) + " cells, counted up to " + std::to_string(end));
    if (next_task_ != static_cast<int>(shape.tasks.size()) || group_cursor_ != shape.groups)
      throw std::logic_error("out-of-core tree build: the placement disagrees with the count");
  }

  std::vector<TopCell> cells;
  std::vector<std::vector<std::int64_t>> task_next;
  std::vector<std::int64_t> task_index, task_group;
  std::vector<char> task_in_group;

 private:
  int place(std::int64_t b, std::int64_t e, int level, std::int64_t index, bool in_group) {
    const int id = static_cast<int>(cells.size());
    cells.push_back(TopCell{b, e, index, level});
    if (e - b <= shape_.task_particles) {  // a task's root: reserve its whole subtree now
      const int t = next_task_++;
      const BuildTask& task = shape_.tasks[static_cast<std::size_t>(t)];
      if (task.b != b || task.e != e || task.level != level)
        throw std::logic_error("out-of-core tree build: task " + std::to_string(t) + " out of order");
      cells[static_cast<std::size_t>(id)].task = t;
      const auto ts = static_cast<std::size_t>(t);
      task_index[ts] = index;
      task_in_group[ts] = in_group;
      task_group[ts] = group_cursor_;
      group_cursor_ += task.groups;
      task_next[ts] = next_;
      for (std::size_t d = 0; d < task.below.size(); ++d) next_[static_cast<std::size_t>(level) + 1 + d] += task.below[d];
      return id;
    }
    const bool split = splits(b, e, level, params_.n_leaf);
    const bool group = !in_group && is_group_cell(e - b, split, params_.n_crit);
    cells[static_cast<std::size_t>(id)].split = split;
    cells[static_cast<std::size_t>(id)].group = group;
    if (group) cells[static_cast<std::size_t>(id)].group_slot = group_cursor_++;
    if (!split) return id;
    std::array<Range, 8> kids;
    const int n = children_of(key_, b, e, level, kids);
    const auto child_level = static_cast<std::size_t>(level) + 1;
    const std::int64_t first = next_[child_level];
    next_[child_level] += n;
    cells[static_cast<std::size_t>(id)].first_child = static_cast<std::int32_t>(first);
    cells[static_cast<std::size_t>(id)].n_children = n;
    for (int q = 0; q < n; ++q) {
      const Range& k = kids[static_cast<std::size_t>(q)];
      const int kid = place(k.first, k.second, level + 1, first + q, in_group || group);
      cells[static_cast<std::size_t>(id)].kids[static_cast<std::size_t>(q)] = kid;
    }
    return id;
  }

  const PagedKeys& key_;
  const PagedTreeShape& shape_;
  const TreeParams& params_;
  std::vector<std::int64_t> next_;
  int next_task_ = 0;
  std::int64_t group_cursor_ = 0;
};

}  // namespace

PagedTreeShape count_paged_tree(ParticleStore& store, int n_leaf, int n_crit, std::int64_t task_particles) {
  struct Open {
    std::int64_t b, e;
    int level;
    bool in_group;  // below a group cell
    int task;       // the task whose subtree holds it, or -1 above the tasks
  };
  const PagedKeys key(store);
  PagedTreeShape s;
  s.n = store.size();
  s.task_particles = std::max<std::int64_t>(task_particles, 1);
  std::vector<Open> stack{{0, s.n, 0, false, -1}};
  std::array<Range, 8> kids;
  std::uint64_t last = 0;  // the key before the next leaf's first
  while (!stack.empty()) {
    const Open o = stack.back();
    stack.pop_back();
    ++s.cells;
    if (o.level >= static_cast<int>(s.per_level.size())) s.per_level.resize(static_cast<std::size_t>(o.level) + 1, 0);
    ++s.per_level[static_cast<std::size_t>(o.level)];
    int task = o.task;
    if (task < 0 && o.e - o.b <= s.task_particles) {
      task = static_cast<int>(s.tasks.size());
      s.tasks.push_back(BuildTask{o.b, o.e, o.level, {}, 0});
    } else if (task >= 0) {
      std::vector<std::int64_t>& below = s.tasks[static_cast<std::size_t>(task)].below;
      const auto d = static_cast<std::size_t>(o.level - s.tasks[static_cast<std::size_t>(task)].level - 1);
      if (below.size() <= d) below.resize(d + 1, 0);
      ++below[d];
    }
    const bool split = splits(o.b, o.e, o.level, n_leaf);
    const bool group = !o.in_group && is_group_cell(o.e - o.b, split, n_crit);
    s.groups += group;
    if (group && task >= 0) ++s.tasks[static_cast<std::size_t>(task)].groups;
    if (!split) {
      ++s.leaves;
      // the leaves partition [0, n) in curve order: keys non-decreasing within each and from
      // each to the next are the whole sortedness check, on pages the searches just read
      for (std::int64_t i = o.b; i < o.e; ++i) {
        const std::uint64_t k = key(i);
        if (k < last) throw InputError("out-of-core tree: the store is not in curve order (its key " +
                                       std::to_string(i) + " is below key " + std::to_string(i - 1) +
                                       "; sort it first: sort_store_by_curve)");
        last = k;
      }
      continue;
    }
    // pushed in reverse, so that cells (and tasks) come off the stack in curve order
    const int n = children_of(key, o.b, o.e, o.level, kids);
    for (int q = n - 1; q >= 0; --q)
      stack.push_back({kids[static_cast<std::size_t>(q)].first, kids[static_cast<std::size_t>(q)].second, o.level + 1,
                       o.in_group || group, task});
  }
  return s;
}

void build_paged_tree(ParticleStore& store, const PagedTreeShape& shape, const PagedCells& cells,
                      const TreeParams& params, int threads, std::vector<Group>& groups) {
  groups.assign(static_cast<std::size_t>(shape.groups), Group{});
  threads = std::max(threads, 1);
  // each thread's key reader keeps its pin while it sums leaves: the particles' leases leave them
  const PagedParticles particles(store, "pos", "mass", threads, true, threads * static_cast<int>(kKeySlots));
  std::vector<TopCell> top;
  std::vector<std::vector<std::int64_t>> task_next;
  std::vector<std::int64_t> task_index, task_group;
  std::vector<char> task_in_group;
  {
    const PagedKeys key(store);
    TopPlacement placed(key, shape, params);
    top = std::move(placed.cells);
    task_next = std::move(placed.task_next), task_index = std::move(placed.task_index);
    task_group = std::move(placed.task_group), task_in_group = std::move(placed.task_in_group);
  }
  const auto n_tasks = static_cast<std::int64_t>(shape.tasks.size());
  std::vector<CellMoments> task_moments(shape.tasks.size());
  std::exception_ptr error;  // the first failure (a page that fails its checksum): rethrown here
  std::atomic<bool> failed{false};
#pragma omp parallel num_threads(threads)
  {
    // neither pins a page until asked for a key or a record, but each charges its table of
    // pages to the budget: a refusal is recorded as a task's failure is, since an exception
    // that leaves the parallel region ends the process
    std::optional<PagedKeys> key;
    std::optional<PagedCellReader> out;
    try {
      key.emplace(store);
      out.emplace(cells.reader(true));
    } catch (...) {
#pragma omp critical(gravpipe_build_error)
      if (!error) error = std::current_exception();
      failed = true;
    }
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t t = 0; t < n_tasks; ++t) {
      if (failed.load(std::memory_order_relaxed)) continue;
      try {
        const auto ts = static_cast<std::size_t>(t);
        const BuildTask& task = shape.tasks[ts];
        SubtreeBuild build(*key, particles, *out, task_next[ts], params, groups.data() + task_group[ts]);
        task_moments[ts] = build.visit(task.b, task.e, task.level, task_index[ts], task_in_group[ts] != 0);
      } catch (...) {
#pragma omp critical(gravpipe_build_error)
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
    particles.release_thread();
  }
  if (error) std::rethrow_exception(error);
  // the cells above the tasks, children before parents (the reverse of pre-order)
  PagedCellReader out = cells.reader(true);
  std::vector<CellMoments> moments(top.size());
  for (std::size_t id = top.size(); id-- > 0;) {
    const TopCell& c = top[id];
    if (c.task >= 0) {
      moments[id] = task_moments[static_cast<std::size_t>(c.task)];
      continue;  // its record is the task's
    }
    if (!c.split) {
      const ParticleBlock leaf = particles.block(c.b, c.e);
      moments[id] = leaf_moments(leaf, c.b, c.e);
      particles.done_with(leaf);
    } else {
      CellMoments km[8];
      for (int q = 0; q < c.n_children; ++q) km[q] = moments[static_cast<std::size_t>(c.kids[static_cast<std::size_t>(q)])];
      moments[id] = parent_moments(km, c.n_children);
    }
    out.put(c.index, record_of(moments[id], c.b, c.e, c.first_child, c.n_children, params.theta, params.quad_tol));
    if (c.group) groups[static_cast<std::size_t>(c.group_slot)] = group_of(moments[id], c.b, c.e);
  }
  particles.release_thread();
}

}  // namespace gravpipe
