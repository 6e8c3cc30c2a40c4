// Read-ahead along the curve: a background I/O thread that loads the pages a reader will want
// next (the following pages of the same column: particles are stored in curve order, and the
// tree and the integrator sweep the curve), so that their I/O overlaps the reader's compute.
// The reader only hints; what the thread could not load in time shows up as misses and stall
// seconds in the cache's counters. A page whose read fails here is left absent: the reader's
// own pin then reads it again and raises the error in the reader's thread.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include "gravpipe/page_cache.hpp"

namespace gravpipe {

class ReadAhead {
 public:
  /// Up to `queue_pages` hinted pages wait in line; 0 starts no thread (hints are ignored).
  ReadAhead(PageCache& cache, std::size_t queue_pages);
  ~ReadAhead();  // stops the thread, dropping hints not yet served
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  /// Ask for `page` soon; never blocks (dropped when the queue is full).
  void hint(std::int64_t page);
  /// Drop a queued hint for `page`: its reader got there first and pins it itself (served
  /// later, the hint could load the page again after the reader's own copy was evicted).
  void cancel(std::int64_t page);
  /// Wait until every queued hint has been served (before evicting everything, in tests).
  void drain();
  /// Prefetches that failed (the reader's pin reports why).
  std::int64_t failures() const;

 private:
  void serve();
  PageCache& cache_;
  const std::size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<std::int64_t> queue_;
  bool stop_ = false;
  bool working_ = false;
  std::int64_t failures_ = 0;
  std::thread thread_;  // last: starts after everything it uses exists
};

}  // namespace gravpipe
