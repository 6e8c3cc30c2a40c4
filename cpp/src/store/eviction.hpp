// Which page frame gives way when a page must come in: CLOCK (a reference bit per frame and a
// sweeping hand: cheap, close to LRU) or exact LRU (a use stamp per frame, the least recent
// evictable frame). Not thread-safe: the page cache calls it under its lock.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gravpipe/page_cache.hpp"

namespace gravpipe {

class EvictionPolicy {
 public:
  EvictionPolicy(Eviction kind, std::size_t frames) : kind_(kind), ref_(frames, 0), stamp_(frames, 0) {}

  /// Frame `f` was just used.
  void touch(std::size_t f) {
    ref_[f] = 1;
    stamp_[f] = ++tick_;
  }

  /// Frame `f` will not be used again soon: first in line for eviction (CLOCK: no second
  /// chance; LRU: the oldest stamp).
  void cool(std::size_t f) {
    ref_[f] = 0;
    stamp_[f] = 0;
  }

  /// Whether frame `f` is among the next to give way: CLOCK, not used since the hand last
  /// passed it (or cooled); LRU, cooled.
  bool cold(std::size_t f) const { return kind_ == Eviction::Clock ? ref_[f] == 0 : stamp_[f] == 0; }

  /// Where the next search for a victim starts (CLOCK: the hand; LRU: frame 0).
  std::size_t next() const { return kind_ == Eviction::Clock ? hand_ : 0; }
  /// The frame to reuse among those where can_evict(f) holds, or -1 when none does.
  template <class CanEvict>
  int victim(CanEvict&& can_evict) {
    return kind_ == Eviction::Clock ? clock_victim(can_evict) : lru_victim(can_evict);
  }

  /// A frame for a speculative load (prefetch): only one not used since the hand last
  /// passed it (CLOCK), and no reference bit is cleared on the way. A prefetch must not age
  /// the pages in use: when the cache cannot hold the working set, a prefetch that took
  /// second chances evicted pages the compute threads were about to pin (N = 1e6, 73
  /// frames: 2 GB read instead of 1 GB). LRU: the least recent frame, as victim().
  template <class CanEvict>
  int cold_victim(CanEvict&& can_evict) {
    if (kind_ == Eviction::Lru) return lru_victim(can_evict);
    const std::size_t n = ref_.size();
    for (std::size_t step = 0; step < n; ++step) {
      const std::size_t f = (hand_ + step) % n;
      if (ref_[f] == 0 && can_evict(f)) {
        hand_ = (f + 1) % n;
        return static_cast<int>(f);
      }
    }
    return -1;
  }

 private:
  template <class CanEvict>
  int clock_victim(CanEvict& can_evict) {
    const std::size_t n = ref_.size();
    for (std::size_t step = 0; step < 2 * n; ++step) {  // two sweeps clear every bit once
      const std::size_t f = hand_;
      hand_ = (hand_ + 1) % n;
      if (!can_evict(f)) continue;
      if (ref_[f] != 0) {
        ref_[f] = 0;  // a second chance
        continue;
      }
      return static_cast<int>(f);
    }
    return -1;
  }

  template <class CanEvict>
  int lru_victim(CanEvict& can_evict) {
    int best = -1;
    for (std::size_t f = 0; f < stamp_.size(); ++f)
      if (can_evict(f) && (best < 0 || stamp_[f] < stamp_[static_cast<std::size_t>(best)])) best = static_cast<int>(f);
    return best;
  }

  Eviction kind_;
  std::vector<std::uint8_t> ref_;     // CLOCK reference bits
  std::vector<std::uint64_t> stamp_;  // LRU use stamps
  std::uint64_t tick_ = 0;
  std::size_t hand_ = 0;
};

}  // namespace gravpipe
