// Linux AIO contexts kept for reuse by BatchedPageIo (batched_page_io.hpp). io_destroy waits
// for the kernel's RCU grace period before it returns: 20-55 ms each on the scratch host
// (strace of one out-of-core step at N = 1e7), and a step made and destroyed eleven
// contexts (the sort's merge and permute lanes, the walk's prefetch, the cells' read-ahead),
// ~0.3 s of them on the step's critical path. A pool owned by the store lends contexts to the
// batches of each pass and destroys them once, with the store.
#pragma once
#include <cstdint>
#include <mutex>
#include <vector>

namespace gravpipe {

class AioContextPool {
 public:
  AioContextPool() = default;
  ~AioContextPool();  // destroys every context (none may be lent out then)
  AioContextPool(const AioContextPool&) = delete;
  AioContextPool& operator=(const AioContextPool&) = delete;

  /// A context with room for `depth` requests in flight: an idle one of that depth, or a new
  /// one. 0 when io_setup refuses (errno says why). Thread-safe.
  std::uint64_t acquire(int depth);
  /// Gives back a context from acquire(depth) with no request in flight and every
  /// completion reaped (a context used by a call that threw is destroyed instead).
  void release(std::uint64_t context, int depth);
  /// Contexts made since construction (each made once, then lent again and again).
  std::int64_t made() const;

 private:
  struct Idle {
    int depth;
    std::uint64_t context;
  };
  mutable std::mutex mutex_;
  std::vector<Idle> idle_;
  std::int64_t made_ = 0;
};

}  // namespace gravpipe
