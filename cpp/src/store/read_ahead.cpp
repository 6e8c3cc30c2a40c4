// The read-ahead threads: a bounded queue of hinted pages served in order by one or more
// workers.
#include "gravpipe/read_ahead.hpp"

#include <algorithm>

namespace gravpipe {

ReadAhead::ReadAhead(PageCache& cache, std::size_t queue_pages, int workers)
    : cache_(cache), capacity_(queue_pages) {
  if (capacity_ == 0) return;
  for (int w = 0; w < std::max(workers, 1); ++w) threads_.emplace_back([this] { serve(); });
}

ReadAhead::~ReadAhead() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ReadAhead::hint(std::int64_t page) {
  if (capacity_ == 0) return;
  // A sweep hints the same few pages ahead from every slice it reads (a walk's closing kick,
  // ~2048 particles a run, re-hints each page ~16 times), and a hint for a page already in the
  // cache would only wake the thread to find it there: each wake preempts a compute thread on
  // a machine with as many threads as cores (N = 1e7 walk: ~100k wakes, ~130k preemptions).
  if (cache_.resident(page)) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.size() >= capacity_ || std::find(queue_.begin(), queue_.end(), page) != queue_.end()) return;
    queue_.push_back(page);
  }
  wake_.notify_one();
}

void ReadAhead::cancel(std::int64_t page) {
  if (capacity_ == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = std::find(queue_.begin(), queue_.end(), page);
  if (it != queue_.end()) queue_.erase(it);
}

void ReadAhead::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [this] { return (queue_.empty() && working_ == 0) || stop_; });
}

std::int64_t ReadAhead::failures() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failures_;
}

void ReadAhead::serve() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) break;
    const std::int64_t page = queue_.front();
    queue_.pop_front();
    ++working_;
    lock.unlock();
    bool failed = false;
    try {
      cache_.prefetch(page);
    } catch (...) {  // reported again, with its message, by the reader's own pin
      failed = true;
    }
    lock.lock();
    --working_;
    if (failed) ++failures_;
    if (queue_.empty() && working_ == 0) idle_.notify_all();
  }
  idle_.notify_all();
}

}  // namespace gravpipe
