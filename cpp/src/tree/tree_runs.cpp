// A force evaluation over runs of consecutive groups (tree_runs.hpp). A run walks the top of
// the tree once (walk_run), puts the shared cells far from it into one local expansion and
// evaluates the other shared cells on all its particles at once: the shared part. Each
// member group then walks on from the run's frontier and evaluates its own list: the part
// per group. Particles are read through accessors, a block per run of sinks and per opened
// leaf of sources.
#include "tree_runs.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <utility>

#include "gravpipe/stopwatch.hpp"
#include "gravpipe/paged_cells.hpp"
#include "gravpipe/paged_particles.hpp"
#include "store_results.hpp"
#include "tree_local.hpp"

namespace gravpipe {

namespace {

/// At most this many i-particles a run (make_runs): with the local expansion; 1024 / 4096 /
/// 8192 slower.
constexpr std::int64_t kRunParticles = 2048;

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
/// `centre` (mixed). Padding lanes repeat the first sink and exclude nothing; their sums are
/// dropped.
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
    s.exclude[q] = q >= n ? -1 : exclude_self ? i : i_exclude[i];
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

/// The shared part of a run: walk its top once, then the cells every member accepts on all
/// its particles, into w.run_sinks (the far ones through the local expansion, the others
/// gathered once, relative to the run's centre: they are all beyond their opening radius
/// from its box). `sinks` holds the run's i-particles.
template <class Sources, class Sinks, class Results, class Cells, class Reader>
void evaluate_shared(const GroupEvaluation<Sources, Sinks, Results, Cells>& e, const Reader& cells, const Group& run,
                     Span<const Group> members, const ParticleBlock& sinks, GroupScratch& w, GroupWork& work) {
  const MacParams mac{e.params.G, e.params.alpha, e.params.quadrupole};
  const double eps2 = e.params.eps * e.params.eps;
  const auto t0 = Clock::now();
  walk_run(cells, run, members, mac, w.shared, w.frontier);
  work.mac_tests += w.shared.mac_tests;
  const auto t1 = Clock::now();
  double centre[3];
  centre_of(run, centre);
  const auto run_n = static_cast<std::size_t>(run.i_end - run.i_begin);
  const std::size_t n_shared = w.shared.n_near + w.shared.n_far;
  const std::size_t n_expanded = expand_shared(e, cells, run, centre, w);
  w.shared_gathered.gather(w.shared, cells, e.sources, e.params.quadrupole, 0, 0, e.params.precision, centre);
  set_sinks(w.run_sinks, sinks, e.i_exclude, e.exclude_self, run, e.params.precision == Precision::Mixed, centre, e.isa);
  evaluate_group(w.shared_gathered, w.run_sinks, padded_count(run_n, e.isa), eps2, e.isa);
  GroupSinks& rs = w.run_sinks;
  if (n_expanded > 0)
    for (std::size_t q = 0; q < run_n; ++q) {
      const std::int64_t i = run.i_begin + static_cast<std::int64_t>(q);
      w.local.evaluate(sinks.x(i), sinks.y(i), sinks.z(i), rs.ax[q], rs.ay[q], rs.az[q], rs.pot[q]);
    }
  w.run_terms = n_shared;
  work.pc_local += run_n * n_expanded;
  work.pc += run_n * n_shared;
  work.seconds_walk += seconds_between(t0, t1);
  work.seconds_evaluate += seconds_since(t1);
}

/// The part of member group g: walk on from the run's frontier, evaluate its own list, add
/// the run's shared sums (w.run_sinks) and write the caller-ordered results.
template <class Sources, class Sinks, class Results, class Cells, class Reader>
void evaluate_member(const GroupEvaluation<Sources, Sinks, Results, Cells>& e, const Reader& cells, const Group& run,
                     const Group& g, const ParticleBlock& sinks, GroupScratch& w, GroupWork& work) {
  const MacParams mac{e.params.G, e.params.alpha, e.params.quadrupole};
  const double eps2 = e.params.eps * e.params.eps, G = e.params.G;
  const auto t0 = Clock::now();
  walk_group(cells, g, mac, w.list, {w.frontier.data(), w.frontier.size()});
  const auto t1 = Clock::now();
  double centre[3];
  centre_of(g, centre);
  w.gathered.gather(w.list, cells, e.sources, e.params.quadrupole, g.ex_begin, g.ex_end, e.params.precision, centre);
  const auto n = static_cast<std::size_t>(g.i_end - g.i_begin);
  set_sinks(w.sinks, sinks, e.i_exclude, e.exclude_self, g, e.params.precision == Precision::Mixed, centre, e.isa);
  evaluate_group(w.gathered, w.sinks, padded_count(n, e.isa), eps2, e.isa);
  const GroupSinks &s = w.sinks, &rs = w.run_sinks;
  const auto at = static_cast<std::size_t>(g.i_begin - run.i_begin);
  for (std::size_t q = 0; q < n; ++q)
    e.results.put(g.i_begin + static_cast<std::int64_t>(q), G * (s.ax[q] + rs.ax[at + q]),
                  G * (s.ay[q] + rs.ay[at + q]), G * (s.az[q] + rs.az[at + q]), -G * (s.pot[q] + rs.pot[at + q]));
  if (e.results.wants_cost()) {
    const auto terms = static_cast<std::int64_t>(w.run_terms + w.gathered.n_particles() + w.gathered.n_cells());
    for (std::size_t q = 0; q < n; ++q) e.results.put_cost(g.i_begin + static_cast<std::int64_t>(q), terms);
  }
  work.pruned_opened += w.list.pruned_opened;
  work.pp += n * w.gathered.n_particles();
  work.pc += n * w.gathered.n_cells();
  work.mac_tests += w.list.mac_tests;
  work.seconds_walk += seconds_between(t0, t1);
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

template <class Sources, class Sinks, class Results, class Cells>
GroupWork evaluate_groups(const GroupEvaluation<Sources, Sinks, Results, Cells>& e, const std::vector<Group>& groups,
                          int threads) {
  const auto runs = make_runs(groups);
  const auto nr = static_cast<std::int64_t>(runs.size());
  // chunks of consecutive runs: a thread's next run is the curve's next, on pages near its
  // last; ~32 chunks per thread keep the threads' ends balanced. Results do not depend on
  // the schedule: each run is one thread's, summed in a fixed order.
  const std::int64_t chunk = std::max<std::int64_t>(1, nr / (32 * std::max(1, threads)));
  GroupWork total;
  std::exception_ptr error;  // the first failure (a page that fails its checksum): rethrown here
  std::atomic<bool> failed{false};
#pragma omp parallel num_threads(threads)
  {
    GroupScratch w;
    GroupWork mine;
    const auto cells = e.cells.reader();  // this thread's (a paged one holds its own pins)
#pragma omp for schedule(dynamic, chunk)
    for (std::int64_t r = 0; r < nr; ++r) {
      if (failed.load(std::memory_order_relaxed)) continue;
      try {
        const auto [first, last] = runs[r];
        evaluate_run(e, cells, {&groups[first], last - first}, w, mine);
      } catch (...) {
        e.sources.release_thread();
        e.sinks.release_thread();
#pragma omp critical(gravpipe_group_error)
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
#pragma omp critical(gravpipe_group_work)
    total += mine;  // counts are exact in any order; only the timers' sums vary
  }
  if (error) std::rethrow_exception(error);
  return total;
}

template GroupWork evaluate_groups<InCoreParticles, InCoreParticles, CallerResults, InCoreCells>(
    const GroupEvaluation<InCoreParticles, InCoreParticles, CallerResults, InCoreCells>&, const std::vector<Group>&,
    int);
template GroupWork evaluate_groups<PagedParticles, PagedParticles, StoreResults, PagedCells>(
    const GroupEvaluation<PagedParticles, PagedParticles, StoreResults, PagedCells>&, const std::vector<Group>&, int);

}  // namespace gravpipe
