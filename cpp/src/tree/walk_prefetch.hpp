// The out-of-core walk's prefetch (paged_tree.cpp): once the tree is built, the pages a run of
// groups will read are known before it is evaluated: its own i-range and the particle ranges
// of the leaves its members open. A background thread walks the runs a few ahead of the
// compute threads (the footprint walk: the same MAC, only the opened leaves kept) and loads
// those pages (x, y, z, m) into the cache unpinned, so that the compute threads find them
// there instead of stalling on a synchronous read. The loads go kBatchPages pages at a time,
// their reads in flight together (BatchedPageIo: Linux AIO on the O_DIRECT file, for one
// wake of the thread a batch instead of one a page). Internal to src/tree.
//
// Only I/O moves: no particle value, list or sum depends on whether a page came in ahead or
// on demand, so results stay bitwise identical. Prefetched pages count as bytes read (and
// as "prefetched" / "prefetch_hits") in the store's counters like any other load. A load
// that fails here is left to the compute thread's own pin, which reports it (a corrupt
// page raises ChecksumError there, as without prefetch).
//
// The compute threads take the runs one at a time in curve order, side by side
// (GroupEvaluation::side_by_side), so the runs they are in are one stretch of the curve: the
// prefetcher keeps the next `depth` x threads runs past the furthest one started planned,
// woken when half of them are left (each wake of it preempts a compute thread on a machine
// with as many threads as cores: N = 1e7 at 1/10, 2 threads, its wakes 15.2k -> 12.4k a walk,
// the step's context switches 55k -> 49k, no change in its stalls). A run's plan lists only
// the pages that the last 2 x depth x threads plans did not (or did, but that have left the
// cache since): consecutive runs share most of their pages,
// and a subtree whose particles lie on pages planned already is gone through without its MAC
// tests (N = 1e7 at 1/10: the footprint walks' CPU down ~40%), only for its cell pages, which
// the compute threads' walks read: a range of cells a level, not each cell (N = 1e7: ~23k
// cells a run otherwise), and only when none of the last plans went through it.
// N = 1e7 at 1/10: this thread's CPU 2.0 -> 1.0 s a walk, the cell pages it loads the same. A
// run started past the planned window (the first, or a jump) restarts the window there.
// A run's pages are loaded only while the pages of every planned run not yet left behind
// fit in the cache's frames beside the transient pins:
// when they do not (a cache smaller than the threads' working sets), a prefetch could only
// evict pages about to be used, and the walk is left to its demand loads.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gravpipe/batched_page_io.hpp"
#include "gravpipe/memory_budget.hpp"
#include "gravpipe/page_divider.hpp"
#include "gravpipe/paged_cells.hpp"
#include "gravpipe/particle_store.hpp"
#include "gravpipe/tree.hpp"

namespace gravpipe {

class WalkPrefetch {
 public:
  /// `groups`: the evaluation's groups, runs made of them as evaluate_groups makes them; the
  /// leaves' particles come from the x, y, z of `pos` and from `mass`. `threads` compute
  /// threads walk them side by side; `depth` runs a thread are planned ahead. The run table is
  /// charged to the store's budget. Starts the thread.
  WalkPrefetch(ParticleStore& store, const PagedCells& cells, const std::vector<Group>& groups, const MacParams& mac,
               int threads, int depth, const std::string& pos = "pos", const std::string& mass = "mass");
  ~WalkPrefetch();  // stops the thread (loads in flight finish first)
  WalkPrefetch(const WalkPrefetch&) = delete;
  WalkPrefetch& operator=(const WalkPrefetch&) = delete;

  /// A compute thread starts the run whose first i-particle is `i_begin`.
  void started(std::int64_t i_begin);

  std::int64_t runs_planned() const;
  /// Planned runs whose pages were not loaded: they did not fit beside the others'.
  std::int64_t runs_skipped() const;
  /// Loads that threw (the compute thread's pin reports the error).
  std::int64_t failures() const;

 private:
  struct Cursor {
    std::int64_t at = -1;    // the furthest run a thread has started (-1: none yet)
    std::int64_t next = -1;  // the next run to plan
  };
  /// Local pages of every plan and of `more` together (their union).
  std::size_t planned_pages(const std::vector<std::int64_t>& more) const;
  void serve();
  /// The recent plans, as the footprints that follow build on them.
  struct Window {
    std::int64_t last = -2;                       // the run planned last (-2: none)
    std::deque<std::vector<std::int64_t>> plans;  // pages each recent plan added, oldest first
    std::vector<std::uint8_t> marked;             // per local page: in one of them
    /// The quiet subtrees each recent plan went through (their cell pages were loaded then),
    /// and in how many plans each one is: a later run skips them whole.
    std::deque<std::vector<std::int32_t>> quiet_roots;
    std::unordered_map<std::int32_t, std::uint32_t> quiet_seen;
    void push(const std::vector<std::int64_t>& pages, const std::vector<std::int32_t>& roots);
    /// Unflag one plan's pages and quiet subtrees (it leaves the window).
    void release(const std::vector<std::int64_t>& pages, const std::vector<std::int32_t>& roots);
    void forget(std::size_t keep);  // drop all but the newest `keep` plans
    /// Unflag the pages of the recent plans that `resident(page)` says have left the cache
    /// since, so that the next footprint plans them again.
    template <class Resident>
    void unmark_evicted(Resident&& resident) {
      for (const auto& plan : plans)
        for (const std::int64_t p : plan)
          if (marked[static_cast<std::size_t>(p)] && !resident(p)) marked[static_cast<std::size_t>(p)] = 0;
    }
    void drop_newest();             // its pages were not loaded after all
    void clear();
  };
  /// The footprint walk's scratch: the cells of the tree level it is at and of the next that
  /// it tests, the quiet ranges of those levels (cells of subtrees that add no particle page,
  /// gone through for their cell pages alone: within a level cells are in curve order, so a
  /// subtree's cells there are one range), their cell pages, and the reads that load those
  /// pages a level at a time.
  struct FootprintScratch {
    std::vector<std::int32_t> level, next;
    std::vector<std::pair<std::int32_t, std::int32_t>> quiet, quiet_next;  // [first, last] cells
    std::vector<std::int32_t> quiet_roots;  // the run's new quiet subtrees
    std::vector<std::int64_t> cell_pages;
    BatchedPageIo* cell_reads;  // not owned: on the cells' file, the prefetch thread's
  };
  /// The local pages (page index within a column) run r reads, its sinks and the leaves its
  /// members open, less those that the window's marked flags (planned already); flags what
  /// it adds. The quiet subtrees it goes through, less the window's, go to w.quiet_roots.
  void footprint(std::int64_t r, const PagedCellReader& cells, std::vector<std::int64_t>& pages,
                 FootprintScratch& w, Window& window) const;
  /// Load the cell pages of the footprint's current level (w.level, w.quiet) in one batch.
  void load_level(const PagedCellReader& cells, FootprintScratch& w) const;
  /// The children of the quiet cells [lo, hi] (one level): one range, appended to `out`.
  static void quiet_children(const PagedCellReader& cells, std::int32_t lo, std::int32_t hi,
                             std::vector<std::pair<std::int32_t, std::int32_t>>& out);
  /// Sort and join overlapping or adjacent ranges.
  static void merge_ranges(std::vector<std::pair<std::int32_t, std::int32_t>>& ranges);
  /// footprint() of run r, after the pages the last few runs planned: a run next to the last
  /// one planned shares most of its pages, and the subtrees on them are gone through without
  /// their MAC tests.
  void plan_next(std::int64_t r, const PagedCellReader& cells, std::vector<std::int64_t>& pages, FootprintScratch& w);

  ParticleStore& store_;
  const PagedCells& cells_;
  const std::vector<Group>& groups_;
  const MacParams mac_;
  const std::int64_t threads_;
  const std::int64_t depth_;  // runs planned past the furthest started: depth a thread x threads
  std::int64_t per_page_;
  PageDivider page_of_;  // the local page of a particle (two a cell in the footprint)
  std::vector<std::int64_t> bases_;  // the distinct first pages of the x, y, z, m columns
  Reservation table_charge_;
  std::vector<std::pair<std::size_t, std::size_t>> runs_;
  std::vector<std::int64_t> run_begin_;  // first i-particle of each run, ascending

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  Cursor cursor_;
  Window window_;                       // the prefetch thread's alone
  /// Runs planned and not yet left behind, and their local pages (as footprint() gives them).
  std::map<std::int64_t, std::vector<std::int64_t>> plans_;
  std::int64_t room_pages_;            // local pages (4 frames each) the plans may hold
  /// Local pages whose loads go to the file together (x 1..4 columns), and the requests
  /// in flight at once (BENCHMARKS.md, "Out-of-core treecode").
  static constexpr std::size_t kBatchPages = 8;
  static constexpr int kReadDepth = 16;
  BatchedPageIo reads_;             // the prefetch thread's alone
  bool stop_ = false;
  std::int64_t planned_ = 0, skipped_ = 0, failures_ = 0;
  std::thread thread_;  // last: starts after everything it uses exists
};

}  // namespace gravpipe
