// The Tree: sort, build and moments at construction; groups, walk and list evaluation per
// force call, OpenMP over runs of consecutive groups. A run walks the top of the tree once
// (walk_run) and evaluates the cells every member accepts on all its particles at once;
// each member then walks on from the run's frontier and evaluates its own list. Each
// run's sums are computed by one thread in a fixed order, so results are bitwise
// identical for any thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "gravpipe/error.hpp"
#include "gravpipe/force_request_check.hpp"
#include "gravpipe/stopwatch.hpp"
#include "gravpipe/tree.hpp"
#include "tree_local.hpp"

namespace gravpipe {

namespace {

void check_params(const TreeParams& p) {
  auto finite_nonneg = [](double v) { return std::isfinite(v) && v >= 0; };
  check_eps(p.eps);
  check_G(p.G);
  if (!(std::isfinite(p.theta) && p.theta > 0)) throw InputError("theta: must be finite and > 0");
  if (!(std::isfinite(p.quad_tol) && p.quad_tol >= 0)) throw InputError("quad_tol: must be finite and >= 0");
  if (p.n_leaf < 1) throw InputError("n_leaf: must be >= 1");
  if (p.n_crit < 1) throw InputError("n_crit: must be >= 1");
  if (!finite_nonneg(p.alpha)) throw InputError("alpha: must be finite and >= 0");
}

/// Thread-private scratch of the group loop, reused from run to run.
struct GroupScratch {
  LocalExpansion local;
  InteractionList shared, list;
  std::vector<std::int32_t> frontier;
  GatheredList shared_gathered, gathered;
  GroupSinks run_sinks, sinks;
};

/// Runs of consecutive groups (curve order, so spatially compact) that share the top of
/// their walks: [first, last) group indices, at most kRunParticles i-particles each
/// (a single larger group makes a run alone).
constexpr std::int64_t kRunParticles = 2048;  // with the local expansion; 1024 / 4096 / 8192 slower
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

/// The run as one group: the union of the members' boxes and excluded ranges, and the
/// smallest old |a| of those that have one (the relative criterion's most sensitive).
Group run_group(const Group* members, std::size_t n) {
  Group r = members[0];
  bool any_ex = members[0].ex_begin < members[0].ex_end;
  for (std::size_t k = 1; k < n; ++k) {
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

/// Shared cells at least this many run radii (half-diagonals of the run's box) from its
/// centre enter the run's local expansion instead of the lists: the expansion's error
/// there is ~(1/kLocalRadii)^(kLocalOrder) of those cells' pull at the run's corners.
/// With order 4, 5 radii leave the errors of a Plummer sphere, a uniform cube, a plane
/// and a line as they are (4 radii: the cube's p99 +20%, 3: the line's x2; order 3
/// needed 8-10 radii on the line).
constexpr double kLocalRadii = 5.0;

/// Move the cells of `cells[0, n)` that lie beyond r2_min from g into the expansion;
/// returns how many stay (compacted to the front).
std::size_t expand_far(std::int32_t* cells, std::size_t n, const TreeNodes& t, const double g[3],
                       double r2_min, double eps2, bool quadrupole, LocalExpansion& local) {
  std::size_t kept = 0;
  for (std::size_t q = 0; q < n; ++q) {
    const std::int32_t c = cells[q];
    const double dx = t.cx[c] - g[0], dy = t.cy[c] - g[1], dz = t.cz[c] - g[2];
    if (dx * dx + dy * dy + dz * dz >= r2_min)
      local.add_cell(t, c, eps2, quadrupole);
    else
      cells[kept++] = c;
  }
  return kept;
}

std::size_t padded_count(std::size_t n) { return (n + kTreeIPad - 1) / kTreeIPad * kTreeIPad; }

void centre_of(const Group& g, double c[3]) {
  for (int a = 0; a < 3; ++a) c[a] = 0.5 * (g.lo[a] + g.hi[a]);
}

/// The group's i-particles as the kernels read them, padded to kTreeIPad: float64
/// coordinates (double) or float32 ones relative to `centre` (mixed). Padding lanes repeat
/// the first sink and exclude nothing; their sums are dropped.
void set_sinks(GroupSinks& s, const SourceView& sinks, Span<const std::int64_t> i_exclude,
               const Group& g, std::size_t n, std::size_t padded, bool mixed, const double centre[3]) {
  s.exclude.resize(padded);
  for (auto* v : {&s.x, &s.y, &s.z}) v->resize(mixed ? 0 : padded);
  for (auto* v : {&s.xf, &s.yf, &s.zf}) v->resize(mixed ? padded : 0);
  for (std::size_t q = 0; q < padded; ++q) {
    const std::size_t i = static_cast<std::size_t>(g.i_begin) + (q < n ? q : 0);
    if (mixed) {
      s.xf[q] = static_cast<float>(sinks.x[i] - centre[0]);
      s.yf[q] = static_cast<float>(sinks.y[i] - centre[1]);
      s.zf[q] = static_cast<float>(sinks.z[i] - centre[2]);
    } else {
      s.x[q] = sinks.x[i], s.y[q] = sinks.y[i], s.z[q] = sinks.z[i];
    }
    s.exclude[q] = q < n ? i_exclude[i] : -1;
  }
}

}  // namespace

Tree::Tree(Span<const double> pos, Span<const double> mass, const TreeParams& params)
    : params_(params),
      threads_(params.threads > 0 ? params.threads : omp_get_max_threads()),
      isa_(available_isas().front()) {
  check_params(params_);
  const std::size_t n = check_j_set(pos, mass, {});

  auto t0 = Clock::now();
  frame_ = bounding_cube(pos, threads_);
  std::vector<std::uint64_t> keys = curve_keys(pos, frame_, threads_);
  order_ = sort_keys(keys, threads_);
  rank_.resize(n);
  for (auto* v : {&x_, &y_, &z_, &m_}) v->resize(n);
  const auto sn = static_cast<std::int64_t>(n);
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (std::int64_t k = 0; k < sn; ++k) {
    const std::int64_t o = order_[k];
    x_[k] = pos[3 * o], y_[k] = pos[3 * o + 1], z_[k] = pos[3 * o + 2], m_[k] = mass[o];
    rank_[o] = k;
  }
  stats_.seconds_sort = seconds_since(t0);

  t0 = Clock::now();
  nodes_ = build_octree({keys.data(), keys.size()}, params_.n_leaf);
  groups_ = group_cells(nodes_, params_.n_crit);
  stats_.seconds_build = seconds_since(t0);

  t0 = Clock::now();
  compute_moments(nodes_, view(), params_.theta, params_.quad_tol, threads_);
  stats_.seconds_moments = seconds_since(t0);

  stats_.n_j = n;
  stats_.nodes = nodes_.count();
  stats_.leaves = static_cast<std::uint64_t>(
      std::count(nodes_.first_child.begin(), nodes_.first_child.end(), -1));
}

void Tree::set_old_accelerations(Span<const double> a_abs) {
  if (a_abs.size() != size()) throw InputError("old accelerations: length differs from the tree's");
  a_old_.resize(size());
  for (std::size_t k = 0; k < size(); ++k) a_old_[k] = a_abs[order_[k]];
}

void Tree::self_forces(Span<double> acc, Span<double> pot) {
  const std::size_t n = size();
  if (acc.size() != 3 * n || pot.size() != n) throw InputError("self_forces: output sizes differ from the tree's");
  const bool relative = params_.alpha > 0 && !a_old_.empty();
  std::vector<Group> groups(groups_.size());
  for (std::size_t k = 0; k < groups_.size(); ++k) {
    const auto c = groups_[k];
    Group& g = groups[k];
    g.i_begin = g.ex_begin = nodes_.begin[c];
    g.i_end = g.ex_end = nodes_.end[c];
    g.lo[0] = nodes_.lo_x[c], g.lo[1] = nodes_.lo_y[c], g.lo[2] = nodes_.lo_z[c];
    g.hi[0] = nodes_.hi_x[c], g.hi[1] = nodes_.hi_y[c], g.hi[2] = nodes_.hi_z[c];
    if (relative)
      g.a_min = *std::min_element(a_old_.begin() + g.i_begin, a_old_.begin() + g.i_end);
  }
  std::vector<std::int64_t> self(n);
  std::iota(self.begin(), self.end(), std::int64_t{0});
  run_groups(groups, view(), {self.data(), n}, {order_.data(), n}, acc, pot);
  stats_.relative_criterion_used = relative;
  // |a| of this evaluation, for the relative criterion of the next one
  a_old_.resize(n);
  for (std::size_t k = 0; k < n; ++k) {
    const std::int64_t o = order_[k];
    a_old_[k] = std::sqrt(acc[3 * o] * acc[3 * o] + acc[3 * o + 1] * acc[3 * o + 1] +
                          acc[3 * o + 2] * acc[3 * o + 2]);
  }
}

void Tree::forces_at(Span<const double> pos_i, Span<const std::int64_t> exclude, Span<double> acc,
                     Span<double> pot) {
  const std::size_t ni = check_force_request({pos_i, {}, exclude, acc, pot, {}}, size(), false);
  const auto t0 = Clock::now();
  // the i-set in curve order (in the tree's frame), cut into groups of n_crit
  std::vector<std::uint64_t> keys = curve_keys(pos_i, frame_, threads_);
  std::vector<std::int64_t> order = sort_keys(keys, threads_);
  std::vector<double> x(ni), y(ni), z(ni), unused(ni, 0.0);
  std::vector<std::int64_t> ex(ni, -1);
  for (std::size_t k = 0; k < ni; ++k) {
    const std::int64_t o = order[k];
    x[k] = pos_i[3 * o], y[k] = pos_i[3 * o + 1], z[k] = pos_i[3 * o + 2];
    if (!exclude.empty() && exclude[o] >= 0) ex[k] = rank_[exclude[o]];
  }
  std::vector<Group> groups;
  const auto step = static_cast<std::size_t>(params_.n_crit);
  for (std::size_t b = 0; b < ni; b += step) {
    Group g;
    g.i_begin = static_cast<std::int64_t>(b);
    g.i_end = static_cast<std::int64_t>(std::min(ni, b + step));
    std::int64_t elo = INT64_MAX, ehi = -1;
    for (int a = 0; a < 3; ++a) g.lo[a] = INFINITY, g.hi[a] = -INFINITY;
    for (std::int64_t k = g.i_begin; k < g.i_end; ++k) {
      const double r[3] = {x[k], y[k], z[k]};
      for (int a = 0; a < 3; ++a) g.lo[a] = std::min(g.lo[a], r[a]), g.hi[a] = std::max(g.hi[a], r[a]);
      if (ex[k] >= 0) elo = std::min(elo, ex[k]), ehi = std::max(ehi, ex[k]);
    }
    if (ehi >= 0) g.ex_begin = elo, g.ex_end = ehi + 1;
    groups.push_back(g);
  }
  const double t_sort = seconds_since(t0);
  const SourceView sinks{{x.data(), ni}, {y.data(), ni}, {z.data(), ni}, {unused.data(), ni}};
  run_groups(groups, sinks, {ex.data(), ni}, {order.data(), ni}, acc, pot);
  stats_.seconds_forces += t_sort;
  stats_.relative_criterion_used = false;
}

void Tree::run_groups(const std::vector<Group>& groups, const SourceView& sinks,
                      Span<const std::int64_t> i_exclude, Span<const std::int64_t> i_caller,
                      Span<double> acc, Span<double> pot) {
  const auto t_start = Clock::now();
  const MacParams mac{params_.G, params_.alpha, params_.quadrupole};
  const double eps2 = params_.eps * params_.eps, G = params_.G;
  const SourceView src = view();
  const bool mixed = params_.precision == Precision::Mixed;
  const auto runs = make_runs(groups);
  std::uint64_t pp = 0, pc = 0, pc_local = 0, tests = 0;
  double t_walk = 0, t_eval = 0;
  const auto nr = static_cast<std::int64_t>(runs.size());
#pragma omp parallel num_threads(threads_) reduction(+ : pp, pc, pc_local, tests, t_walk, t_eval)
  {
    GroupScratch w;
#pragma omp for schedule(dynamic)
    for (std::int64_t r = 0; r < nr; ++r) {
      const auto [first, last] = runs[r];
      const Span<const Group> members{&groups[first], last - first};
      const Group run = run_group(members.begin(), members.size());
      double run_centre[3];
      centre_of(run, run_centre);
      auto t0 = Clock::now();
      walk_run(nodes_, run, members, mac, w.shared, w.frontier);
      tests += w.shared.mac_tests;
      auto t1 = Clock::now();
      // the shared cells far from the run: one local expansion about its centre
      const auto run_n = static_cast<std::size_t>(run.i_end - run.i_begin);
      const std::size_t n_shared = w.shared.n_near + w.shared.n_far;
      w.local.reset(run_centre);
      if (params_.local_expansion) {
        const double kappa = kLocalRadii;
        const double hx = run.hi[0] - run.lo[0], hy = run.hi[1] - run.lo[1], hz = run.hi[2] - run.lo[2];
        const double r2_min = kappa * kappa * 0.25 * (hx * hx + hy * hy + hz * hz);
        w.shared.n_near = expand_far(w.shared.near_buf.data(), w.shared.n_near, nodes_, run_centre, r2_min,
                                     eps2, params_.quadrupole, w.local);
        w.shared.n_far = expand_far(w.shared.far_buf.data(), w.shared.n_far, nodes_, run_centre, r2_min,
                                    eps2, false, w.local);
      }
      // the other shared cells, gathered once and evaluated once on all the run's particles
      // (relative to the run's centre: they are all beyond their opening radius from its box)
      w.shared_gathered.gather(w.shared, nodes_, src, params_.quadrupole, 0, 0, params_.precision, run_centre);
      set_sinks(w.run_sinks, sinks, i_exclude, run, run_n, padded_count(run_n), mixed, run_centre);
      evaluate_group(w.shared_gathered, w.run_sinks, padded_count(run_n), eps2, isa_);
      const std::size_t n_expanded = n_shared - w.shared.n_near - w.shared.n_far;
      pc_local += run_n * n_expanded;
      if (n_expanded > 0)
        for (std::size_t q = 0; q < run_n; ++q) {
          const auto i = static_cast<std::size_t>(run.i_begin) + q;
          GroupSinks& rs = w.run_sinks;
          w.local.evaluate(sinks.x[i], sinks.y[i], sinks.z[i], rs.ax[q], rs.ay[q], rs.az[q], rs.pot[q]);
        }
      pc += run_n * n_shared;
      t_walk += std::chrono::duration<double>(t1 - t0).count();
      t_eval += seconds_since(t1);
      for (const Group& g : members) {
        t0 = Clock::now();
        walk_group(nodes_, g, mac, w.list, {w.frontier.data(), w.frontier.size()});
        t1 = Clock::now();
        double centre[3];
        centre_of(g, centre);
        w.gathered.gather(w.list, nodes_, src, params_.quadrupole, g.ex_begin, g.ex_end, params_.precision,
                          centre);
        const auto n = static_cast<std::size_t>(g.i_end - g.i_begin);
        GroupSinks& s = w.sinks;
        set_sinks(s, sinks, i_exclude, g, n, padded_count(n), mixed, centre);
        evaluate_group(w.gathered, s, padded_count(n), eps2, isa_);
        const GroupSinks& rs = w.run_sinks;
        const auto at = static_cast<std::size_t>(g.i_begin - run.i_begin);
        for (std::size_t q = 0; q < n; ++q) {
          const std::int64_t o = i_caller[g.i_begin + q];
          acc[3 * o] = G * (s.ax[q] + rs.ax[at + q]), acc[3 * o + 1] = G * (s.ay[q] + rs.ay[at + q]);
          acc[3 * o + 2] = G * (s.az[q] + rs.az[at + q]), pot[o] = -G * (s.pot[q] + rs.pot[at + q]);
        }
        pp += n * w.gathered.n_particles();
        pc += n * w.gathered.n_cells();
        tests += w.list.mac_tests;
        t_walk += std::chrono::duration<double>(t1 - t0).count();
        t_eval += seconds_since(t1);
      }
    }
  }
  const double wall = seconds_since(t_start);
  // thread-seconds scaled to the loop's wall time, so walk + evaluate = wall
  const double busy = t_walk + t_eval, scale = busy > 0 ? wall / busy : 0.0;
  stats_.n_i = i_caller.size();
  stats_.groups = groups.size();
  stats_.pp_interactions = pp;
  stats_.pc_interactions = pc;
  stats_.pc_local_interactions = pc_local;
  stats_.mac_tests = tests;
  stats_.seconds_walk = t_walk * scale;
  stats_.seconds_evaluate = t_eval * scale;
  stats_.seconds_forces = wall;
}

// ---- ForceProvider ---------------------------------------------------------------------------

TreeForceProvider::TreeForceProvider(const TreeParams& params) : params_(params) {
  check_params(params_);
}

void TreeForceProvider::set_j(Span<const double> pos, Span<const double> mass, Span<const double> vel) {
  check_j_set(pos, mass, vel);  // velocities are checked, then unused: the tree computes no jerk
  has_vel_ = !vel.empty();
  const auto t0 = Clock::now();
  pos_.assign(pos.begin(), pos.end());
  mass_.assign(mass.begin(), mass.end());
  tree_ = std::make_unique<Tree>(Span<const double>{pos_.data(), pos_.size()},
                                 Span<const double>{mass_.data(), mass_.size()}, params_);
  if (a_old_.size() == mass_.size()) tree_->set_old_accelerations({a_old_.data(), a_old_.size()});
  stats_.j_particles += mass_.size();
  stats_.bytes_j_write += 32 * mass_.size();
  stats_.seconds_j_write += seconds_since(t0);
}

void TreeForceProvider::update_j(Span<const double> pos, Span<const double> vel) {
  check_j_update(pos, vel, mass_.size(), has_vel_);
  set_j(pos, {mass_.data(), mass_.size()}, vel);
}

void TreeForceProvider::forces(const ForceRequest& req) {
  if (!req.vel_i.empty()) throw InputError("tree forces: jerk is not available from the treecode");
  const std::size_t ni = check_force_request(req, mass_.size(), false);
  const auto t0 = Clock::now();
  const std::size_t n = mass_.size();
  // self-gravity: the j-set itself with every particle excluding itself
  bool self = ni == n && req.exclude.size() == n &&
              std::memcmp(req.pos_i.data(), pos_.data(), 3 * n * sizeof(double)) == 0;
  for (std::size_t k = 0; self && k < n; ++k) self = req.exclude[k] == static_cast<std::int64_t>(k);
  if (self) {
    tree_->self_forces(req.acc, req.pot);
    a_old_.resize(n);
    for (std::size_t k = 0; k < n; ++k)
      a_old_[k] = std::sqrt(req.acc[3 * k] * req.acc[3 * k] + req.acc[3 * k + 1] * req.acc[3 * k + 1] +
                            req.acc[3 * k + 2] * req.acc[3 * k + 2]);
  } else {
    tree_->forces_at(req.pos_i, req.exclude, req.acc, req.pot);
  }
  last_ = tree_->stats();
  stats_.calls += 1;
  stats_.i_particles += ni;
  stats_.interactions += last_.pp_interactions + last_.pc_interactions;
  stats_.bytes_i_write += 32 * ni;
  stats_.bytes_result_read += 32 * ni;
  stats_.seconds_compute += seconds_since(t0);
}

}  // namespace gravpipe
