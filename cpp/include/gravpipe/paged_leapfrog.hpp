// The leapfrog out of core (Salmon & Warren, seed 004): kick-drift-kick steps of the treecode
// over particles in the pages of a ParticleStore, in curve order, within the store's memory
// budget (paged_budget.hpp). For the same particles, parameters and thread count every step
// is LeapfrogIntegrator's (leapfrog.hpp) over the in-core Tree, bit for bit.
//
// A step passes over the pages as few times as it can (each pass reads or writes every
// particle at the disk's ~1 GB/s):
//   * the closing kick rides on the walk (PagedClosingKick, paged_kick.hpp), which also
//     predicts the bounds of the positions the next step's kick-drift will give;
//   * a next step of the same dt kicks and drifts inside its external sort's first pass,
//     keyed in the predicted frame (store_sort.hpp; a miss leaves the store as it was and the
//     step makes its separate kick-drift pass);
//   * better still, the walk makes the next sort's runs itself (presort, walk_runs.hpp) in
//     the step's frame (curve_order.hpp, step_frame), and the next sort only merges;
//   * the sort builds the tree's cells as it writes the particles (tree_in_sort,
//     streamed_tree_build.hpp), and leaves the keys out of the disk: the store reads them as
//     the curve keys of the positions in the sort's frame (ParticleStore::derive_curve_keys);
//   * ids that are the caller's index plus a constant are read from the index
//     (ParticleStore::derive_from, set up by whoever fills the store): the sort leaves them.
// A run's first forces do the same for its first step when they are told its dt. None of it
// changes a bit of the result; the options only move the disk's work in time.
//
// The integrator holds what one step prepares for the next (the predicted bounds, the runs,
// the cells); a write to the store from outside (ParticleStore::user_writes) drops what it
// would make stale. The per-particle state is the store's fields: "acc" and "pot" of the
// last evaluation, "index" (the caller's order), "key"; a checkpoint streams them, and
// checkpoint()/restart() carry the step count and the grid origin.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gravpipe/curve_order.hpp"
#include "gravpipe/integrator.hpp"
#include "gravpipe/paged_budget.hpp"
#include "gravpipe/paged_tree.hpp"
#include "gravpipe/particle_store.hpp"
#include "gravpipe/store_sort.hpp"
#include "gravpipe/streamed_tree_build.hpp"

namespace gravpipe {

/// Particles of a run the walk makes for the next sort: ~4 MB of the budget.
constexpr std::int64_t kPresortRun = std::int64_t{1} << 15;

/// What a run (or a benchmark) may vary. Only `dt` and `tree` change results; the others
/// move the disk's work in time.
struct PagedLeapfrogOptions {
  double dt = 0;   // evolve_to's step (its grid); 0: steps only through step(dt)
  TreeParams tree;  // eps, G, theta, ..., threads (> 0), precision, isa; alpha must be 0
  /// The walk makes the next sort's runs, of presort_run particles (rounded up to whole pages).
  bool presort = true;
  std::int64_t presort_run = kPresortRun;
  /// The sort builds the tree's cells as it writes the particles.
  bool tree_in_sort = true;
  /// Particles of a block of the separate kick-drift pass.
  std::int64_t kick_block = kKickBlock;
  /// Bytes the tree's cell cache leaves to the walk's copied blocks (default tree_keep_free).
  std::optional<std::uint64_t> keep_free;
  /// Runs of groups the walk's prefetch loads ahead of each thread (-1: PagedTree's default).
  int prefetch_runs = -1;
};

/// One stage's page traffic (particle and cell pages).
struct PagedStageBytes {
  std::string stage;  // "kick_drift", "sort", "build_moments", "walk_forces"
  std::int64_t read = 0, written = 0;
};

/// The details of a step's sort.
struct PagedSortReport {
  bool ran = false;
  StoreSortStats stats;
  bool tree_tried = false;  // a build rode on it (tree_in_sort)
  bool tree_complete = false;
  std::string tree_declined;
  double seconds_tree_count = 0, seconds_tree_build = 0;
  std::uint64_t tree_charged = 0;
};

/// Wall seconds of one step (or of forces()) by stage, and its page traffic.
struct PagedStepReport {
  double kick_drift = 0, sort = 0, build = 0, moments = 0, walk_forces = 0;
  bool kick_drift_in_sort = false;  // the kick-drift ran inside the sort (its seconds in `sort`)
  std::int64_t bytes_read = 0, bytes_written = 0;            // particle and cell pages together
  std::int64_t cell_bytes_read = 0, cell_bytes_written = 0;  // ... of which the cells'
  std::uint64_t cell_cache_bytes = 0;
  std::int64_t cells = 0;
  std::vector<PagedStageBytes> stage_bytes;  // in the order the stages ran; they add up
  PagedSortReport sort_detail;
  TreeStats tree;  // the walk's tree
  StoreCounters cell_counters;
  std::uint64_t copy_peak_bytes = 0;
  int prefetch_runs = 0;  // the walk's prefetch depth
  double total() const { return kick_drift + sort + build + moments + walk_forces; }
};

/// Sums over the steps since construction.
struct PagedStepTotals {
  double kick_drift = 0, sort = 0, build = 0, moments = 0, walk_forces = 0;
  std::int64_t bytes_read = 0, bytes_written = 0;
  std::uint64_t steps = 0, interactions = 0;
};

class PagedLeapfrog final : public Integrator {
 public:
  /// The leapfrog over `store` (fields paged_leapfrog_fields()), whose sort buffer and
  /// headroom `plan` gives. The store is filled afterwards: reset() once it is.
  PagedLeapfrog(ParticleStore& store, const PagedLeapfrogOptions& options, const PagedBudgetPlan& plan);
  ~PagedLeapfrog() override;

  // ---- Integrator --------------------------------------------------------------------
  /// Whole steps of options().dt to t; off the grid one shortened step to t, which becomes
  /// the grid's origin (LeapfrogIntegrator::evolve_to). First forces if none are evaluated.
  void evolve_to(double t) override;
  double time() const override { return origin_ + static_cast<double>(steps_) * options_.dt; }
  double grid_origin() const override { return origin_; }
  /// "steps" and "grid_origin"; the per-particle state is the store's.
  CheckpointState checkpoint() const override;
  IntegratorCounters counters() const override { return counters_; }

  // ---- the pieces ----------------------------------------------------------------------
  /// The store's particles were (re)written: nothing known of them holds any more.
  void reset();
  /// The store holds a checkpoint's particles (its curve order, the forces of its positions):
  /// continue from checkpoint()'s steps and grid origin (absent: 0 and the current origin).
  void restart(const CheckpointState& state);
  /// Sets the time: the grid's origin, no steps taken from it.
  void set_time(double t);
  /// Sort (if needed), build, moments and the walk: self-gravity into "acc" and "pot".
  /// next_dt (> 0): the step that follows: the walk also checks every force, predicts that
  /// step's kick-drift and makes its sort's runs, kicking nothing.
  const PagedStepReport& forces(std::optional<double> next_dt = std::nullopt);
  /// One kick-drift-kick step of dt (off the grid unless dt is options().dt).
  const PagedStepReport& step(double dt);
  /// A plain external sort into curve order (with tree_in_sort, the cells built for the
  /// next forces).
  const PagedSortReport& sort();
  /// The potential of every particle from a second tree (opening angle `theta`, `precision`
  /// list kernels, the run's other parameters) into "pot_check", the run's forces kept; the
  /// store must be in curve order. Returns its seconds.
  double diagnostic_potential(double theta, Precision precision);

  /// Called on the caller's thread where a step's traffic starts ("") and where each stage
  /// ends (its name): for measurements of the whole process around the stages.
  void set_stage_observer(std::function<void(const std::string&)> observer) { observer_ = std::move(observer); }

  PagedLeapfrogOptions& options() { return options_; }
  const PagedBudgetPlan& plan() const { return plan_; }
  const PagedStepReport& last() const { return last_; }
  const PagedStepTotals& totals() const { return totals_; }
  /// The fields the sort carries: "id" too unless the store derives it.
  std::vector<std::string> carried() const;
  /// Whether the store is in curve order for the current positions, with their forces.
  bool sorted() const { return sorted_; }
  bool has_forces() const { return sorted_ && have_forces_; }
  /// What the last walk prepared for the next step: its dt (none: nothing), and whether runs.
  std::optional<double> prepared_dt() const;
  bool prepared_runs() const { return presorted_.has_value(); }

 private:
  struct Prediction {
    double dt;
    AxisBounds bounds;
  };
  struct Presorted {
    PresortedRuns runs;
    std::vector<std::string> carried;
    std::uint64_t writes;
  };
  struct ClosingKick {
    double h, t, next_h, next_dt;
    bool kick;
  };
  PagedSortReport sort_store(const std::optional<SortKickDrift>& kick_drift,
                             const std::optional<AxisBounds>& drift_origin,
                             const std::optional<PresortedRuns>& presorted);
  std::optional<AxisBounds> tree_forces(PagedStepReport& r, const std::optional<ClosingKick>& closing, bool presort);
  std::int64_t presort_run() const;
  std::optional<PresortedRuns> usable_presorted(double dt);
  AxisBounds position_bounds();
  std::uint64_t keep_free() const;
  /// A step's traffic: begin() where it starts, stage() where each stage ends.
  void begin_traffic(PagedStepReport& r);
  void end_stage(PagedStepReport& r, const std::string& stage, std::int64_t cells_read = 0,
                 std::int64_t cells_written = 0);
  void finish_traffic(PagedStepReport& r);
  void add_to_totals(const PagedStepReport& r);

  ParticleStore& store_;
  PagedLeapfrogOptions options_;
  PagedBudgetPlan plan_;
  double origin_ = 0;
  std::int64_t steps_ = 0;
  bool sorted_ = false, have_forces_ = false;
  std::optional<Prediction> next_bounds_;  // the bounds a kick-drift of dt will give
  std::optional<AxisBounds> bounds_;       // of the positions, as the last sort found them
  std::optional<Presorted> presorted_;     // the next sort's runs, made in the last walk
  std::unique_ptr<StreamedTreeBuild> built_;  // the cells the last sort built
  std::uint64_t built_writes_ = 0;
  std::unique_ptr<PagedTree> tree_;        // the last evaluation's tree (its cells in the budget)
  bool traffic_started_ = false;
  StoreCounters traffic_mark_, traffic_before_;
  PagedSortReport sort_report_;
  PagedStepReport last_;
  PagedStepTotals totals_;
  IntegratorCounters counters_;
  std::function<void(const std::string&)> observer_;
};

}  // namespace gravpipe
