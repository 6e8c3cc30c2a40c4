// The next step's sort runs, made while the tree walk runs (store_sort.hpp, SortRunWriter):
// the disk idles through most of the walk, and the closing kick has just written every input
// a run of the next sort needs (velocities; the accelerations before it; positions and masses
// unchanged). The closing kick reports each range it has kicked; a run of the sort whose every
// particle is kicked goes to a worker thread, which kick-drifts it for the next step, keys it
// in the step's frame (step_frame: known before the walk ends, as long as the drifted
// positions stay inside it) and writes it to the twins. The next sort checks the frame and
// the kick-drift and, if they hold, goes straight to its merge (StoreSortConfig::presorted).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "gravpipe/store_sort.hpp"

namespace gravpipe {

class WalkRuns {
 public:
  /// `c`: the next sort's configuration with its kick-drift (h, dt); runs of `run` particles
  /// keyed in `frame`.
  WalkRuns(ParticleStore& s, const StoreSortConfig& c, std::int64_t run, const CurveBox& frame);
  ~WalkRuns();  // stops the worker (what it has not written is simply not used)
  WalkRuns(const WalkRuns&) = delete;
  WalkRuns& operator=(const WalkRuns&) = delete;

  /// Particles [begin, begin + n) are closing-kicked (their velocities in the store). From
  /// the walk's threads.
  void kicked(std::int64_t begin, std::int64_t n);
  /// Waits for the worker. The runs when every one was written; none when a range was never
  /// kicked (a force not finite). Rethrows the first error a run's write met (a full disk:
  /// StoreError naming the page): its whole pages went straight to the file, past the cache
  /// (PageCache::write_through), so no later eviction or flush would meet it again.
  std::optional<PresortedRuns> finish();

 private:
  void serve();
  SortRunWriter writer_;
  const std::int64_t run_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::int64_t> left_;  // per run: particles not yet kicked
  std::deque<std::int64_t> ready_;  // runs whose every particle is kicked
  std::int64_t written_ = 0;
  bool stop_ = false, failed_ = false;
  std::exception_ptr error_;  // the first a run's write threw
  std::thread worker_;  // last: starts after everything it uses exists
};

}  // namespace gravpipe
