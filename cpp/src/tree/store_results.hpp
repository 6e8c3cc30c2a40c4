// Results of a tree evaluation written to the out-of-core store (paged_tree.cpp): each thread
// collects its run's accelerations and potentials (i order = curve order = the store's
// order) and writes them to the store's fields (by default "acc" and "pot"; a diagnostic
// evaluation writes only its potential to another field, so that the run's forces stay)
// when the run ends. The results type of GroupEvaluation (tree_runs.hpp), beside
// CallerResults.
//
// The evaluation writes every particle's result exactly once, so the fields' old values are
// dead from the start: they are discarded (ParticleStore::discard), and a run's write into a
// page fills a zeroed frame instead of reading the page's stale results from the file first.
// A caller's hook (RunResultsHook) sees each run's results while they are still in memory:
// the out-of-core leapfrog kicks those particles there (PagedClosingKick).
#pragma once
#include <omp.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gravpipe/error.hpp"
#include "gravpipe/paged_tree.hpp"
#include "gravpipe/particle_store.hpp"
#include "gravpipe/tree.hpp"
#include "walk_prefetch.hpp"

namespace gravpipe {

class StoreResults {
 public:
  /// `acc_field` empty: the accelerations are not written.
  /// `hook` (may be empty) is called with each run's results after they are written.
  /// `cost_field` (int64; empty: not written): each particle's interactions, the cost that
  /// balances MPI domains (CallerResults::cost).
  StoreResults(ParticleStore& store, int threads, std::string acc_field = "acc", std::string pot_field = "pot",
               RunResultsHook hook = {}, std::string cost_field = {})
      : store_(store),
        acc_field_(std::move(acc_field)),
        pot_field_(std::move(pot_field)),
        cost_field_(std::move(cost_field)),
        hook_(std::move(hook)),
        buffers_(static_cast<std::size_t>(threads)) {
    if (!acc_field_.empty()) store_.discard(acc_field_);
    store_.discard(pot_field_);
    if (!cost_field_.empty()) store_.discard(cost_field_);
  }

  /// Tell `prefetch` (not owned; it must outlive the evaluation) where each thread is.
  void report_runs_to(WalkPrefetch& prefetch) { prefetch_ = &prefetch; }

  void begin_run(const Group& run) const {
    if (prefetch_ != nullptr) prefetch_->started(run.i_begin);
    Buffer& b = mine();
    b.begin = run.i_begin;
    const auto n = static_cast<std::size_t>(run.i_end - run.i_begin);
    b.acc.resize(3 * n), b.pot.resize(n);
    if (!cost_field_.empty()) b.cost.resize(n);
  }
  void put(std::int64_t i, double ax, double ay, double az, double pot_i) const {
    Buffer& b = mine();
    const auto q = static_cast<std::size_t>(i - b.begin);
    b.acc[3 * q] = ax, b.acc[3 * q + 1] = ay, b.acc[3 * q + 2] = az, b.pot[q] = pot_i;
  }
  void end_run(const Group& run) const {
    Buffer& b = mine();
    const std::int64_t n = run.i_end - run.i_begin;
    if (!acc_field_.empty()) store_.write(acc_field_, run.i_begin, n, b.acc.data());
    store_.write(pot_field_, run.i_begin, n, b.pot.data());
    if (!cost_field_.empty()) store_.write(cost_field_, run.i_begin, n, b.cost.data());
    if (hook_) hook_(run.i_begin, n, b.acc.data(), b.pot.data());
    // the result pages this run completed are done with: they give way before the walk's
    // (N = 1e7 at 1/10: 12% fewer misses, 8% fewer pages read in the walk)
    if (!acc_field_.empty()) store_.cool(acc_field_, run.i_begin, run.i_end);
    store_.cool(pot_field_, run.i_begin, run.i_end);
  }
  bool wants_cost() const { return !cost_field_.empty(); }
  void put_cost(std::int64_t i, std::int64_t terms) const {
    Buffer& b = mine();
    b.cost[static_cast<std::size_t>(i - b.begin)] = terms;
  }

 private:
  struct Buffer {
    std::int64_t begin = 0;
    std::vector<double> acc, pot;
    std::vector<std::int64_t> cost;
  };
  Buffer& mine() const {
    const auto t = static_cast<std::size_t>(omp_get_thread_num());
    if (t >= buffers_.size()) throw InputError("StoreResults: more threads than buffers");
    return buffers_[t];
  }
  ParticleStore& store_;
  const std::string acc_field_, pot_field_, cost_field_;
  const RunResultsHook hook_;
  WalkPrefetch* prefetch_ = nullptr;  // optional, not owned
  mutable std::vector<Buffer> buffers_;
};

}  // namespace gravpipe
