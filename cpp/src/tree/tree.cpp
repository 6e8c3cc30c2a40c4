// The Tree: sort, build and moments at construction; per force call, the groups (cells of
// the tree for self-gravity, curve-ordered chunks of the points for forces_at), evaluated
// in runs of consecutive groups (tree_runs.cpp).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "gravpipe/cuda_tree_lists.hpp"
#include "gravpipe/error.hpp"
#include "gravpipe/force_request_check.hpp"
#include "gravpipe/stopwatch.hpp"
#include "gravpipe/format_number.hpp"
#include "gravpipe/tree.hpp"
#include "tree_runs.hpp"

namespace gravpipe {

void check_tree_params(const TreeParams& p) {
  auto finite_nonneg = [](double v) { return std::isfinite(v) && v >= 0; };
  check_eps(p.eps);
  check_G(p.G);
  if (!(std::isfinite(p.theta) && p.theta > 0)) throw InputError("theta: must be finite and > 0");
  if (p.theta > kThetaMax)
    throw InputError("theta: " + format_number(p.theta) + " is beyond 1.1547 (2/sqrt(3)), where the opening "
                     "criterion stops meaning anything");
  if (!(std::isfinite(p.quad_tol) && p.quad_tol >= 0)) throw InputError("quad_tol: must be finite and >= 0");
  if (p.n_leaf < 1) throw InputError("n_leaf: must be >= 1");
  if (p.n_crit < 1) throw InputError("n_crit: must be >= 1");
  if (!finite_nonneg(p.alpha)) throw InputError("alpha: must be finite and >= 0");
  if (p.backend != "cpu" && p.backend != "cuda")
    throw InputError("tree backend: expected 'cpu' or 'cuda', got '" + p.backend + "'");
  if (p.backend == "cuda" && p.precision != Precision::Mixed)
    throw InputError("tree backend 'cuda': the GPU list kernel is mixed precision only; use precision 'mixed' or "
                     "backend 'cpu'");
  if (p.device < 0) throw InputError("tree device: must be >= 0");
}

void refuse_tree_cuda(const TreeParams& p, const std::string& who) {
  if (p.backend == "cuda")
    throw InputError(who + " runs its lists on the CPU only: backend 'cuda' is for the in-core tree (use backend "
                     "'cpu')");
}

namespace {

/// Groups of `step` consecutive points (curve order) with their bounding boxes and the
/// range of the sorted j indices they exclude (ex: one per point, or -1).
std::vector<Group> chunk_groups(const InCoreParticles& points, const std::vector<std::int64_t>& ex,
                                std::size_t step) {
  const std::size_t n = points.size();
  std::vector<Group> groups;
  for (std::size_t b = 0; b < n; b += step) {
    Group g;
    g.i_begin = static_cast<std::int64_t>(b);
    g.i_end = static_cast<std::int64_t>(std::min(n, b + step));
    const ParticleBlock p = points.block(g.i_begin, g.i_end);
    std::int64_t elo = INT64_MAX, ehi = -1;
    for (int a = 0; a < 3; ++a) g.lo[a] = INFINITY, g.hi[a] = -INFINITY;
    for (std::int64_t k = g.i_begin; k < g.i_end; ++k) {
      const double r[3] = {p.x(k), p.y(k), p.z(k)};
      for (int a = 0; a < 3; ++a) g.lo[a] = std::min(g.lo[a], r[a]), g.hi[a] = std::max(g.hi[a], r[a]);
      if (ex[k] >= 0) elo = std::min(elo, ex[k]), ehi = std::max(ehi, ex[k]);
    }
    if (ehi >= 0) g.ex_begin = elo, g.ex_end = ehi + 1;
    groups.push_back(g);
  }
  return groups;
}

}  // namespace

/// Self-gravity groups: the group cells, each its own excluded range (every particle
/// leaves itself out), with the smallest old |a| when a_old (curve order) is given.
std::vector<Group> cell_groups(const TreeNodes& t, const std::vector<std::int32_t>& cells,
                               const std::vector<double>& a_old) {
  std::vector<Group> groups(cells.size());
  for (std::size_t k = 0; k < cells.size(); ++k) {
    const auto c = cells[k];
    Group& g = groups[k];
    g.i_begin = g.ex_begin = t.begin[c];
    g.i_end = g.ex_end = t.end[c];
    g.lo[0] = t.lo_x[c], g.lo[1] = t.lo_y[c], g.lo[2] = t.lo_z[c];
    g.hi[0] = t.hi_x[c], g.hi[1] = t.hi_y[c], g.hi[2] = t.hi_z[c];
    if (!a_old.empty()) g.a_min = *std::min_element(a_old.begin() + g.i_begin, a_old.begin() + g.i_end);
  }
  return groups;
}

void record_group_work(TreeStats& stats, const GroupWork& work, double wall, std::size_t n_i, std::size_t groups) {
  // thread-seconds scaled to the loop's wall time, so walk + evaluate = wall
  const double busy = work.seconds_walk + work.seconds_evaluate, scale = busy > 0 ? wall / busy : 0.0;
  stats.n_i = n_i;
  stats.groups = groups;
  stats.pp_interactions = work.pp;
  stats.pc_interactions = work.pc;
  stats.pc_local_interactions = work.pc_local;
  stats.mac_tests = work.mac_tests;
  stats.seconds_walk = work.seconds_walk * scale;
  stats.seconds_evaluate = work.seconds_evaluate * scale;
  stats.seconds_forces = wall;
}

Tree::Tree(Span<const double> pos, Span<const double> mass, const TreeParams& params, const CurveBox* frame,
           TreeStorage* storage)
    : params_(params),
      threads_(params.threads > 0 ? params.threads : omp_get_max_threads()),
      isa_(resolve_isa(params.isa)) {
  check_tree_params(params_);
  const std::size_t n = check_j_set(pos, mass, {});
  if (storage != nullptr) {  // build in a previous tree's arrays: their pages are already mapped
    arrays_ = std::move(*storage);
    arrays_.a_old.clear();  // no old accelerations until set_old_accelerations or self_forces
  }
  // the GPU first: an unavailable device fails before the build's work, not after it
  if (params_.backend == "cpu") arrays_.device.reset();
  else if (!arrays_.device || arrays_.device->lanes() < threads_)
    arrays_.device = std::make_shared<CudaTreeLists>(params_.device, threads_);

  auto t0 = Clock::now();
  frame_ = frame != nullptr ? *frame : bounding_cube(pos, threads_);
  std::vector<std::uint64_t>& keys = arrays_.keys;
  curve_keys_into(pos, frame_, threads_, keys);
  sort_keys_into(keys, arrays_.order, threads_, &arrays_.sort);
  arrays_.rank.resize(n);
  for (auto* v : {&arrays_.x, &arrays_.y, &arrays_.z, &arrays_.m}) v->resize(n);
  const auto sn = static_cast<std::int64_t>(n);
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (std::int64_t k = 0; k < sn; ++k) {
    const std::int64_t o = arrays_.order[k];
    arrays_.x[k] = pos[3 * o], arrays_.y[k] = pos[3 * o + 1], arrays_.z[k] = pos[3 * o + 2], arrays_.m[k] = mass[o];
    arrays_.rank[o] = k;
  }
  stats_.seconds_sort = seconds_since(t0);

  t0 = Clock::now();
  build_octree_into({keys.data(), keys.size()}, params_.n_leaf, arrays_.nodes);
  groups_ = group_cells(arrays_.nodes, params_.n_crit);
  stats_.seconds_build = seconds_since(t0);

  t0 = Clock::now();
  compute_moments(arrays_.nodes, particles(), params_.theta, params_.quad_tol, threads_);
  stats_.seconds_moments = seconds_since(t0);

  if (storage == nullptr) {  // a tree on its own keeps no scratch (24 bytes a particle)
    std::vector<std::uint64_t>().swap(arrays_.keys);
    arrays_.sort = SortScratch{};
  }
  stats_.n_j = n;
  stats_.nodes = arrays_.nodes.count();
  stats_.leaves = static_cast<std::uint64_t>(
      std::count(arrays_.nodes.first_child.begin(), arrays_.nodes.first_child.end(), -1));
}

void Tree::recycle(TreeStorage& storage) { storage = std::move(arrays_); }

std::string Tree::device_name() const { return arrays_.device ? arrays_.device->device_name() : std::string(); }

void Tree::set_old_accelerations(Span<const double> a_abs) {
  if (a_abs.size() != size()) throw InputError("old accelerations: length differs from the tree's");
  arrays_.a_old.resize(size());
  for (std::size_t k = 0; k < size(); ++k) arrays_.a_old[k] = a_abs[arrays_.order[k]];
}

void Tree::self_forces(Span<double> acc, Span<double> pot) {
  const std::size_t n = size();
  if (acc.size() != 3 * n || pot.size() != n) throw InputError("self_forces: output sizes differ from the tree's");
  const bool relative = params_.alpha > 0 && !arrays_.a_old.empty();
  const std::vector<Group> groups =
      cell_groups(arrays_.nodes, groups_, relative ? arrays_.a_old : std::vector<double>{});
  // every i-particle excludes itself (exclude_self): no array of N indices
  run_groups(groups, particles(), {}, {arrays_.order.data(), n}, acc, pot, true);
  stats_.relative_criterion_used = relative;
  // |a| of this evaluation, for the relative criterion of the next one
  arrays_.a_old.resize(n);
  for (std::size_t k = 0; k < n; ++k) {
    const std::int64_t o = arrays_.order[k];
    arrays_.a_old[k] = std::sqrt(acc[3 * o] * acc[3 * o] + acc[3 * o + 1] * acc[3 * o + 1] +
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
    if (!exclude.empty() && exclude[o] >= 0) ex[k] = arrays_.rank[exclude[o]];
  }
  const InCoreParticles sinks{{x.data(), ni}, {y.data(), ni}, {z.data(), ni}, {unused.data(), ni}};
  const std::vector<Group> groups = chunk_groups(sinks, ex, static_cast<std::size_t>(params_.n_crit));
  const double t_sort = seconds_since(t0);
  run_groups(groups, sinks, {ex.data(), ni}, {order.data(), ni}, acc, pot);
  stats_.seconds_forces += t_sort;
  stats_.relative_criterion_used = false;
}

void Tree::run_groups(const std::vector<Group>& groups, const InCoreParticles& sinks,
                      Span<const std::int64_t> i_exclude, Span<const std::int64_t> i_caller,
                      Span<double> acc, Span<double> pot, bool exclude_self) {
  const auto t_start = Clock::now();
  const InCoreParticles sources = particles();
  const CallerResults results{i_caller, acc, pot};
  const InCoreCells cells(arrays_.nodes);
  const GroupEvaluation<InCoreParticles, InCoreParticles> e{
      cells, params_, isa_, sources, sinks, i_exclude, results, exclude_self, arrays_.device.get()};
  const GroupWork work = evaluate_groups(e, groups, threads_);
  record_group_work(stats_, work, seconds_since(t_start), i_caller.size(), groups.size());
}

// ---- ForceProvider ---------------------------------------------------------------------------

TreeForceProvider::TreeForceProvider(const TreeParams& params)
    : params_(params), isa_(resolve_isa(params.isa)) {
  check_tree_params(params_);
  // Every tree of this provider runs the kernels resolved here, even if GRAVPIPE_ISA
  // changes while it lives.
  params_.isa = isa_name(isa_);
}

void TreeForceProvider::set_j(Span<const double> pos, Span<const double> mass, Span<const double> vel) {
  check_j_set(pos, mass, vel);  // velocities are checked, then unused: the tree computes no jerk
  has_vel_ = !vel.empty();
  const auto t0 = Clock::now();
  pos_.assign(pos.begin(), pos.end());
  mass_.assign(mass.begin(), mass.end());
  // a step's drift: the frame its out-of-core counterpart knows before the drift ends
  std::optional<CurveBox> frame;
  if (before_) {
    const int threads = params_.threads > 0 ? params_.threads : omp_get_max_threads();
    frame = step_frame(*before_, axis_bounds({pos_.data(), pos_.size()}, threads));
    before_.reset();
  }
  // the old tree's arrays become the new one's: one tree's memory at a time, no fresh pages
  if (tree_) tree_->recycle(storage_);
  tree_.reset();
  tree_ = std::make_unique<Tree>(Span<const double>{pos_.data(), pos_.size()},
                                 Span<const double>{mass_.data(), mass_.size()}, params_, frame ? &*frame : nullptr,
                                 &storage_);
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
  // a set_j whose tree failed to build (the old one was taken apart for its arrays) left none
  if (!tree_) throw InputError("tree forces: no tree was built for the current j-set; call set_j again");
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
