// Read-ahead along the curve: background I/O threads that load the pages a reader will want
// next (the following pages of the same column: particles are stored in curve order, and the
// tree and the integrator sweep the curve; or exactly the pages a pass knows it reads next,
// as the permute does), so that their I/O overlaps the reader's compute. Several workers
// keep several loads in flight, which a disk serves faster than one at a time; each takes
// the hints waiting in line, up to kBatch, and loads them together (BatchedPageIo: one
// submission, pages that follow one another joined into one request), so that a reader that
// hints a few pages at once wakes one worker for them, not one a page. The reader
// only hints; what the threads could not load in time shows up as misses and stall seconds
// in the cache's counters. A page whose read fails here is left absent: the reader's own pin
// then reads it again and raises the error in the reader's thread.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "gravpipe/page_cache.hpp"

namespace gravpipe {

class ReadAhead {
 public:
  /// Up to `queue_pages` hinted pages wait in line; 0 starts no thread (hints are ignored).
  /// `workers` threads serve the queue, each one load at a time: several loads in flight
  /// keep a disk's queue deep (64 KiB O_DIRECT reads: 0.42 GB/s one at a time, 0.79 GB/s
  /// four at a time).
  ReadAhead(PageCache& cache, std::size_t queue_pages, int workers = 1);
  ~ReadAhead();  // stops the thread, dropping hints not yet served
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  /// Ask for `page` soon; never blocks (dropped when the queue is full).
  void hint(std::int64_t page) { hint(Span<const std::int64_t>(&page, 1)); }
  /// Ask for each of `pages` soon, with one wake of a worker for them all.
  void hint(Span<const std::int64_t> pages);
  /// Drop a queued hint for `page`: its reader got there first and pins it itself (served
  /// later, the hint could load the page again after the reader's own copy was evicted).
  void cancel(std::int64_t page);
  /// Wait until every queued hint has been served (before evicting everything, in tests).
  void drain();
  /// Prefetches that failed (the reader's pin reports why).
  std::int64_t failures() const;

 private:
  void serve();
  /// Hinted pages a worker loads together at most.
  static constexpr std::size_t kBatch = 8;
  PageCache& cache_;
  const std::size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<std::int64_t> queue_;
  bool stop_ = false;
  int working_ = 0;  // workers loading pages now
  std::int64_t failures_ = 0;
  std::vector<std::thread> threads_;  // last: start after everything they use exists
};

}  // namespace gravpipe
