// The leapfrog's kick and drift on the pages of an out-of-core store, block by block: the
// loops of LeapfrogIntegrator::step (leapfrog.hpp) with the same arithmetic per element, so
// an out-of-core step (kick-drift, sort, tree forces, kick) gives the in-core step's state
// bit for bit. Blocks are charged to the store's budget. PagedLeapfrog (paged_leapfrog.hpp)
// assembles them into its steps.
//
// Each separate pass reads and writes every particle's page once (~1 GB/s of disk at N = 1e7),
// so a step fuses what it can into the passes it makes anyway:
//   * the closing kick rides on the tree walk: PagedClosingKick takes each run of results
//     while it is in memory (PagedTree::self_forces' hook) and kicks its velocities, the
//     disk being idle while the walk computes;
//   * the same hook predicts the box of the positions the next step's kick-drift will give
//     (same dt): the next step's external sort then kicks and drifts the particles as it
//     reads its runs (StoreSortConfig::kick_drift) in the frame of that box, and checks the
//     box bit for bit (a wrong prediction falls back to the separate pass, never to wrong keys);
//   * and a worker can make that sort's runs during the walk itself, from the ranges the
//     closing kick has finished (walk_runs.hpp), leaving the sort its merge and permute.
#pragma once
#include <cstdint>
#include <mutex>
#include <vector>

#include "gravpipe/curve_order.hpp"
#include "gravpipe/particle_store.hpp"

namespace gravpipe {

/// vel += h acc, then pos += dt vel, for every particle ("vel", "acc", "pos").
void paged_kick_drift(ParticleStore& s, double h, double dt, std::int64_t block);

/// The closing kick vel += h acc of a step (LeapfrogIntegrator::step's last loop), run by run
/// as the tree walk hands over its results, first checking that every force is finite, as
/// the in-core leapfrog does after its forces; and,
/// when next_dt > 0, the bounds of the positions the next kick-drift (next_h, next_dt) will
/// give: pos + next_dt (vel + next_h acc), the same operations in the same order.
/// Call operator() from at most `threads` OpenMP threads at once (omp_get_thread_num() picks
/// a thread's buffers). A run with a non-finite force is left unkicked and remembered:
/// throw_if_bad() then raises IntegrationError naming the first such particle (its "index",
/// the caller's order) and the time t.
/// With `kick` false nothing is kicked (the first forces of a run, before its first step):
/// the forces are checked and the next kick-drift's bounds predicted from the velocities as
/// they are.
class PagedClosingKick {
 public:
  PagedClosingKick(ParticleStore& s, double h, double t, int threads, double next_h = 0, double next_dt = 0,
                   bool kick = true);

  /// Particles [begin, begin + n): acc (3n) and pot (n) just computed. Returns whether they
  /// were kicked (with `kick` false: whether their forces are finite; false: a force not
  /// finite, remembered for throw_if_bad).
  bool operator()(std::int64_t begin, std::int64_t n, const double* acc, const double* pot);

  /// The store position of the first particle whose force is not finite (-1: none).
  std::int64_t first_bad() const { return first_bad_; }
  /// IntegrationError naming that particle and t, if there is one.
  void throw_if_bad() const;
  /// Bounds of the next kick-drift's positions, over every run handed over (next_dt > 0).
  AxisBounds next_bounds() const;

 private:
  struct Buffers {
    std::vector<double> vel, pos;
    AxisBounds bounds;
  };
  ParticleStore& s_;
  const double h_, t_, next_h_, next_dt_;
  const bool kick_;
  std::vector<Buffers> buffers_;  // one per thread
  std::mutex bad_mutex_;
  std::int64_t first_bad_ = -1;
};

}  // namespace gravpipe
