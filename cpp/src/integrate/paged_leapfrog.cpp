// The leapfrog out of core (paged_leapfrog.hpp).
#include "gravpipe/paged_leapfrog.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "gravpipe/error.hpp"
#include "gravpipe/format_number.hpp"
#include "gravpipe/paged_kick.hpp"
#include "gravpipe/stopwatch.hpp"
#include "gravpipe/walk_runs.hpp"

namespace gravpipe {

namespace {

/// The fields a sort may carry, besides "key" and "index"; "id" only when it is not derived.
const char* const kCarried[] = {"pos", "vel", "mass", "id"};

void check_step(double dt, const char* what) {
  if (!(dt > 0) || !std::isfinite(dt))
    throw InputError(std::string(what) + ": must be > 0, got " + format_number(dt));
}

/// The streamed build's parameters: only those that shape the cells matter to it.
TreeParams build_params(const TreeParams& p) {
  TreeParams b = p;
  b.alpha = 0, b.precision = Precision::Double, b.local_expansion = false, b.isa = "auto", b.backend = "cpu";
  return b;
}

}  // namespace

PagedLeapfrog::PagedLeapfrog(ParticleStore& store, const PagedLeapfrogOptions& options, const PagedBudgetPlan& plan)
    : store_(store), options_(options), plan_(plan) {
  if (options_.tree.threads < 1) throw InputError("paged leapfrog: threads must be >= 1");
  if (options_.dt < 0 || !std::isfinite(options_.dt)) throw InputError("dt: must be > 0");
  if (options_.kick_block < 1) throw InputError("leapfrog on pages: block must be >= 1");
}

PagedLeapfrog::~PagedLeapfrog() = default;

std::vector<std::string> PagedLeapfrog::carried() const {
  std::vector<std::string> c;
  for (const char* f : kCarried)
    if (std::string(f) != "id" || store_.derivation("id").empty()) c.emplace_back(f);
  return c;
}

std::optional<double> PagedLeapfrog::prepared_dt() const {
  if (!next_bounds_) return std::nullopt;
  return next_bounds_->dt;
}

std::uint64_t PagedLeapfrog::keep_free() const {
  const TreeParams& p = options_.tree;
  return options_.keep_free ? *options_.keep_free : tree_keep_free(store_.size(), p.threads, p.n_crit, p.n_leaf);
}

void PagedLeapfrog::reset() {
  tree_.reset();
  built_.reset();
  sorted_ = have_forces_ = false;
  next_bounds_.reset();
  bounds_.reset();
  presorted_.reset();
}

void PagedLeapfrog::restart(const CheckpointState& state) {
  reset();
  if (const auto it = state.i64.find("steps"); it != state.i64.end() && !it->second.empty()) steps_ = it->second[0];
  if (const auto it = state.f64.find("grid_origin"); it != state.f64.end() && !it->second.empty())
    origin_ = it->second[0];
  sorted_ = have_forces_ = true;  // the state after forces(), as it was written
}

void PagedLeapfrog::set_time(double t) {
  if (!std::isfinite(t)) throw InputError("t: must be finite");
  origin_ = t, steps_ = 0;
}

CheckpointState PagedLeapfrog::checkpoint() const {
  CheckpointState c;
  c.i64["steps"] = {steps_};
  c.f64["grid_origin"] = {origin_};
  return c;
}

// ---- traffic -----------------------------------------------------------------------------

void PagedLeapfrog::begin_traffic(PagedStepReport&) {
  if (traffic_started_) return;
  traffic_started_ = true;
  traffic_before_ = traffic_mark_ = store_.counters();
  if (observer_) observer_("");
}

void PagedLeapfrog::end_stage(PagedStepReport& r, const std::string& stage, std::int64_t cells_read,
                              std::int64_t cells_written) {
  const StoreCounters now = store_.counters();
  auto it = std::find_if(r.stage_bytes.begin(), r.stage_bytes.end(),
                         [&](const PagedStageBytes& s) { return s.stage == stage; });
  if (it == r.stage_bytes.end()) it = r.stage_bytes.insert(r.stage_bytes.end(), PagedStageBytes{stage, 0, 0});
  it->read += now.bytes_read - traffic_mark_.bytes_read + cells_read;
  it->written += now.bytes_written - traffic_mark_.bytes_written + cells_written;
  traffic_mark_ = now;
  if (observer_) observer_(stage);
}

void PagedLeapfrog::finish_traffic(PagedStepReport& r) {
  // up to where the last stage ended, so that the stages' traffic adds up to it
  const StoreCounters after = traffic_started_ ? traffic_mark_ : store_.counters();
  r.bytes_read = after.bytes_read - traffic_before_.bytes_read + r.cell_bytes_read;
  r.bytes_written = after.bytes_written - traffic_before_.bytes_written + r.cell_bytes_written;
  traffic_started_ = false;
}

void PagedLeapfrog::add_to_totals(const PagedStepReport& r) {
  totals_.kick_drift += r.kick_drift, totals_.sort += r.sort, totals_.build += r.build;
  totals_.moments += r.moments, totals_.walk_forces += r.walk_forces;
  totals_.bytes_read += r.bytes_read, totals_.bytes_written += r.bytes_written;
  totals_.steps += 1;
  totals_.interactions += r.tree.pp_interactions + r.tree.pc_interactions;
  counters_.steps += 1;
  counters_.particle_steps += static_cast<std::uint64_t>(store_.size());
  counters_.seconds_host += r.kick_drift + r.sort;
}

// ---- the stages -----------------------------------------------------------------------------

std::int64_t PagedLeapfrog::presort_run() const {
  std::int64_t per_page = 1;
  for (const char* f : {"pos", "vel", "mass", "id", "index", "key"})
    per_page = std::max(per_page, store_.particles_per_page(f));
  const std::int64_t run = (options_.presort_run + per_page - 1) / per_page * per_page;
  // its buffers come out of the room the tree's cell cache takes: at most an eighth of it
  // (N = 1e7 at 1/10: 4.5 of ~65 MB); a budget near the least makes its runs in the sort
  if (run >= store_.size() || SortRunWriter::budget_bytes(run) > plan_.headroom / 8) return 0;
  return run;
}

std::optional<PresortedRuns> PagedLeapfrog::usable_presorted(double dt) {
  std::optional<Presorted> p = std::move(presorted_);
  presorted_.reset();
  if (!p || p->runs.dt != dt || p->carried != carried() || p->writes != store_.user_writes()) return std::nullopt;
  return p->runs;
}

AxisBounds PagedLeapfrog::position_bounds() {
  if (!bounds_) {  // exact: a pass over the positions when the last sort's are not known
    constexpr std::int64_t kChunk = std::int64_t{1} << 20;
    AxisBounds b;
    std::vector<double> pos;
    for (std::int64_t at = 0; at < store_.size(); at += kChunk) {
      const std::int64_t n = std::min(kChunk, store_.size() - at);
      pos.resize(static_cast<std::size_t>(3 * n));
      store_.read("pos", at, n, pos.data());
      b.add(axis_bounds({pos.data(), pos.size()}, 1));
    }
    bounds_ = b;
  }
  return *bounds_;
}

PagedSortReport PagedLeapfrog::sort_store(const std::optional<SortKickDrift>& kick_drift,
                                          const std::optional<AxisBounds>& drift_origin,
                                          const std::optional<PresortedRuns>& presorted) {
  tree_.reset();  // its cells' budget goes back first
  built_.reset();
  const TreeParams& p = options_.tree;
  std::unique_ptr<StreamedTreeBuild> build;
  if (options_.tree_in_sort) build = std::make_unique<StreamedTreeBuild>(store_, build_params(p));
  StoreSortConfig config{carried(), plan_.sort_buffer, p.threads};
  // with the tree built in the sort, the merge's keys go to the build and not to the disk:
  // the store makes them again from the positions when they are read (derive_curve_keys)
  config.write_keys = build == nullptr;
  config.drift_origin = drift_origin;
  config.presorted = presorted;
  config.kick_drift = kick_drift;
  config.observer = build.get();
  PagedSortReport r;
  r.ran = true;
  r.stats = sort_store_by_curve(store_, config);
  sorted_ = !kick_drift || r.stats.kick_drift_applied;
  if (sorted_ && config.write_keys)
    store_.forget_derivation("key");
  else if (sorted_)
    store_.derive_curve_keys("key", "pos", r.stats.frame, p.threads);
  if (build) {
    r.tree_tried = true;
    r.tree_complete = build->complete();
    r.tree_declined = build->declined();
    r.seconds_tree_count = build->seconds_count();
    r.seconds_tree_build = build->seconds_build();
    r.tree_charged = build->charged();
    if (build->complete() && sorted_) built_ = std::move(build), built_writes_ = store_.user_writes();
  }
  if (sorted_) bounds_ = r.stats.bounds;
  return r;
}

const PagedSortReport& PagedLeapfrog::sort() {
  sort_report_ = sort_store(std::nullopt, std::nullopt, std::nullopt);
  return sort_report_;
}

std::optional<AxisBounds> PagedLeapfrog::tree_forces(PagedStepReport& r, const std::optional<ClosingKick>& closing,
                                                     bool presort) {
  const TreeParams& p = options_.tree;
  tree_.reset();
  have_forces_ = false;  // until this evaluation has written every particle's acc and pot
  presorted_.reset();
  const std::int64_t run = presort && closing && bounds_ ? presort_run() : 0;
  begin_traffic(r);
  const std::uint64_t keep = keep_free() + (run > 0 ? SortRunWriter::budget_bytes(run) : 0);
  // the cells the sort built, unless the store was written since
  std::unique_ptr<StreamedTreeBuild> built = std::move(built_);
  if (built && built_writes_ != store_.user_writes()) built.reset();
  if (!built) store_.materialize("key");  // the tree's build reads the keys' pages
  tree_ = built ? std::make_unique<PagedTree>(store_, p, keep, built->take(p))
                : std::make_unique<PagedTree>(store_, p, keep);
  if (options_.prefetch_runs >= 0) tree_->set_prefetch_runs(options_.prefetch_runs);
  PagedTree& tree = *tree_;
  r.build = tree.stats().seconds_build, r.moments = tree.stats().seconds_moments;
  const StoreCounters c0 = tree.cell_counters();
  end_stage(r, "build_moments", c0.bytes_read, c0.bytes_written);
  const auto t1 = Clock::now();
  std::optional<AxisBounds> next;
  if (closing) {
    PagedClosingKick kick(store_, closing->h, closing->t, tree.threads(), closing->next_h, closing->next_dt,
                          closing->kick);
    std::unique_ptr<WalkRuns> walk_runs;
    const std::vector<std::string> carried_now = carried();
    if (run > 0) {
      StoreSortConfig c{carried_now, 0, 1};
      c.kick_drift = SortKickDrift{closing->next_h, closing->next_dt, {}};
      walk_runs = std::make_unique<WalkRuns>(store_, c, run, with_room(*bounds_).cube());
    }
    tree.self_forces("acc", "pot", [&kick, &walk_runs](std::int64_t b, std::int64_t n, const double* acc,
                                                       const double* pot) {
      if (kick(b, n, acc, pot) && walk_runs) walk_runs->kicked(b, n);
    });
    std::optional<PresortedRuns> made;
    if (walk_runs) made = walk_runs->finish();
    kick.throw_if_bad();
    next = kick.next_bounds();
    if (made) presorted_ = Presorted{*made, carried_now, store_.user_writes()};
  } else {
    tree.self_forces("acc", "pot");
  }
  r.walk_forces = seconds_since(t1);
  r.tree = tree.stats();
  const StoreCounters c = tree.cell_counters();
  end_stage(r, "walk_forces", c.bytes_read - c0.bytes_read, c.bytes_written - c0.bytes_written);
  r.cell_bytes_read += c.bytes_read;
  r.cell_bytes_written += c.bytes_written;
  r.cell_cache_bytes = tree.cell_cache_bytes();
  r.cells = tree.cell_count();
  r.cell_counters = c;
  r.copy_peak_bytes = tree.copy_peak_bytes();
  r.prefetch_runs = tree.prefetch_runs();
  have_forces_ = true;
  return next;
}

const PagedStepReport& PagedLeapfrog::forces(std::optional<double> next_dt) {
  if (next_dt) check_step(*next_dt, "next_dt");
  PagedStepReport r;
  traffic_started_ = false;  // a call that threw may have left one open
  begin_traffic(r);
  const auto t0 = Clock::now();
  if (!sorted_) {
    r.sort_detail = sort_store(std::nullopt, std::nullopt, std::nullopt);
    end_stage(r, "sort");
  }
  r.sort = seconds_since(t0);
  if (!next_dt) {
    tree_forces(r, std::nullopt, false);
  } else {
    const double h = 0.5 * *next_dt;
    const std::optional<AxisBounds> b = tree_forces(r, ClosingKick{h, time(), h, *next_dt, false}, options_.presort);
    next_bounds_ = Prediction{*next_dt, *b};
  }
  finish_traffic(r);
  last_ = std::move(r);
  return last_;
}

const PagedStepReport& PagedLeapfrog::step(double dt) {
  check_step(dt, "dt");
  if (!have_forces_) forces(dt);  // checks them, and prepares this step's kick-drift and sort
  PagedStepReport r;
  traffic_started_ = false;
  begin_traffic(r);
  const double h = 0.5 * dt;
  const AxisBounds origin = position_bounds();  // the drift's start: the step's frame follows
  const std::optional<Prediction> predicted = std::move(next_bounds_);
  next_bounds_.reset();
  tree_.reset();
  sorted_ = false;  // the drift moves every particle
  const std::optional<PresortedRuns> presorted = usable_presorted(dt);
  if (predicted && predicted->dt == dt) {
    const auto t0 = Clock::now();
    r.sort_detail = sort_store(SortKickDrift{h, dt, predicted->bounds}, origin, presorted);
    r.sort = seconds_since(t0);
    r.kick_drift_in_sort = r.sort_detail.stats.kick_drift_applied;
    end_stage(r, "sort");
  }
  if (!r.kick_drift_in_sort) {
    auto t0 = Clock::now();
    paged_kick_drift(store_, h, dt, options_.kick_block);
    bounds_.reset();  // moved
    r.kick_drift = seconds_since(t0);
    end_stage(r, "kick_drift");
    t0 = Clock::now();
    const double missed = r.sort;  // a sort whose prediction missed counts with this one
    r.sort_detail = sort_store(std::nullopt, origin, std::nullopt);
    r.sort = missed + seconds_since(t0);
    end_stage(r, "sort");
  }
  // the closing kick rides on the walk, which also predicts the next step's bounds
  const std::optional<AxisBounds> b = tree_forces(r, ClosingKick{h, time() + dt, h, dt, true}, options_.presort);
  next_bounds_ = Prediction{dt, *b};
  if (options_.dt > 0 && dt == options_.dt)
    ++steps_;
  else
    origin_ = time() + dt, steps_ = 0;
  finish_traffic(r);
  add_to_totals(r);
  last_ = std::move(r);
  return last_;
}

// Whole steps up to the last grid point origin + k dt not after t; an off-grid t then takes
// one shortened step to t, which becomes the origin of the later steps (as
// LeapfrogIntegrator::evolve_to).
void PagedLeapfrog::evolve_to(double t) {
  const double dt = options_.dt;
  check_step(dt, "dt");
  const double want = (t - origin_) / dt;
  if (!std::isfinite(want)) throw InputError("evolve_to: t must be finite");
  const double whole = std::round(want);
  const bool on_grid = std::abs(want - whole) <= 1e-9 * std::max(1.0, std::abs(whole));
  const auto target = static_cast<std::int64_t>(on_grid ? whole : std::floor(want));
  if (on_grid ? target < steps_ : t < time())
    throw InputError("evolve_to: t = " + std::to_string(t) + " is before the current time " + std::to_string(time()));
  const auto t_start = Clock::now();
  while (steps_ < target) step(dt);  // each step of dt counts one on the grid
  if (!on_grid) {
    step(t - time());  // off the grid: its end is the new origin
    origin_ = t, steps_ = 0;
  }
  counters_.seconds_total += seconds_since(t_start);
}

double PagedLeapfrog::diagnostic_potential(double theta, Precision precision) {
  if (!sorted_)
    throw std::runtime_error(
        "diagnostic_potential: the store is not in curve order for the current positions (evaluate forces first)");
  const auto t0 = Clock::now();
  tree_.reset();  // the run's cells go back to the budget first
  store_.materialize("key");  // the tree's build reads the keys' pages
  TreeParams p = options_.tree;
  p.theta = theta, p.precision = precision;
  {
    PagedTree tree(store_, p, keep_free());
    tree.self_forces("", "pot_check");
  }
  return seconds_since(t0);
}

}  // namespace gravpipe
