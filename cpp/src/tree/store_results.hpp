// Results of a tree evaluation written to the out-of-core store (paged_tree.cpp): each thread
// collects its run's accelerations and potentials (i order = curve order = the store's
// order) and writes them to the fields "acc" and "pot" when the run ends. The results type
// of GroupEvaluation (tree_runs.hpp), beside CallerResults.
//
// The evaluation writes every particle's result exactly once, so the fields' old values are
// dead from the start: they are discarded (ParticleStore::discard), and a run's write into a
// page fills a zeroed frame instead of reading the page's stale results from the file first.
#pragma once
#include <omp.h>

#include <cstdint>
#include <vector>

#include "gravpipe/error.hpp"
#include "gravpipe/particle_store.hpp"
#include "gravpipe/tree.hpp"
#include "walk_prefetch.hpp"

namespace gravpipe {

class StoreResults {
 public:
  StoreResults(ParticleStore& store, int threads) : store_(store), buffers_(static_cast<std::size_t>(threads)) {
    for (const char* f : {"acc", "pot"}) store_.discard(f);
  }

  /// Tell `prefetch` (not owned; it must outlive the evaluation) where each thread is.
  void report_runs_to(WalkPrefetch& prefetch) { prefetch_ = &prefetch; }

  void begin_run(const Group& run) const {
    if (prefetch_ != nullptr) prefetch_->started(omp_get_thread_num(), run.i_begin);
    Buffer& b = mine();
    b.begin = run.i_begin;
    const auto n = static_cast<std::size_t>(run.i_end - run.i_begin);
    b.acc.resize(3 * n), b.pot.resize(n);
  }
  void put(std::int64_t i, double ax, double ay, double az, double pot_i) const {
    Buffer& b = mine();
    const auto q = static_cast<std::size_t>(i - b.begin);
    b.acc[3 * q] = ax, b.acc[3 * q + 1] = ay, b.acc[3 * q + 2] = az, b.pot[q] = pot_i;
  }
  void end_run(const Group& run) const {
    Buffer& b = mine();
    const std::int64_t n = run.i_end - run.i_begin;
    store_.write("acc", run.i_begin, n, b.acc.data());
    store_.write("pot", run.i_begin, n, b.pot.data());
  }
  bool wants_cost() const { return false; }
  void put_cost(std::int64_t, std::int64_t) const {}

 private:
  struct Buffer {
    std::int64_t begin = 0;
    std::vector<double> acc, pot;
  };
  Buffer& mine() const {
    const auto t = static_cast<std::size_t>(omp_get_thread_num());
    if (t >= buffers_.size()) throw InputError("StoreResults: more threads than buffers");
    return buffers_[t];
  }
  ParticleStore& store_;
  WalkPrefetch* prefetch_ = nullptr;  // optional, not owned
  mutable std::vector<Buffer> buffers_;
};

}  // namespace gravpipe
