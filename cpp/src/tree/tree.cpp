// The Tree: sort, build and moments at construction; groups, walk and list evaluation per
// force call, OpenMP over groups. Each group's sums are computed by one thread in a fixed
// order, so results are bitwise identical for any thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "gravpipe/error.hpp"
#include "gravpipe/stopwatch.hpp"
#include "gravpipe/tree.hpp"

namespace gravpipe {

namespace {

void check_params(const TreeParams& p) {
  auto finite_nonneg = [](double v) { return std::isfinite(v) && v >= 0; };
  if (!finite_nonneg(p.eps)) throw InputError("eps: must be finite and >= 0");
  if (!(std::isfinite(p.G) && p.G > 0)) throw InputError("G: must be finite and > 0");
  if (!(std::isfinite(p.theta) && p.theta > 0)) throw InputError("theta: must be finite and > 0");
  if (!(std::isfinite(p.quad_tol) && p.quad_tol >= 0)) throw InputError("quad_tol: must be finite and >= 0");
  if (p.n_leaf < 1) throw InputError("n_leaf: must be >= 1");
  if (p.n_crit < 1) throw InputError("n_crit: must be >= 1");
  if (!finite_nonneg(p.alpha)) throw InputError("alpha: must be finite and >= 0");
}

/// Thread-private scratch of the group loop, reused from group to group.
struct GroupScratch {
  InteractionList list;
  GatheredList gathered;
  GroupSinks sinks;
};

}  // namespace

Tree::Tree(Span<const double> pos, Span<const double> mass, const TreeParams& params)
    : params_(params),
      threads_(params.threads > 0 ? params.threads : omp_get_max_threads()),
      isa_(available_isas().front()) {
  check_params(params_);
  const std::size_t n = mass.size();
  if (n == 0) throw InputError("tree: empty particle set");
  if (pos.size() != 3 * n) throw InputError("tree: pos and mass have different lengths");

  auto t0 = Clock::now();
  frame_ = key_frame(pos, threads_);
  std::vector<std::uint64_t> keys = curve_keys(pos, frame_, threads_);
  order_ = curve_sort(keys, threads_);
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
  const std::size_t ni = pos_i.size() / 3;
  if (pos_i.size() != 3 * ni || ni == 0) throw InputError("pos_i: expected a non-empty (n,3) array");
  if (acc.size() != 3 * ni || pot.size() != ni) throw InputError("forces_at: output sizes differ from pos_i");
  if (!exclude.empty() && exclude.size() != ni) throw InputError("exclude: length differs from pos_i");
  for (std::size_t k = 0; k < exclude.size(); ++k)
    if (exclude[k] < -1 || exclude[k] >= static_cast<std::int64_t>(size()))
      throw InputError("exclude: index " + std::to_string(exclude[k]) + " at position " +
                       std::to_string(k) + " is outside [-1, n)");
  const auto t0 = Clock::now();
  // the i-set in curve order (in the tree's frame), cut into groups of n_crit
  std::vector<std::uint64_t> keys = curve_keys(pos_i, frame_, threads_);
  std::vector<std::int64_t> order = curve_sort(keys, threads_);
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
  std::uint64_t pp = 0, pc = 0, tests = 0;
  double t_walk = 0, t_eval = 0;
  const auto ng = static_cast<std::int64_t>(groups.size());
#pragma omp parallel num_threads(threads_) reduction(+ : pp, pc, tests, t_walk, t_eval)
  {
    GroupScratch w;
#pragma omp for schedule(dynamic)
    for (std::int64_t k = 0; k < ng; ++k) {
      const Group& g = groups[k];
      const auto t0 = Clock::now();
      walk_group(nodes_, g, mac, w.list);
      const auto t1 = Clock::now();
      const double centre[3] = {0.5 * (g.lo[0] + g.hi[0]), 0.5 * (g.lo[1] + g.hi[1]),
                                0.5 * (g.lo[2] + g.hi[2])};
      w.gathered.gather(w.list, nodes_, src, params_.quadrupole, g.ex_begin, g.ex_end,
                        params_.precision, centre);
      const auto n = static_cast<std::size_t>(g.i_end - g.i_begin);
      const std::size_t padded = (n + kTreeIPad - 1) / kTreeIPad * kTreeIPad;
      GroupSinks& s = w.sinks;
      s.exclude.resize(padded);
      for (auto* v : {&s.x, &s.y, &s.z}) v->resize(mixed ? 0 : padded);
      for (auto* v : {&s.xf, &s.yf, &s.zf}) v->resize(mixed ? padded : 0);
      for (std::size_t q = 0; q < padded; ++q) {
        // padding lanes repeat the first sink and exclude nothing; their sums are dropped
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
      evaluate_group(w.gathered, s, padded, eps2, isa_);
      for (std::size_t q = 0; q < n; ++q) {
        const std::int64_t o = i_caller[g.i_begin + q];
        acc[3 * o] = G * s.ax[q], acc[3 * o + 1] = G * s.ay[q], acc[3 * o + 2] = G * s.az[q];
        pot[o] = -G * s.pot[q];
      }
      const auto t2 = Clock::now();
      pp += n * w.gathered.n_particles();
      pc += n * w.gathered.n_cells();
      tests += w.list.mac_tests;
      t_walk += std::chrono::duration<double>(t1 - t0).count();
      t_eval += std::chrono::duration<double>(t2 - t1).count();
    }
  }
  const double wall = seconds_since(t_start);
  // thread-seconds scaled to the loop's wall time, so walk + evaluate = wall
  const double busy = t_walk + t_eval, scale = busy > 0 ? wall / busy : 0.0;
  stats_.n_i = i_caller.size();
  stats_.groups = groups.size();
  stats_.pp_interactions = pp;
  stats_.pc_interactions = pc;
  stats_.mac_tests = tests;
  stats_.seconds_walk = t_walk * scale;
  stats_.seconds_evaluate = t_eval * scale;
  stats_.seconds_forces = wall;
}

// ---- ForceProvider ---------------------------------------------------------------------------

TreeForceProvider::TreeForceProvider(const TreeParams& params) : params_(params) {
  check_params(params_);
}

void TreeForceProvider::set_j(Span<const double> pos, Span<const double> mass, Span<const double>) {
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
  if (pos.size() != pos_.size()) throw InputError("update_j: the particle count changed");
  set_j(pos, {mass_.data(), mass_.size()}, vel);
}

void TreeForceProvider::forces(const ForceRequest& req) {
  if (!tree_) throw InputError("forces: no j-particles; call set_j first");
  if (!req.vel_i.empty()) throw InputError("tree forces: jerk is not available from the treecode");
  const auto t0 = Clock::now();
  const std::size_t ni = req.pos_i.size() / 3, n = mass_.size();
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
