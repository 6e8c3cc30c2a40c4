// A force evaluation over runs of consecutive groups (tree_runs.hpp). A run walks the top of
// the tree once (walk_run), puts the shared cells far from it into one local expansion and
// evaluates the other shared cells on all its particles at once: the shared part. Each
// member group then walks on from the run's frontier and evaluates its own list: the part
// per group. Particles are read through accessors, a block per run of sinks and per opened
// leaf of sources.
#include "tree_runs.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <deque>
#include <atomic>
#include <chrono>
#include <exception>
#include <utility>

#include "gravpipe/error.hpp"
#include "gravpipe/stopwatch.hpp"
#include "gravpipe/paged_cells.hpp"
#include "gravpipe/paged_particles.hpp"
#include "paged_graft_view.hpp"
#include "store_results.hpp"
#include "tree_local.hpp"

namespace gravpipe {

namespace {

/// Thread-private scratch of the group loop, reused from run to run.
struct GroupScratch {
  LocalExpansion local;
  InteractionList shared, list;
  std::vector<std::int32_t> frontier;
  GatheredList shared_gathered, gathered;
  GroupSinks run_sinks, sinks;
  std::size_t run_terms = 0;  // the current run's shared cells, counted in each member's cost
};

/// Shared cells at least this many run radii (half-diagonals of the run's box) from its
/// centre enter the run's local expansion instead of the lists: the expansion's error
/// there is ~(1/kLocalRadii)^(kLocalOrder) of those cells' pull at the run's corners.
/// With order 4, 5 radii leave the errors of a Plummer sphere, a uniform cube, a plane
/// and a line as they are (4 radii: the cube's p99 +20%, 3: the line's x2; order 3
/// needed 8-10 radii on the line).
constexpr double kLocalRadii = 5.0;

/// Move the cells of `cells[0, n)` that lie beyond r2_min from g into the expansion;
/// returns how many stay (compacted to the front).
template <class Cells>
std::size_t expand_far(std::int32_t* cells, std::size_t n, const Cells& t, const double g[3], double r2_min,
                       double eps2, bool quadrupole, LocalExpansion& local) {
  std::size_t kept = 0;
  for (std::size_t q = 0; q < n; ++q) {
    const std::int32_t c = cells[q];
    const CellTerms terms = t.terms(c);
    const double dx = terms.cx - g[0], dy = terms.cy - g[1], dz = terms.cz - g[2];
    if (dx * dx + dy * dy + dz * dz >= r2_min)
      local.add_cell(terms, eps2, quadrupole);
    else
      cells[kept++] = c;
  }
  return kept;
}

std::size_t padded_count(std::size_t n, Isa isa) {
  const std::size_t pad = tree_i_pad(isa);
  return (n + pad - 1) / pad * pad;
}

void centre_of(const Group& g, double c[3]) {
  for (int a = 0; a < 3; ++a) c[a] = 0.5 * (g.lo[a] + g.hi[a]);
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// The group's i-particles (read from `sinks`, a block that holds them) as the kernels read
/// them, padded to the ISA's tree_i_pad: float64 coordinates (double) or float32 ones relative to
/// `centre` (mixed). Padding lanes repeat the first sink with its exclusion (their sums are
/// dropped): excluding nothing, they met that sink's own particle at r = 0 without
/// softening, which raised FE_INVALID in the host.
void set_sinks(GroupSinks& s, const ParticleBlock& sinks, Span<const std::int64_t> i_exclude, bool exclude_self,
               const Group& g, bool mixed, const double centre[3], Isa isa) {
  const auto n = static_cast<std::size_t>(g.i_end - g.i_begin);
  const std::size_t padded = padded_count(n, isa);
  s.exclude.resize(padded);
  for (auto* v : {&s.x, &s.y, &s.z}) v->resize(mixed ? 0 : padded);
  for (auto* v : {&s.xf, &s.yf, &s.zf}) v->resize(mixed ? padded : 0);
  for (std::size_t q = 0; q < padded; ++q) {
    const std::int64_t i = g.i_begin + static_cast<std::int64_t>(q < n ? q : 0);
    if (mixed) {
      s.xf[q] = static_cast<float>(sinks.x(i) - centre[0]);
      s.yf[q] = static_cast<float>(sinks.y(i) - centre[1]);
      s.zf[q] = static_cast<float>(sinks.z(i) - centre[2]);
    } else {
      s.x[q] = sinks.x(i), s.y[q] = sinks.y(i), s.z[q] = sinks.z(i);
    }
    s.exclude[q] = exclude_self ? i : i_exclude[i];
  }
}

/// Move the shared cells beyond kLocalRadii run radii from the run's centre into w.local
/// (reset about that centre); they leave w.shared. Returns how many moved.
template <class Sources, class Sinks, class Results, class Cells, class Reader>
std::size_t expand_shared(const GroupEvaluation<Sources, Sinks, Results, Cells>& e, const Reader& cells,
                          const Group& run, const double centre[3], GroupScratch& w) {
  InteractionList& l = w.shared;
  const std::size_t before = l.n_near + l.n_far;
  w.local.reset(centre);
  if (!e.params.local_expansion) return 0;
  const double eps2 = e.params.eps * e.params.eps, kappa = kLocalRadii;
  const double hx = run.hi[0] - run.lo[0], hy = run.hi[1] - run.lo[1], hz = run.hi[2] - run.lo[2];
  const double r2_min = kappa * kappa * 0.25 * (hx * hx + hy * hy + hz * hz);
  l.n_near = expand_far(l.near_buf.data(), l.n_near, cells, centre, r2_min, eps2, e.params.quadrupole, w.local);
  l.n_far = expand_far(l.far_buf.data(), l.n_far, cells, centre, r2_min, eps2, false, w.local);
  return before - l.n_near - l.n_far;
}

/// The shared part of a run prepared for evaluation: its top walked once, the cells far
/// from it moved into w.local, the others gathered in w.shared_gathered relative to the
/// run's centre (they are all beyond their opening radius from its box), and the run's
/// i-particles in w.run_sinks. Returns how many cells went into the local expansion.
template <class Sources, class Sinks, class Results, class Cells, class Reader>
std::size_t prepare_shared(const GroupEvaluation<Sources, Sinks, Results, Cells>& e, const Reader& cells,
                           const Group& run, Span<const Group> members, const ParticleBlock& sinks, GroupScratch& w,
                           GroupWork& work) {
  const MacParams mac{e.params.G, e.params.alpha, e.params.quadrupole};
  const auto t0 = Clock::now();
  walk_run(cells, run, members, mac, w.shared, w.frontier);
  work.mac_tests += w.shared.mac_tests;
  const auto t1 = Clock::now();
  work.seconds_walk += seconds_between(t0, t1);
  double centre[3];
  centre_of(run, centre);
  const auto run_n = static_cast<std::size_t>(run.i_end - run.i_begin);
  w.run_terms = w.shared.n_near + w.shared.n_far;
  const std::size_t n_expanded = expand_shared(e, cells, run, centre, w);
  w.shared_gathered.gather(w.shared, cells, e.sources, e.params.quadrupole, 0, 0, e.params.precision, centre);
  set_sinks(w.run_sinks, sinks, e.i_exclude, e.exclude_self, run, e.params.precision == Precision::Mixed, centre, e.isa);
  work.pc_local += run_n * n_expanded;
  work.pc += run_n * w.run_terms;
  work.seconds_evaluate += seconds_since(t1);  // gathering counts as evaluation, as on the CPU
  return n_expanded;
}

/// The shared part of a run on the CPU: prepared, then its list evaluated on all the run's
/// particles into w.run_sinks, and the local expansion added there. `sinks` holds the
/// run's i-particles.
template <class Sources, class Sinks, class Results, class Cells, class Reader>
void evaluate_shared(const GroupEvaluation<Sources, Sinks, Results, Cells>& e, const Reader& cells, const Group& run,
                     Span<const Group> members, const ParticleBlock& sinks, GroupScratch& w, GroupWork& work) {
  const double eps2 = e.params.eps * e.params.eps;
  const std::size_t n_expanded = prepare_shared(e, cells, run, members, sinks, w, work);
  const auto t1 = Clock::now();
  const auto run_n = static_cast<std::size_t>(run.i_end - run.i_begin);
  evaluate_group(w.shared_gathered, w.run_sinks, padded_count(run_n, e.isa), eps2, e.isa);
  GroupSinks& rs = w.run_sinks;
  if (n_expanded > 0)
    for (std::size_t q = 0; q < run_n; ++q) {
      const std::int64_t i = run.i_begin + static_cast<std::int64_t>(q);
      w.local.evaluate(sinks.x(i), sinks.y(i), sinks.z(i), rs.ax[q], rs.ay[q], rs.az[q], rs.pot[q]);
    }
  work.seconds_evaluate += seconds_since(t1);
}

/// Member group g prepared for evaluation: its walk on from the run's frontier, its own
/// list gathered in w.gathered and its i-particles in w.sinks, relative to its centre.
template <class Sources, class Sinks, class Results, class Cells, class Reader>
void prepare_member(const GroupEvaluation<Sources, Sinks, Results, Cells>& e, const Reader& cells, const Group& g,
                    const ParticleBlock& sinks, GroupScratch& w, GroupWork& work) {
  const MacParams mac{e.params.G, e.params.alpha, e.params.quadrupole};
  const auto t0 = Clock::now();
  walk_group(cells, g, mac, w.list, {w.frontier.data(), w.frontier.size()});
  const auto t1 = Clock::now();
  work.seconds_walk += seconds_between(t0, t1);
  double centre[3];
  centre_of(g, centre);
  w.gathered.gather(w.list, cells, e.sources, e.params.quadrupole, g.ex_begin, g.ex_end, e.params.precision, centre);
  set_sinks(w.sinks, sinks, e.i_exclude, e.exclude_self, g, e.params.precision == Precision::Mixed, centre, e.isa);
  const auto n = static_cast<std::size_t>(g.i_end - g.i_begin);
  work.pruned_opened += w.list.pruned_opened;
  work.pp += n * w.gathered.n_particles();
  work.pc += n * w.gathered.n_cells();
  work.mac_tests += w.list.mac_tests;
  work.seconds_evaluate += seconds_since(t1);
}

/// Interactions per i-particle of a member (its run's shared ones included), for the cost.
std::int64_t member_terms(const GroupScratch& w) {
  return static_cast<std::int64_t>(w.run_terms + w.gathered.n_particles() + w.gathered.n_cells());
}

/// The part of member group g on the CPU: prepared, its own list evaluated, the run's
/// shared sums (w.run_sinks) added, and the caller-ordered results written.
template <class Sources, class Sinks, class Results, class Cells, class Reader>
void evaluate_member(const GroupEvaluation<Sources, Sinks, Results, Cells>& e, const Reader& cells, const Group& run,
                     const Group& g, const ParticleBlock& sinks, GroupScratch& w, GroupWork& work) {
  const double eps2 = e.params.eps * e.params.eps, G = e.params.G;
  prepare_member(e, cells, g, sinks, w, work);
  const auto t1 = Clock::now();
  const auto n = static_cast<std::size_t>(g.i_end - g.i_begin);
  evaluate_group(w.gathered, w.sinks, padded_count(n, e.isa), eps2, e.isa);
  const GroupSinks &s = w.sinks, &rs = w.run_sinks;
  const auto at = static_cast<std::size_t>(g.i_begin - run.i_begin);
  for (std::size_t q = 0; q < n; ++q)
    e.results.put(g.i_begin + static_cast<std::int64_t>(q), G * (s.ax[q] + rs.ax[at + q]),
                  G * (s.ay[q] + rs.ay[at + q]), G * (s.az[q] + rs.az[at + q]), -G * (s.pot[q] + rs.pot[at + q]));
  if (e.results.wants_cost()) {
    const std::int64_t terms = member_terms(w);
    for (std::size_t q = 0; q < n; ++q) e.results.put_cost(g.i_begin + static_cast<std::int64_t>(q), terms);
  }
  work.seconds_evaluate += seconds_since(t1);
}

/// Groups [first, last): the shared part once, then each member's own.
template <class Sources, class Sinks, class Results, class Cells, class Reader>
void evaluate_run(const GroupEvaluation<Sources, Sinks, Results, Cells>& e, const Reader& cells,
                  Span<const Group> members, GroupScratch& w, GroupWork& work) {
  const Group run = run_group(members);
  e.results.begin_run(run);
  const ParticleBlock sinks = e.sinks.block(run.i_begin, run.i_end);
  evaluate_shared(e, cells, run, members, sinks, w, work);
  for (const Group& g : members) evaluate_member(e, cells, run, g, sinks, w, work);
  e.results.end_run(run);
  // no block of this run is live any more: a paged accessor unpins and frees them here
  e.sources.release_thread();
  e.sinks.release_thread();
}

// ---- lists on the GPU (GroupEvaluation::device) ------------------------------------------
//
// Each thread walks and gathers its runs as above but packs every list (a run's shared
// list on all its particles, each member's own) into its ListBatch; the local expansion is
// evaluated here at packing time. A run never straddles two batches, so that once a batch
// returns its runs are complete: shared + local + own sums are combined and written then.
// The batches are the device's (one a slot, in page-locked memory), so nothing is copied
// between packing and sending. A batch is sent when it holds kBatchBytes; the thread packs
// the other slot's while it computes, collecting that slot's last batch first.

/// Packed bytes at which a thread sends its batch: ~100 groups of N = 1e7 Plummer lists,
/// enough blocks per launch with one launch in flight per thread.
constexpr std::size_t kBatchBytes = std::size_t{16} << 20;

/// What combining a run needs once its batch returns.
struct PendingMember {
  std::int64_t i_begin = 0;
  std::size_t n = 0, sink = 0;  // its i-particles and its first one's sink in the batch
  std::int64_t terms = 0;       // interactions per i-particle, for the cost
};
struct PendingRun {
  Group run;
  std::size_t shared_sink = 0;  // the run's first i-particle among the shared job's sinks
  std::size_t local = 0;        // its local-expansion sums: PendingRuns::local[local + 4 q + (0..3)]
  std::size_t members_begin = 0, members_end = 0;  // in PendingRuns::members
};
struct PendingRuns {
  std::vector<PendingRun> runs;
  std::vector<PendingMember> members;
  std::vector<double> local;
  void clear() { runs.clear(), members.clear(), local.clear(); }
};

/// One thread's side of the device path: the batch being packed and the batches in flight.
struct DeviceScratch {
  int lane = 0;
  int slot = 0;                // the slot whose batch is being packed
  ListBatch* batch = nullptr;  // that slot's batch (CudaTreeLists::batch)
  PendingRuns packing;
  std::array<PendingRuns, CudaTreeLists::kSlots> in_flight;  // by slot
  std::deque<int> order;                                     // slots in flight, oldest first
};

/// Pack the shared part of a run: its list on all the run's particles, and the local
/// expansion's sums (evaluated now, from zero).
template <class Sources, class Sinks, class Results, class Cells, class Reader>
void pack_shared(const GroupEvaluation<Sources, Sinks, Results, Cells>& e, const Reader& cells, const Group& run,
                 Span<const Group> members, const ParticleBlock& sinks, GroupScratch& w, DeviceScratch& d,
                 GroupWork& work) {
  const std::size_t n_expanded = prepare_shared(e, cells, run, members, sinks, w, work);
  const auto t1 = Clock::now();
  const auto run_n = static_cast<std::size_t>(run.i_end - run.i_begin);
  const std::size_t job = d.batch->add(w.shared_gathered, w.run_sinks, run_n);
  PendingRuns& p = d.packing;
  PendingRun r;
  r.run = run;
  r.shared_sink = static_cast<std::size_t>(d.batch->jobs[job].i_begin);
  r.local = p.local.size();
  r.members_begin = r.members_end = p.members.size();
  p.local.resize(r.local + kListResultWords * run_n, 0.0);
  if (n_expanded > 0)
    for (std::size_t q = 0; q < run_n; ++q) {
      const std::int64_t i = run.i_begin + static_cast<std::int64_t>(q);
      double* l = &p.local[r.local + kListResultWords * q];
      w.local.evaluate(sinks.x(i), sinks.y(i), sinks.z(i), l[0], l[1], l[2], l[3]);
    }
  p.runs.push_back(r);
  work.seconds_evaluate += seconds_since(t1);
}

/// Pack member group g's own list (after pack_shared of its run).
template <class Sources, class Sinks, class Results, class Cells, class Reader>
void pack_member(const GroupEvaluation<Sources, Sinks, Results, Cells>& e, const Reader& cells, const Group& g,
                 const ParticleBlock& sinks, GroupScratch& w, DeviceScratch& d, GroupWork& work) {
  prepare_member(e, cells, g, sinks, w, work);
  const auto t1 = Clock::now();
  const auto n = static_cast<std::size_t>(g.i_end - g.i_begin);
  const std::size_t job = d.batch->add(w.gathered, w.sinks, n);
  d.packing.members.push_back({g.i_begin, n, static_cast<std::size_t>(d.batch->jobs[job].i_begin), member_terms(w)});
  d.packing.runs.back().members_end = d.packing.members.size();
  work.seconds_evaluate += seconds_since(t1);
}

/// Write the runs of a returned batch: out holds its sums (kListResultWords per sink).
/// Each i-particle gets its own list's sums plus its run's (shared list + local expansion).
template <class Sources, class Sinks, class Results, class Cells>
void scatter_runs(const GroupEvaluation<Sources, Sinks, Results, Cells>& e, const PendingRuns& p, const double* out) {
  constexpr std::size_t W = kListResultWords;
  const double G = e.params.G;
  for (const PendingRun& r : p.runs) {
    e.results.begin_run(r.run);
    for (std::size_t k = r.members_begin; k < r.members_end; ++k) {
      const PendingMember& m = p.members[k];
      const auto at = static_cast<std::size_t>(m.i_begin - r.run.i_begin);
      for (std::size_t q = 0; q < m.n; ++q) {
        const double* own = out + W * (m.sink + q);
        const double* shared = out + W * (r.shared_sink + at + q);
        const double* local = &p.local[r.local + W * (at + q)];
        double sum[W];
        for (std::size_t c = 0; c < W; ++c) sum[c] = own[c] + (shared[c] + local[c]);
        e.results.put(m.i_begin + static_cast<std::int64_t>(q), G * sum[0], G * sum[1], G * sum[2], -G * sum[3]);
        if (e.results.wants_cost()) e.results.put_cost(m.i_begin + static_cast<std::int64_t>(q), m.terms);
      }
    }
    e.results.end_run(r.run);
  }
}

/// Wait for the thread's oldest batch in flight and write its runs.
template <class Sources, class Sinks, class Results, class Cells>
void collect_oldest(const GroupEvaluation<Sources, Sinks, Results, Cells>& e, DeviceScratch& d) {
  const int slot = d.order.front();
  const double* out = e.device->collect(d.lane, slot);
  d.order.pop_front();
  PendingRuns& p = d.in_flight[static_cast<std::size_t>(slot)];
  scatter_runs(e, p, out);
  p.clear();
}

/// Start packing into `slot`'s batch, first collecting the batch it still holds, if any
/// (the oldest in flight: slots are used in turn).
template <class Sources, class Sinks, class Results, class Cells>
void take_slot(const GroupEvaluation<Sources, Sinks, Results, Cells>& e, DeviceScratch& d, int slot) {
  if (e.device->busy(d.lane, slot)) collect_oldest(e, d);
  d.slot = slot;
  d.batch = &e.device->batch(d.lane, slot);
  d.batch->clear();
}

/// Send the packed batch (if any) and go on in the next slot.
template <class Sources, class Sinks, class Results, class Cells>
void send_batch(const GroupEvaluation<Sources, Sinks, Results, Cells>& e, DeviceScratch& d) {
  if (d.batch->n_jobs() == 0) return;
  const auto eps2 = static_cast<float>(e.params.eps * e.params.eps);  // as the CPU's mixed kernels round it
  e.device->submit(d.lane, d.slot, eps2);
  std::swap(d.in_flight[static_cast<std::size_t>(d.slot)], d.packing);  // keeps both capacities
  d.packing.clear();
  d.order.push_back(d.slot);
  take_slot(e, d, (d.slot + 1) % CudaTreeLists::kSlots);
}

/// Groups [first, last) packed into the thread's batch, which is sent once full.
template <class Sources, class Sinks, class Results, class Cells, class Reader>
void pack_run(const GroupEvaluation<Sources, Sinks, Results, Cells>& e, const Reader& cells,
              Span<const Group> members, GroupScratch& w, DeviceScratch& d, GroupWork& work) {
  const Group run = run_group(members);
  {
    const ParticleBlock sinks = e.sinks.block(run.i_begin, run.i_end);
    pack_shared(e, cells, run, members, sinks, w, d, work);
    for (const Group& g : members) pack_member(e, cells, g, sinks, w, d, work);
  }
  e.sources.release_thread();
  e.sinks.release_thread();
  if (d.batch->bytes() >= kBatchBytes) {
    const auto t0 = Clock::now();
    send_batch(e, d);
    work.seconds_evaluate += seconds_since(t0);
  }
}

/// One thread's runs with their lists on the GPU (e.device).
template <class Evaluation>
class DeviceRuns {
 public:
  DeviceRuns(const Evaluation& e, int thread) : e_(e), cells_(e.cells.reader()) { d_.lane = thread; }
  void begin() {
    e_.device->begin(d_.lane);
    d_.order.clear();
    take_slot(e_, d_, 0);
  }
  void run(Span<const Group> members, GroupWork& work) { pack_run(e_, cells_, members, w_, d_, work); }
  /// The last batch, then every batch still in flight, oldest first.
  void finish(GroupWork& work) {
    const auto t0 = Clock::now();
    send_batch(e_, d_);
    while (!d_.order.empty()) collect_oldest(e_, d_);
    work.seconds_evaluate += seconds_since(t0);
  }

 private:
  const Evaluation& e_;
  decltype(std::declval<const Evaluation&>().cells.reader()) cells_;  // this thread's
  GroupScratch w_;
  DeviceScratch d_;
};

}  // namespace

std::vector<std::pair<std::size_t, std::size_t>> make_runs(const std::vector<Group>& groups) {
  std::vector<std::pair<std::size_t, std::size_t>> runs;
  std::size_t first = 0;
  std::int64_t count = 0;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    const std::int64_t n = groups[k].i_end - groups[k].i_begin;
    if (k > first && count + n > kRunParticles) {
      runs.emplace_back(first, k);
      first = k, count = 0;
    }
    count += n;
  }
  if (first < groups.size()) runs.emplace_back(first, groups.size());
  return runs;
}

Group run_group(Span<const Group> members) {
  Group r = members[0];
  bool any_ex = members[0].ex_begin < members[0].ex_end;
  for (std::size_t k = 1; k < members.size(); ++k) {
    const Group& g = members[k];
    r.i_end = g.i_end;
    for (int a = 0; a < 3; ++a) r.lo[a] = std::min(r.lo[a], g.lo[a]), r.hi[a] = std::max(r.hi[a], g.hi[a]);
    if (g.ex_begin < g.ex_end) {
      r.ex_begin = any_ex ? std::min(r.ex_begin, g.ex_begin) : g.ex_begin;
      r.ex_end = any_ex ? std::max(r.ex_end, g.ex_end) : g.ex_end;
      any_ex = true;
    }
    if (g.a_min > 0) r.a_min = r.a_min > 0 ? std::min(r.a_min, g.a_min) : g.a_min;
  }
  return r;
}

GroupWork& GroupWork::operator+=(const GroupWork& o) {
  pp += o.pp, pc += o.pc, pc_local += o.pc_local, mac_tests += o.mac_tests, pruned_opened += o.pruned_opened;
  seconds_walk += o.seconds_walk, seconds_evaluate += o.seconds_evaluate;
  return *this;
}

namespace {

/// One thread's runs on the CPU kernels.
template <class Evaluation>
class CpuRuns {
 public:
  CpuRuns(const Evaluation& e, int /*thread*/) : e_(e), cells_(e.cells.reader()) {}
  void begin() {}
  void run(Span<const Group> members, GroupWork& work) { evaluate_run(e_, cells_, members, w_, work); }
  void finish(GroupWork&) {}

 private:
  const Evaluation& e_;
  decltype(std::declval<const Evaluation&>().cells.reader()) cells_;  // this thread's (a paged one holds its own pins)
  GroupScratch w_;
};

/// The runs of `groups` shared among `threads`, each thread's through its own Worker
/// (CpuRuns or DeviceRuns): begin(), run(members, work) for each of its runs in turn, then
/// finish(work). The first failure of any thread (a page that fails its checksum, a device
/// error) stops the others' remaining runs and is rethrown here.
template <class Worker, class Evaluation>
GroupWork share_runs(const Evaluation& e, const std::vector<Group>& groups, int threads) {
  const auto runs = make_runs(groups);
  const auto nr = static_cast<std::int64_t>(runs.size());
  // chunks of consecutive runs: a thread's next run is the curve's next, on pages near its
  // last; ~32 chunks per thread keep the threads' ends balanced. Side by side (out of core),
  // one run at a time: the threads read one neighbourhood of pages together, and the cache
  // holds it once (N = 1e7 at 1/10 on the scratch disk: the walk's reads 2.25 -> 1.99 GB a
  // step, its stalls 0.42 -> 0.16 thread-s, the step 0.2-0.3 s shorter in 5 of 5 rounds).
  // Results do not depend on the schedule: each run is one thread's, summed in a fixed order.
  const std::int64_t chunk = e.side_by_side ? 1 : std::max<std::int64_t>(1, nr / (32 * std::max(1, threads)));
  GroupWork total;
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  auto record = [&] {  // inside a catch block
#pragma omp critical(gravpipe_group_error)
    if (!error) error = std::current_exception();
    failed = true;
  };
#pragma omp parallel num_threads(threads)
  {
    GroupWork mine;
    Worker worker(e, omp_get_thread_num());
    try {
      worker.begin();
    } catch (...) {
      record();
    }
#pragma omp for schedule(dynamic, chunk)
    for (std::int64_t r = 0; r < nr; ++r) {
      if (failed.load(std::memory_order_relaxed)) continue;
      try {
        const auto [first, last] = runs[r];
        worker.run({&groups[first], last - first}, mine);
      } catch (...) {
        e.sources.release_thread();
        e.sinks.release_thread();
        record();
      }
    }
    try {
      if (!failed.load()) worker.finish(mine);
    } catch (...) {
      record();
    }
#pragma omp critical(gravpipe_group_work)
    total += mine;  // counts are exact in any order; only the timers' sums vary
  }
  if (error) std::rethrow_exception(error);
  return total;
}

}  // namespace

template <class Sources, class Sinks, class Results, class Cells>
GroupWork evaluate_groups(const GroupEvaluation<Sources, Sinks, Results, Cells>& e, const std::vector<Group>& groups,
                          int threads) {
  using Evaluation = GroupEvaluation<Sources, Sinks, Results, Cells>;
  if (e.device == nullptr) return share_runs<CpuRuns<Evaluation>>(e, groups, threads);
  if (e.params.precision != Precision::Mixed)
    throw InputError("tree backend 'cuda': the GPU list kernel is mixed precision only (got precision 'double')");
  if (e.device->lanes() < threads) throw InputError("tree backend 'cuda': fewer device lanes than threads");
  return share_runs<DeviceRuns<Evaluation>>(e, groups, threads);
}

template GroupWork evaluate_groups<InCoreParticles, InCoreParticles, CallerResults, InCoreCells>(
    const GroupEvaluation<InCoreParticles, InCoreParticles, CallerResults, InCoreCells>&, const std::vector<Group>&,
    int);
template GroupWork evaluate_groups<PagedParticles, PagedParticles, StoreResults, PagedCells>(
    const GroupEvaluation<PagedParticles, PagedParticles, StoreResults, PagedCells>&, const std::vector<Group>&, int);
template GroupWork evaluate_groups<GraftedPagedParticles, PagedParticles, StoreResults, GraftedPagedCells>(
    const GroupEvaluation<GraftedPagedParticles, PagedParticles, StoreResults, GraftedPagedCells>&,
    const std::vector<Group>&, int);

}  // namespace gravpipe
