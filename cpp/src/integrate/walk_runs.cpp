// The next sort's runs made during the walk (walk_runs.hpp).
#include "gravpipe/walk_runs.hpp"

#include <algorithm>

#include "gravpipe/thread_name.hpp"

namespace gravpipe {

WalkRuns::WalkRuns(ParticleStore& s, const StoreSortConfig& c, std::int64_t run, const CurveBox& frame)
    : writer_(s, c, run, frame), run_(run) {
  const std::int64_t n = s.size();
  left_.resize(static_cast<std::size_t>(writer_.runs()));
  for (std::size_t k = 0; k < left_.size(); ++k)
    left_[k] = std::min(run_, n - static_cast<std::int64_t>(k) * run_);
  worker_ = std::thread([this] { serve(); });
}

WalkRuns::~WalkRuns() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void WalkRuns::kicked(std::int64_t begin, std::int64_t n) {
  bool any = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::int64_t b = begin, e = begin + n; b < e;) {
      const std::int64_t k = b / run_, stop = std::min(e, (k + 1) * run_);
      if ((left_[static_cast<std::size_t>(k)] -= stop - b) == 0) ready_.push_back(k), any = true;
      b = stop;
    }
  }
  if (any) wake_.notify_one();
}

void WalkRuns::serve() {
  name_this_thread("gp-next-runs");
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stop_ || !ready_.empty(); });
    if (ready_.empty()) break;  // stopped, nothing left
    const std::int64_t k = ready_.front();
    ready_.pop_front();
    if (failed_) continue;
    lock.unlock();
    std::exception_ptr error;
    try {
      writer_.write(k);
    } catch (...) {  // finish() raises it: the run's pages went straight to the file, so no
      error = std::current_exception();  // eviction or flush would ever meet it again
    }
    lock.lock();
    if (error && !error_) error_ = error;
    failed_ = failed_ || error;
    written_ += !error;
  }
}

std::optional<PresortedRuns> WalkRuns::finish() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
  if (error_) std::rethrow_exception(error_);
  if (failed_ || written_ != static_cast<std::int64_t>(left_.size())) return std::nullopt;
  return writer_.result();
}

}  // namespace gravpipe
