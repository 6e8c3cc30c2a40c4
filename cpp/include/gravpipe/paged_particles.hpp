// The particle accessor over the out-of-core store (particle_view.hpp names the contract),
// so that the tree can read x, y, z, m from pages with the same code that reads arrays.
//
// Choice: block(b, e) copies particles [b, e) out of the pages into memory that this
// accessor owns and charges to the store's memory budget, and returns a ParticleBlock over
// that copy. ParticleBlock is four plain pointers (the in-core path stays pointer arithmetic),
// and a range may straddle pages, so pointers straight into pinned frames would not be
// contiguous; a copy also releases the pages at once, so a few frames serve any number of
// live blocks. The copies live until the accessor is destroyed or release() is called: one
// accessor per force evaluation. A walk that asks for more than the budget allows gets a
// BudgetError, not an out-of-memory kill.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gravpipe/memory_budget.hpp"
#include "gravpipe/particle_store.hpp"
#include "gravpipe/particle_view.hpp"

namespace gravpipe {

class PagedParticles {
 public:
  /// Positions from field `pos` (3 components), masses from `mass`, both float64.
  explicit PagedParticles(ParticleStore& store, std::string pos = "pos", std::string mass = "mass");
  PagedParticles(const PagedParticles&) = delete;
  PagedParticles& operator=(const PagedParticles&) = delete;

  std::size_t size() const { return static_cast<std::size_t>(store_.size()); }
  /// Particles [b, e), valid until release() or destruction. Safe from many threads.
  ParticleBlock block(std::int64_t b, std::int64_t e) const;
  /// Free every block handed out (their ParticleBlocks dangle afterwards).
  void release();
  /// Free the blocks the calling OpenMP thread asked for: the tree calls it after each run
  /// of groups, whose blocks live only while the run is evaluated, so the memory held is
  /// one run's lists per thread, not a whole evaluation's.
  void release_this_thread() const;
  /// Bytes held by live blocks (charged to the store's budget).
  std::uint64_t bytes_held() const;

 private:
  struct Copy {
    std::unique_ptr<double[]> xyzm;  // x, y, z, m of e - b particles, one after the other
    Reservation charge;
    int thread = 0;                  // the OpenMP thread that asked for it
    std::uint64_t bytes = 0;
  };
  ParticleStore& store_;
  const std::string pos_, mass_;
  mutable std::mutex mutex_;
  mutable std::vector<Copy> copies_;
  mutable std::uint64_t bytes_ = 0;
};

/// The end of a run of groups in the tree's evaluation (tree_runs.cpp): its blocks go.
inline void release_run_blocks(const PagedParticles& p) { p.release_this_thread(); }

}  // namespace gravpipe
