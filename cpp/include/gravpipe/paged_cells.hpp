// The out-of-core tree's cells (paged_tree.hpp): fixed-size records in the pages of a scratch
// file of their own, served through a page cache whose frames are charged to the store's
// budget, so that the tree's cells (0.2-0.4 a particle, 128 bytes each) need not fit in
// memory (Salmon & Warren, seed 004, page cells and bodies alike).
//
// One record per cell, in breadth-first cell order (children contiguous, after their parent,
// each level in curve order, as in TreeNodes): the walk's WalkCell and the monopole and
// quadrupole that gathering and local expansions read (PagedCellRecord, 128 bytes). A page
// holds its records' two halves apart, the walk halves first and the moments after them, so
// that the walk reads 64-byte cells side by side as the in-core walk does (siblings share
// cache lines and the hardware's adjacent-line prefetch brings the next sibling, not the
// moments that only an accepted cell needs). The tree
// writes each record once, in a depth-first pass over the sorted particles (paged_tree.cpp).
// Each thread reads through its own PagedCellReader, which keeps a few pages pinned in
// direct-mapped slots: the top of the tree, which every walk visits, stays pinned, and a
// record costs a slot lookup and a copy, not a lock. Records are returned by value, so no
// reference outlives its pin. A walk reader's miss hints the next page to a read-ahead
// thread: each level's records lie in curve order, and the walk sweeps the curve.
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "gravpipe/memory_budget.hpp"
#include "gravpipe/page_cache.hpp"
#include "gravpipe/page_file.hpp"
#include "gravpipe/read_ahead.hpp"
#include "gravpipe/scratch_file_shelf.hpp"
#include "gravpipe/store_counters.hpp"
#include "gravpipe/tree.hpp"

namespace gravpipe {

/// The moments half of a cell's record: mass, traceless Q and trace part T.
struct PagedCellMoments {
  double m, qxx, qxy, qxz, qyy, qyz, qzz, qtr;
};
static_assert(sizeof(WalkCell) == 64 && sizeof(PagedCellMoments) == 64, "each half is one cache line");

/// One cell as the walk and the evaluation read it (its two halves lie apart in a page).
struct PagedCellRecord {
  WalkCell walk;             // com, opening radius, topology
  PagedCellMoments moments;
};

/// Pages pinned by one reader in eight-way sets of slots (page mod sets picks the set; its
/// least recently used way goes): a page stays pinned until another page takes its slot or
/// the reader goes. Sets, not direct-mapped slots: the walk's hot pages (the top of the tree
/// and a window of each level) collide in direct-mapped slots, and every collision is an
/// unpin and a pin under the cache's lock (N = 1e7 at 1/10, 128 slots, pins a compute thread
/// makes per walk: 1.7M direct-mapped, 45k eight-way; BENCHMARKS.md). A reader of several
/// slots finds a pinned page through a table of the file's pages (4 bytes a page, charged to
/// the cache's budget), not by scanning its set. Not thread-safe: one per thread.
class PinnedSlots {
 public:
  /// `slots`: a power of two (fewer than eight: one set of them all). `ahead` (optional, not
  /// owned): told the page after each one a refill had to load.
  PinnedSlots(PageCache& cache, std::size_t slots, PageCache::Access access, ReadAhead* ahead = nullptr);
  /// The bytes of `page`, pinned at least until the next call.
  unsigned char* data(std::int64_t page) {
    if (page == last_page_) return last_data_;  // most lookups: a sibling of the last record
    ++clock_;
    if (!where_.empty()) {  // (one slot: the last one was it)
      const std::int32_t at = where_[static_cast<std::size_t>(page)];
      if (at >= 0) return use(&slots_[static_cast<std::size_t>(at)]);
    }
    // a miss: the least recently used way of the page's set gives its frame up
    Slot* way = &slots_[(static_cast<std::size_t>(page) & set_mask_) * ways_];
    Slot* oldest = way;
    for (std::size_t w = 1; w < ways_; ++w)
      if (way[w].used < oldest->used) oldest = &way[w];
    refill(*oldest, page);
    return use(oldest);
  }
  void release();  // unpin every slot

 private:
  struct Slot {
    std::int64_t page = -1;
    unsigned char* data = nullptr;
    std::optional<PageHandle> handle;
    std::uint64_t used = 0;  // the reader's clock at its last use
  };
  void refill(Slot& s, std::int64_t page);
  unsigned char* use(Slot* s) {
    s->used = clock_;
    last_page_ = s->page, last_data_ = s->data;
    return s->data;
  }
  PageCache* cache_;  // not owned
  PageCache::Access access_;
  ReadAhead* ahead_;  // not owned; may be null
  std::vector<Slot> slots_;        // sets x ways, a set's ways side by side
  /// Per page of the cache's file, the slot that holds it, or -1: a lookup is one load, not a
  /// scan of the set's ways (N = 1e7 at 1/10: the walk's thread-seconds -0.65 a step, 7 of 8
  /// alternating rounds). Empty for a reader of one slot. Charged to the cache's budget.
  std::vector<std::int32_t> where_;
  Reservation where_charge_;
  std::size_t ways_, set_mask_;
  std::uint64_t clock_ = 0;  // counts lookups that missed the last slot: a way's age
  // the last lookup's page and bytes, held here rather than behind a pointer to its slot:
  // a hit is one compare, with no load that waits on another (-1: none)
  std::int64_t last_page_ = -1;
  unsigned char* last_data_ = nullptr;
};

class PagedCellReader;

class PagedCells {
 public:
  /// Tables for `cells` cells in the scratch file that `shelf` (the store's, outliving this)
  /// holds or makes, served by `frames` frames of `page_bytes` charged to `budget` (at least
  /// least_frames(threads)); the file goes back on the shelf for the next tree when this one
  /// goes, instead of a file made and removed for each tree.
  PagedCells(ScratchFileShelf& shelf, std::size_t page_bytes, IoMode mode, Eviction eviction, std::int64_t cells,
             std::int64_t frames, int threads, MemoryBudget& budget);
  ~PagedCells();
  PagedCells(const PagedCells&) = delete;
  PagedCells& operator=(const PagedCells&) = delete;

  /// The fewest frames for `threads` compute threads and the prefetch thread: two slots each
  /// and two frames for loads and write-backs.
  static std::int64_t least_frames(int threads) { return 2 * (threads + 1) + 2; }
  /// Pages the records of `cells` cells take.
  static std::int64_t pages_for(std::int64_t cells, std::size_t page_bytes);
  /// Bytes of the page tables of the readers of `pages` pages that `threads` threads hold at
  /// once (each thread's and the walk's prefetch's, or the build's): 4 bytes a page a reader
  /// (PinnedSlots charges its own).
  static std::uint64_t reader_table_bytes(std::int64_t pages, int threads) {
    return static_cast<std::uint64_t>(pages) * sizeof(std::int32_t) * static_cast<std::uint64_t>(threads + 1);
  }

  std::int64_t count() const { return cells_; }
  /// A reader for one thread; `write`: its pins may modify records (the build).
  PagedCellReader reader(bool write = false) const;
  std::int64_t frames() const { return cache_->frames(); }
  StoreCounters counters() const { return cache_->counters(); }
  /// Load the cell pages not yet cached into cold frames, their reads in flight together
  /// through `io` (on file()): a traversal that knows its next cells ahead, a tree level at
  /// a time, waits once for all of them instead of once a page. Returns the loads that
  /// failed; a reader's pin of such a page reads it again and reports the error.
  std::int64_t prefetch(Span<const std::int64_t> pages, BatchedPageIo& io) const {
    return cache_->prefetch_many(pages, io);
  }
  /// PageCache::clean_cold on the cells' cache.
  std::size_t clean_cold() const {
    return cache_->clean_cold();
  }
  /// Give the cache `frames` frames (PageCache::set_frames; at least least_frames(threads),
  /// at most one a page), and the readers made after it their share of them.
  void set_frames(std::int64_t frames);
  /// Records a page holds (a power of two).
  std::int64_t records_per_page() const { return walk_mask_ + 1; }
  /// Record k's two halves into the bytes of its page (page_bytes, the file's layout).
  void place(unsigned char* page, std::int64_t k, const PagedCellRecord& r) const {
    std::memcpy(page + walk_offset(k), &r.walk, sizeof r.walk);
    std::memcpy(page + moments_offset(k), &r.moments, sizeof r.moments);
  }
  /// Whole pages of records written straight to the file, past the frames (a build that
  /// makes every record of a page at once: PageCache::write_through).
  void write_pages(Span<const BatchedPageIo::Page> pages, BatchedPageIo& io) const { cache_->write_through(pages, io); }
  const PageFile& file() const { return *file_; }

 private:
  friend class PagedCellReader;
  /// Where record k's halves lie in its page: the page's walk halves, then its moments.
  std::size_t walk_offset(std::int64_t k) const { return static_cast<std::size_t>(k & walk_mask_) * sizeof(WalkCell); }
  std::size_t moments_offset(std::int64_t k) const {
    return (static_cast<std::size_t>(walk_mask_) + 1) * sizeof(WalkCell) +
           static_cast<std::size_t>(k & walk_mask_) * sizeof(PagedCellMoments);
  }
  /// The slots of each reader: the cache's frames shared among threads + 1 readers.
  void share_frames();
  int threads_;
  std::int64_t cells_;
  ScratchFileShelf& shelf_;  // not owned
  int walk_shift_;            // log2 of the records a page holds (a power of two: PagedCellReader::at)
  std::int64_t walk_mask_;
  std::size_t slots_;              // per reader
  std::unique_ptr<PageFile> file_;
  std::unique_ptr<PageCache> cache_;
  // Read-ahead for the walk's readers: each level's records lie in curve order, so the walk
  // sweeping the curve needs, at every level, the page after the one it last missed.
  std::unique_ptr<ReadAhead> read_ahead_;
};

/// One thread's cell accessor (tree.hpp) over PagedCells; also writes records when made with
/// write = true (the build).
class PagedCellReader {
 public:
  PagedCellReader(const PagedCells& cells, bool write);
  PagedCellReader(PagedCellReader&&) = default;

  std::size_t count() const { return static_cast<std::size_t>(cells_->cells_); }
  /// The walk's half of record k (64 bytes): all the MAC reads. Read in place from the
  /// pinned frame, as the in-core walk reads its array (a copy cost the walk ~4% of its CPU
  /// at N = 1e7): valid until this reader's next call, which may pin another page in its
  /// slot.
  const WalkCell& walk(std::int32_t k) const { return *walk_at(page_data(k), k); }
  CellTerms terms(std::int32_t k) const {
    const unsigned char* page = page_data(k);
    const WalkCell& w = *walk_at(page, k);
    const PagedCellMoments& m = *moments_at(page, k);
    return {w.cx, w.cy, w.cz, m.m, m.qxx, m.qxy, m.qxz, m.qyy, m.qyz, m.qzz, m.qtr};
  }
  std::int32_t root() const { return 0; }
  /// The relative criterion (alpha > 0) is refused out of core (PagedTree): never asked.
  double mass_size2(std::int32_t k) const;
  PagedCellRecord record(std::int64_t k) const {
    const unsigned char* page = page_data(k);
    return {*walk_at(page, k), *moments_at(page, k)};
  }
  void put(std::int64_t k, const PagedCellRecord& r) { cells_->place(page_data(k), k, r); }
  void release() { slots_.release(); }
  /// The page that holds record k.
  std::int64_t page_of(std::int64_t k) const { return k >> cells_->walk_shift_; }

 private:
  /// The pinned bytes of the page that holds record k: pages hold a power of two of records
  /// (page sizes are multiples of 4096), so a shift and a mask find one, not a division.
  unsigned char* page_data(std::int64_t k) const { return slots_.data(k >> cells_->walk_shift_); }
  /// The frames hold halves written as objects (put) or read back byte for byte from the file.
  const WalkCell* walk_at(const unsigned char* page, std::int64_t k) const {
    return std::launder(reinterpret_cast<const WalkCell*>(page + cells_->walk_offset(k)));
  }
  const PagedCellMoments* moments_at(const unsigned char* page, std::int64_t k) const {
    return std::launder(reinterpret_cast<const PagedCellMoments*>(page + cells_->moments_offset(k)));
  }
  const PagedCells* cells_;
  mutable PinnedSlots slots_;
};

}  // namespace gravpipe
