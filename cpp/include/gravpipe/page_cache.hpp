// The in-core page cache of the out-of-core store: a fixed number of page frames (charged to
// the memory budget), CLOCK or LRU eviction, pin counts through RAII handles so a page in use
// is never evicted, write-back of dirty pages on eviction and flush with a CRC32C computed
// then and checked on every read back from the file. Thread-safe: many OpenMP threads and the
// read-ahead workers pin pages at once; file I/O runs outside the lock, and a page being
// loaded or written back is "busy", so whoever asks for it waits instead of reading a stale
// copy.
#pragma once
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "gravpipe/aligned_buffer.hpp"
#include "gravpipe/batched_page_io.hpp"
#include "gravpipe/debug_checks.hpp"
#include "gravpipe/error.hpp"
#include "gravpipe/memory_budget.hpp"
#include "gravpipe/page_file.hpp"
#include "gravpipe/span.hpp"
#include "gravpipe/store_counters.hpp"

namespace gravpipe {

enum class Eviction { Clock, Lru };
Eviction parse_eviction(const std::string& name);  // "clock", "lru"
std::string eviction_name(Eviction e);

class PageCache;
class EvictionPolicy;

/// A pinned page: its bytes stay in their frame until the handle is destroyed (move-only).
class PageHandle {
 public:
  PageHandle(PageHandle&& o) noexcept : cache_(o.cache_), frame_(o.frame_), data_(o.data_) { o.cache_ = nullptr; }
  PageHandle& operator=(PageHandle&&) = delete;
  PageHandle(const PageHandle&) = delete;
  PageHandle& operator=(const PageHandle&) = delete;
  ~PageHandle();
  unsigned char* data() const { return data_; }

 private:
  friend class PageCache;
  PageHandle(PageCache* cache, int frame, unsigned char* data) : cache_(cache), frame_(frame), data_(data) {}
  PageCache* cache_;  // not owned
  int frame_;
  unsigned char* data_;
};

class PageCache {
 public:
  /// Bytes a page of the file costs the budget whether cached or not: its CRC32C, its
  /// written flag and the frame that holds it (the page table).
  static constexpr std::uint64_t kTableBytesPerPage = sizeof(std::uint32_t) + 1 + sizeof(std::int32_t);

  enum class Access {
    Read,       // the page's bytes as stored
    Modify,     // read, and the caller changes some bytes: dirty
    Overwrite,  // the caller replaces every byte it will ever read back: dirty, not read first
  };

  /// `frames` frames of the file's page size over `pages` pages, charged to `budget`.
  PageCache(const PageFile& file, std::int64_t pages, std::int64_t frames, Eviction eviction, MemoryBudget& budget);
  ~PageCache();
  PageCache(const PageCache&) = delete;
  PageCache& operator=(const PageCache&) = delete;

  /// Pin `page`, loading it (after writing back the frame's old page if dirty) when absent.
  /// Waits while every frame is pinned. Throws StoreError / ChecksumError naming the page.
  /// `stalled` (optional): set to whether the pin waited or loaded (a miss).
  PageHandle pin(std::int64_t page, Access access, bool* stalled = nullptr);
  /// Load `page` unpinned if it is absent and a cold frame is free to take (one not used
  /// since the eviction hand last passed it), while fewer than a quarter of the frames hold
  /// prefetched pages not yet used or being loaded; never waits for a frame. Returns whether
  /// it loaded. For the read-ahead workers and the walk's prefetch.
  bool prefetch(std::int64_t page);
  /// prefetch() of several pages at once: frames are taken for them in the given order
  /// (under the same rules, stopping at the first that finds none), and their reads go to
  /// the file together through `reads` (several in flight, neighbours joined). A page whose
  /// read or checksum fails is left absent: the pin that wants it reads it again and raises
  /// the error there. Returns how many failed (reads, checksums, write-backs of victims).
  std::int64_t prefetch_many(Span<const std::int64_t> pages, BatchedPageIo& reads);
  /// Write back one batch of dirty frames that are next in line for eviction (cold and
  /// unpinned, found from the eviction hand on), their writes in flight together; they stay
  /// resident, clean. For a helper thread with nothing else to do (the walk's prefetch), so
  /// that a thread that needs a frame finds a clean one instead of waiting for a write-back.
  /// Returns how many it cleaned (0: none dirty and cold, a buffered file, or a write that
  /// failed: that page stays dirty and whoever evicts it next meets the error).
  std::size_t clean_cold();
  /// Pages whose every byte the caller replaces, straight to the file through `io` (several
  /// writes in flight, neighbours joined), past the frames: a copy in memory is dropped
  /// (waiting for one being loaded or written back), and no frame is taken, so that a stream
  /// of pages written once and read much later (the next sort's runs, made during the walk)
  /// neither evicts the pages in use nor leaves dirty frames for their readers to write back.
  /// No page may be pinned (std::logic_error), nor read or written by anyone else meanwhile.
  /// A page whose write fails keeps no bytes: a later read of it raises StoreError, and this
  /// call throws StoreError naming the first such page and why (ENOSPC: the disk is full),
  /// after recording the others.
  void write_through(Span<const BatchedPageIo::Page> pages, BatchedPageIo& io);
  /// Pin `page` only if it is in a frame (waiting while it is being loaded or written back);
  /// an empty optional, and no load, when it is not.
  std::optional<PageHandle> pin_if_resident(std::int64_t page);
  /// Pages' stored bytes into the caller's buffers (aligned, page_bytes each) straight from
  /// the file through `io`, past the frames, each checked against its CRC32C (ChecksumError
  /// naming the page; StoreError for an I/O error): for a reader that will not come back to
  /// them, so that they do not evict the pages others use. Only for pages that are not in a
  /// frame (pin_if_resident said so) and that no one writes meanwhile: the file holds their
  /// bytes then. Counted as pages and bytes read.
  void read_past(Span<const BatchedPageIo::Page> pages, BatchedPageIo& io);
  /// Pages [first, first + count) hold dead values: the caller rewrites every byte of them
  /// before reading any back (a tree evaluation's results). Their bytes are never read from
  /// the file again nor written back: resident copies are dropped (clean or dirty; pinned
  /// ones, which no caller should hold, keep theirs), and a later pin of one gets a zeroed
  /// frame without I/O. Waits for pages being loaded or written back.
  void discard(std::int64_t first, std::int64_t count);
  /// Pages [first, first + count) will not be used again soon (a sweep has written them and
  /// moved on): their frames, resident and unpinned, go first when a frame is needed, so that
  /// they do not crowd out pages still in use; a prefetch's load, which takes only such cold
  /// frames, writes a dirty one back off the compute threads. A hint: changes no byte.
  void cool(std::int64_t first, std::int64_t count);
  /// Write back every dirty page (waits for pinned ones to be released).
  void flush();
  /// flush(), then empty every unpinned frame: the next reads come from the file.
  void evict_all();

  bool resident(std::int64_t page) const;
  StoreCounters counters() const;
  void reset_counters();
  std::int64_t frames() const { return static_cast<std::int64_t>(frames_.size()); }
  /// Give the cache `frames` frames (>= 1), charged to its budget in place of the old ones:
  /// dirty pages are written back and every frame emptied first. For a cache that was small
  /// while others held the budget (the cells' table, written during the sort, widens for the
  /// walk). No page may be pinned or under way (std::logic_error); BudgetError, with the old
  /// frames kept, when the budget cannot hold the new ones.
  void set_frames(std::int64_t frames);
  std::int64_t pages() const { return pages_; }
  /// The budget its frames and tables are charged to (readers charge their own tables there).
  MemoryBudget& budget() const { return *budget_; }
  /// The file the pages live in.
  const PageFile& file() const { return file_; }
  /// Describes a page in error messages (the store names its field and particles).
  void set_page_namer(std::function<std::string(std::int64_t)> namer) { namer_ = std::move(namer); }

 private:
  friend class PageHandle;
  enum class State { Empty, Ready, Busy };
  struct Frame {
    std::int64_t page = -1;
    int pins = 0;
    bool dirty = false;
    bool prefetched = false;  // loaded by read-ahead and not pinned since
    State state = State::Empty;
  };

  /// A frame given to a page being loaded: busy until completed or dropped.
  struct Claim {
    int frame;
    std::int64_t page;
    std::int64_t old;  // the page the frame held (-1: none)
    bool write_old;    // old is dirty: written back before the frame is read into
    bool prefetch;
  };
  int acquire(std::int64_t page, Access access, bool prefetch, bool* stalled = nullptr);
  int load_into(int frame, std::int64_t page, Access access, bool prefetch, std::unique_lock<std::mutex>& lock);
  Claim claim(int frame, std::int64_t page, bool prefetch);
  void write_back_claimed(const Claim& c, std::unique_lock<std::mutex>& lock);
  void drop_claim(const Claim& c);
  void complete_claim(const Claim& c, Access access, bool was_read);
  bool crc_matches(std::int64_t page, const unsigned char* data) const;
  void write_back(std::int64_t page, const unsigned char* data);
  std::size_t clean_with_cold_neighbours(int victim, std::unique_lock<std::mutex>& lock);
  /// AIO contexts for clean_with_cold_neighbours, one taken by each thread that cleans
  /// (as many as ever cleaned at once); under mutex_.
  std::vector<std::unique_ptr<BatchedPageIo>> idle_writers_;
  void read_in(std::int64_t page, unsigned char* data);
  void unpin(int frame);
  unsigned char* frame_data(int frame) const;
  std::string describe(std::int64_t page) const;
  /// `e` (the file's error about `page`) with what the page holds appended, when a namer says.
  StoreError named(const StoreError& e, std::int64_t page) const;
  /// Raises the file's error for `doing` ("reading", "writing") `page` that failed with
  /// errno `error`, the page named.
  [[noreturn]] void fail_io(const char* doing, std::int64_t page, int error) const;
  /// Records that `page`'s whole bytes, of CRC32C `crc`, reached the file; under mutex_.
  /// Recorded only after the write completed: a failed or partial write leaves the old
  /// checksum, so a torn page is reported as corrupt, never read as data.
  void note_stored(std::int64_t page, std::uint32_t crc);

  const PageFile& file_;
  const std::int64_t pages_;
  const std::size_t page_bytes_;
  const Eviction eviction_;
  MemoryBudget* budget_;  // not owned; outlives the cache
  Reservation frames_charge_, tables_charge_;
  AlignedBuffer memory_;                 // frames x page_bytes
  std::vector<Frame> frames_;
  std::vector<std::uint32_t> crc_;       // per page: CRC32C at its last write-back
  /// written_ per page: never stored (reads as zeros), stored (with crc_), or its last write
  /// through failed (reads raise StoreError: the file holds no valid bytes of it)
  static constexpr std::uint8_t kNotStored = 0, kStored = 1, kWriteFailed = 2;
  std::vector<std::uint8_t> written_;
  /// Per page, the frame that holds it (resident, or busy: while a frame's old page is
  /// written back, its old and new pages both map to it), or kNoFrame: one load under the
  /// lock, not a hash lookup (a compute thread pins a block's pages several times a group).
  static constexpr std::int32_t kNoFrame = -1;
  std::vector<std::int32_t> table_;
  int frame_of(std::int64_t page) const {
    return page >= 0 && page < pages_ ? table_[static_cast<std::size_t>(page)] : kNoFrame;
  }
  void unmap(std::int64_t page) {
    if (page >= 0 && page < pages_) table_[static_cast<std::size_t>(page)] = kNoFrame;
  }
  std::unique_ptr<EvictionPolicy> policy_;
  StoreCounters counters_;
  std::int64_t prefetched_unused_ = 0;  // frames loaded by prefetch and not pinned since
  std::int64_t prefetches_in_flight_ = 0;  // prefetch loads under way (several read-ahead workers)
  /// Prefetched pages that may wait unused or be on their way at once: a quarter of the
  /// frames (at least one), however many workers load them.
  std::int64_t max_prefetched_() const { return std::max<std::int64_t>(1, frames() / 4); }
  std::function<std::string(std::int64_t)> namer_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;      // a frame became ready, unpinned or empty
  /// GRAVPIPE_DEBUG_CHECKS: the frames' and pages' bookkeeping checked under mutex_ (a
  /// pinned frame holds its page and the table says so, the charges match the frames,
  /// the budget is not exceeded); every frame and page at once with `sweep`.
  void check_invariants(int pinned_frame, std::int64_t page, bool sweep) const;
  /// A release of a frame with no pins (unpin runs in PageHandle's destructor, which must
  /// not throw): recorded there, raised by the next pin, flush or counters().
  GRAVPIPE_DEBUG_ONLY(std::string unpin_error_;)
};

}  // namespace gravpipe
