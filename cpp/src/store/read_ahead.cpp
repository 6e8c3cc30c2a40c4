// The read-ahead threads: a bounded queue of hinted pages served in order by one or more
// workers.
#include "gravpipe/read_ahead.hpp"

#include <algorithm>

#include "gravpipe/batched_page_io.hpp"
#include "gravpipe/thread_name.hpp"

namespace gravpipe {

ReadAhead::ReadAhead(PageCache& cache, std::size_t queue_pages, int workers)
    : cache_(cache), capacity_(queue_pages) {
  if (capacity_ == 0) return;
  for (int w = 0; w < std::max(workers, 1); ++w) {
    threads_.emplace_back([this] { serve(); });
    name_thread(threads_.back(), "gp-read-ahead");  // named before the store's maker goes on
  }
}

ReadAhead::~ReadAhead() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ReadAhead::hint(Span<const std::int64_t> pages) {
  if (capacity_ == 0) return;
  // A sweep hints the same few pages ahead from every slice it reads (a walk's closing kick,
  // ~2048 particles a run, re-hints each page ~16 times), and a hint for a page already in the
  // cache would only wake the thread to find it there: each wake preempts a compute thread on
  // a machine with as many threads as cores (N = 1e7 walk: ~100k wakes, ~130k preemptions).
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const std::int64_t page : pages) {
      if (queue_.size() >= capacity_) break;
      if (cache_.resident(page) || std::find(queue_.begin(), queue_.end(), page) != queue_.end()) continue;
      queue_.push_back(page);
      queued = true;
    }
  }
  if (queued) wake_.notify_one();
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
  // this worker's own requests in flight; where AIO is refused it reads one page at a time
  BatchedPageIo reads(cache_.file(), static_cast<int>(kBatch));
  std::vector<std::int64_t> batch;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) break;
    batch.clear();
    for (; !queue_.empty() && batch.size() < kBatch; queue_.pop_front()) batch.push_back(queue_.front());
    // more left in line: another worker takes them while this one loads
    if (!queue_.empty()) wake_.notify_one();
    ++working_;
    lock.unlock();
    std::int64_t failed = 0;
    try {
      failed = cache_.prefetch_many(Span<const std::int64_t>(batch.data(), batch.size()), reads);
    } catch (...) {  // reported again, with its message, by the reader's own pin
      failed = 1;
    }
    lock.lock();
    --working_;
    failures_ += failed;
    if (queue_.empty() && working_ == 0) idle_.notify_all();
  }
  idle_.notify_all();
}

}  // namespace gravpipe
