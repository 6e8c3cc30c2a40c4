// The walk's prefetch thread (walk_prefetch.hpp).
#include "walk_prefetch.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <iterator>

#include "gravpipe/error.hpp"
#include "gravpipe/thread_name.hpp"
#include "tree_mac.hpp"
#include "tree_runs.hpp"

namespace gravpipe {

WalkPrefetch::WalkPrefetch(ParticleStore& store, const PagedCells& cells, const std::vector<Group>& groups,
                           const MacParams& mac, int threads, int depth, const std::string& pos,
                           const std::string& mass)
    : store_(store),
      cells_(cells),
      groups_(groups),
      mac_(mac),
      threads_(std::max(threads, 1)),
      depth_(std::max(depth, 1) * threads_),
      per_page_(store.particles_per_page(pos)),
      page_of_(per_page_),
      reads_(store.file(), kReadDepth) {
  for (int c = 0; c < 4; ++c) {
    const std::int64_t base = c < 3 ? store_.page_of(pos, c, 0) : store_.page_of(mass, 0, 0);
    if (std::find(bases_.begin(), bases_.end(), base) == bases_.end()) bases_.push_back(base);
  }
  // every frame but one per thread for transient pins (copied blocks, results), one for
  // the read-ahead thread and a spare, in sets of the pages that hold x, y, z, m
  room_pages_ = (store_.frames() - threads_ - 2) / static_cast<std::int64_t>(bases_.size());
  runs_ = make_runs(groups_);
  table_charge_ = store_.budget().reserve(runs_.size() * (sizeof(runs_[0]) + sizeof(std::int64_t)),
                                          "the walk prefetch's table of " + std::to_string(runs_.size()) + " runs");
  run_begin_.reserve(runs_.size());
  for (const auto& [first, last] : runs_) run_begin_.push_back(groups_[first].i_begin);
  if (!runs_.empty()) thread_ = std::thread([this] { serve(); });
}

WalkPrefetch::~WalkPrefetch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void WalkPrefetch::started(std::int64_t i_begin) {
  if (runs_.empty()) return;
  const auto it = std::upper_bound(run_begin_.begin(), run_begin_.end(), i_begin);
  const std::int64_t r = std::max<std::int64_t>(0, (it - run_begin_.begin()) - 1);
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Cursor& c = cursor_;
    if (r <= c.at) return;  // another thread started a later run first: the front is past it
    c.at = r;
    // a jump (the first run, or one past the window): plan from this run on; its pages not
    // yet pinned by the thread load here in parallel with the thread's own demand
    const bool jump = c.next < r || c.next > r + depth_;
    if (jump) c.next = r;
    // the prefetch thread is woken when half the window is left, to plan the other half in
    // one go, not once a run: on two cores each wake preempts a compute thread
    wake = jump || c.next - r <= depth_ / 2;
    // plans of runs the other threads may still be in are kept; those behind them, and
    // beyond the window after a jump, are done with
    for (auto p = plans_.begin(); p != plans_.end();)
      p = p->first < r - threads_ || p->first >= c.next ? plans_.erase(p) : std::next(p);
  }
  if (wake) wake_.notify_one();
}

std::int64_t WalkPrefetch::runs_planned() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return planned_;
}

std::int64_t WalkPrefetch::runs_skipped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return skipped_;
}

std::size_t WalkPrefetch::planned_pages(const std::vector<std::int64_t>& more) const {
  std::vector<std::int64_t> all(more);
  for (const auto& [run, planned] : plans_) all.insert(all.end(), planned.begin(), planned.end());
  std::sort(all.begin(), all.end());
  return static_cast<std::size_t>(std::unique(all.begin(), all.end()) - all.begin());
}

std::int64_t WalkPrefetch::failures() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failures_;
}

void WalkPrefetch::footprint(std::int64_t r, const PagedCellReader& cells, std::vector<std::int64_t>& pages,
                             FootprintScratch& w, Window& window) const {
  std::vector<std::uint8_t>& marked = window.marked;
  pages.clear();
  w.quiet_roots.clear();
  const auto [first, last] = runs_[static_cast<std::size_t>(r)];
  const Span<const Group> members(&groups_[first], last - first);
  const Group run = run_group(members);
  const auto add = [&](std::int64_t p) {
    if (!marked[static_cast<std::size_t>(p)]) marked[static_cast<std::size_t>(p)] = 1, pages.push_back(p);
  };
  for (std::int64_t p = page_of_(run.i_begin); p <= page_of_(run.i_end - 1); ++p) add(p);
  const Acceptor<PagedCellReader> run_acceptor(cells, run, mac_);
  std::vector<Acceptor<PagedCellReader>> member_acceptors;
  member_acceptors.reserve(members.size());
  for (const Group& g : members) member_acceptors.emplace_back(cells, g, mac_);
  // a cell matters when some member does not accept it: a leaf is then read, a cell opened.
  // Testing children against members that accepted their parent only adds pages (a
  // superset of what the members' walks read), never misses one. The walk goes a tree
  // level at a time, so that each level's cell pages load together (one wait, not one a
  // page: N = 1e7 at 1/10, this thread waited 2.2-3.0 s a walk on single cell pages). The
  // pages found do not depend on the order: a skipped subtree could add none.
  w.level.assign(1, 0);
  w.quiet.clear();
  while (!w.level.empty() || !w.quiet.empty()) {
    load_level(cells, w);
    w.next.clear(), w.quiet_next.clear();
    for (const auto& [lo, hi] : w.quiet) quiet_children(cells, lo, hi, w.quiet_next);
    for (const std::int32_t k : w.level) {
      double d2 = 0;
      const WalkCell c = cells.walk(k);
      // a cell whose particles lie on pages already planned can add none: its subtree is
      // not tested (the same pages, far fewer MAC tests: most of a run's opened cells are its
      // near neighbours, on its own few pages). Its cells are still gone through, a range a
      // level, so that their cell pages load with the level's: the compute threads walk
      // those cells (N = 1e7 at 1/10: ~64% of their cell misses were pages that no
      // footprint had visited, the quiet subtrees' ones).
      if (c.begin >= 0 && c.end > c.begin) {
        const std::int64_t a = page_of_(c.begin), b = page_of_(c.end - 1);
        if (b - a <= 1 && marked[static_cast<std::size_t>(a)] && marked[static_cast<std::size_t>(b)]) {
          // unless one of the thread's last plans went through it already, loading its cell
          // pages (consecutive runs share most of their near neighbours)
          if (c.first_child >= 0 && window.quiet_seen.count(k) == 0) {
            w.quiet_roots.push_back(k);
            w.quiet_next.emplace_back(c.first_child, c.first_child + c.n_children - 1);
          }
          continue;
        }
      }
      if (run_acceptor.accepts(k, c, d2)) continue;  // every member accepts what the run does
      bool all_accept = true;
      for (const Acceptor<PagedCellReader>& a : member_acceptors)
        if (!a.accepts(k, c, d2)) {
          all_accept = false;
          break;
        }
      if (all_accept) continue;
      if (c.first_child >= 0) {
        for (std::int32_t q = c.first_child; q < c.first_child + c.n_children; ++q) w.next.push_back(q);
      } else if (c.begin >= 0 && c.end > c.begin) {
        for (std::int64_t p = page_of_(c.begin); p <= page_of_(c.end - 1); ++p) add(p);
      }
    }
    merge_ranges(w.quiet_next);
    std::swap(w.level, w.next);
    std::swap(w.quiet, w.quiet_next);
  }
  std::sort(pages.begin(), pages.end());
  // nearest the run's own page first: the run reads its own and its neighbours' first
  const std::int64_t own = page_of_(run.i_begin);
  std::stable_sort(pages.begin(), pages.end(),
                   [own](std::int64_t a, std::int64_t b) { return std::abs(a - own) < std::abs(b - own); });
}

void WalkPrefetch::load_level(const PagedCellReader& cells, FootprintScratch& w) const {
  w.cell_pages.clear();
  for (const std::int32_t k : w.level) {
    const std::int64_t p = cells.page_of(k);
    if (w.cell_pages.empty() || w.cell_pages.back() != p) w.cell_pages.push_back(p);  // a level is in page order
  }
  for (const auto& [lo, hi] : w.quiet)
    for (std::int64_t p = cells.page_of(lo); p <= cells.page_of(hi); ++p) w.cell_pages.push_back(p);
  std::sort(w.cell_pages.begin(), w.cell_pages.end());
  w.cell_pages.erase(std::unique(w.cell_pages.begin(), w.cell_pages.end()), w.cell_pages.end());
  if (w.cell_pages.size() < 2) return;  // one page: the reader's own pin loads it as soon
  try {
    cells_.prefetch(Span<const std::int64_t>(w.cell_pages.data(), w.cell_pages.size()), *w.cell_reads);
  } catch (...) {  // a page not loaded here is read by the walk's own pin, which reports it
  }
}

void WalkPrefetch::quiet_children(const PagedCellReader& cells, std::int32_t lo, std::int32_t hi,
                                  std::vector<std::pair<std::int32_t, std::int32_t>>& out) {
  // children blocks follow their parents' order: those of [lo, hi] run from the first
  // child of its first inner cell to the last child of its last one
  std::int32_t first = lo, last = hi;
  while (first <= hi && cells.walk(first).first_child < 0) ++first;
  if (first > hi) return;  // leaves only
  while (cells.walk(last).first_child < 0) --last;
  const WalkCell a = cells.walk(first), b = cells.walk(last);
  out.emplace_back(a.first_child, b.first_child + b.n_children - 1);
}

void WalkPrefetch::merge_ranges(std::vector<std::pair<std::int32_t, std::int32_t>>& ranges) {
  if (ranges.size() < 2) return;
  std::sort(ranges.begin(), ranges.end());
  std::size_t kept = 0;
  for (std::size_t q = 1; q < ranges.size(); ++q) {
    if (ranges[q].first <= ranges[kept].second + 1)
      ranges[kept].second = std::max(ranges[kept].second, ranges[q].second);
    else
      ranges[++kept] = ranges[q];
  }
  ranges.resize(kept + 1);
}

void WalkPrefetch::Window::push(const std::vector<std::int64_t>& pages, const std::vector<std::int32_t>& roots) {
  plans.push_back(pages);
  quiet_roots.push_back(roots);
  for (const std::int32_t k : roots) ++quiet_seen[k];
}

void WalkPrefetch::Window::release(const std::vector<std::int64_t>& pages, const std::vector<std::int32_t>& roots) {
  for (const std::int64_t p : pages) marked[static_cast<std::size_t>(p)] = 0;
  for (const std::int32_t k : roots)
    if (--quiet_seen[k] == 0) quiet_seen.erase(k);
}

void WalkPrefetch::Window::forget(std::size_t keep) {
  for (; plans.size() > keep; plans.pop_front(), quiet_roots.pop_front()) release(plans.front(), quiet_roots.front());
}

void WalkPrefetch::Window::drop_newest() {
  if (plans.empty()) return;
  release(plans.back(), quiet_roots.back());
  plans.pop_back(), quiet_roots.pop_back();
}

void WalkPrefetch::Window::clear() {
  std::fill(marked.begin(), marked.end(), std::uint8_t{0});
  plans.clear(), quiet_roots.clear(), quiet_seen.clear();
  last = -2;
}

void WalkPrefetch::plan_next(std::int64_t r, const PagedCellReader& cells, std::vector<std::int64_t>& pages,
                             FootprintScratch& scratch) {
  Window& w = window_;
  if (w.marked.empty()) w.marked.assign(static_cast<std::size_t>((store_.size() + per_page_ - 1) / per_page_), 0);
  // the plans so far cover the runs up to depth_ ahead of the front: pages they added were
  // loaded then and stay in the cache about as long. A jump starts afresh.
  w.forget(r == w.last + 1 ? static_cast<std::size_t>(2 * depth_) : 0);
  // a page planned a few runs ago may have been evicted since (a small cache, two threads'
  // working sets): planned again, rather than left to the compute thread's demand read
  // (N = 1e7 at 1/10: ~2.5k such reads a walk, ~17% of the body pages the walk loaded)
  const PageCache& cache = store_.cache();
  const std::int64_t base = bases_.front();
  w.unmark_evicted([&cache, base](std::int64_t p) { return cache.resident(base + p); });
  w.last = r;
  try {
    footprint(r, cells, pages, scratch, w);
  } catch (...) {  // the footprint left flags of pages it had not listed yet
    w.clear();
    throw;
  }
  w.push(pages, scratch.quiet_roots);
}

void WalkPrefetch::serve() {
  name_this_thread("gp-prefetch");
  const PagedCellReader cells = cells_.reader();  // this thread's pins
  std::vector<std::int64_t> pages, batch;
  BatchedPageIo cell_reads(cells_.file(), kReadDepth);
  FootprintScratch scratch{{}, {}, {}, {}, {}, {}, &cell_reads};
  const auto nr = static_cast<std::int64_t>(runs_.size());
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (stop_) break;
    Cursor& c = cursor_;
    if (c.at < 0 || c.next >= nr || c.next - c.at >= depth_) {
      // nothing to plan: write back dirty frames next in line for eviction meanwhile (the
      // walk's results and the next sort's keys; the build's cell records), so that the
      // compute threads' evictions find clean frames instead of waiting for write-backs
      lock.unlock();
      const std::size_t cleaned = store_.cache().clean_cold() + cells_.clean_cold();
      lock.lock();
      if (cleaned == 0 && !stop_) wake_.wait(lock);
      continue;
    }
    const std::int64_t r = c.next++;
    ++planned_;
    lock.unlock();
    bool planned = true;
    try {
      plan_next(r, cells, pages, scratch);
    } catch (...) {  // a cell page that fails to load: the compute thread's own read reports it
      planned = false;
    }
    lock.lock();
    if (!planned) {
      ++failures_;
      continue;
    }
    // pages not loaded for this run are left for the next runs' plans to list again
    if (c.at > r) {  // the threads went past it meanwhile
      window_.drop_newest();
      continue;
    }
    const bool fits = static_cast<std::int64_t>(planned_pages(pages)) <= room_pages_;
    plans_[r] = pages;
    if (!fits) {
      window_.drop_newest();
      ++skipped_;
      continue;
    }
    // a batch of pages at a time, their reads in flight together; stop early when the threads
    // have gone past the run (stale) or the walk ends
    for (std::size_t q = 0; q < pages.size() && !stop_ && c.at <= r; q += kBatchPages) {
      lock.unlock();
      batch.clear();
      for (std::size_t k = q; k < std::min(pages.size(), q + kBatchPages); ++k)
        for (const std::int64_t base : bases_) batch.push_back(base + pages[k]);
      std::int64_t failed = 0;
      try {
        failed = store_.cache().prefetch_many(Span<const std::int64_t>(batch.data(), batch.size()), reads_);
      } catch (...) {  // reported again, with its message, by the compute thread's own pin
        failed = 1;
      }
      lock.lock();
      failures_ += failed;
    }
  }
}

}  // namespace gravpipe
