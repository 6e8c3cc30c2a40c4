// DomainTree (tree_essential.hpp): one rank's tree over its own particles, which exports
// locally essential pieces, grafts the pieces it receives and evaluates self-gravity of its
// own particles with the serial tree's group evaluation (tree_runs.hpp).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "gravpipe/error.hpp"
#include "gravpipe/force_request_check.hpp"
#include "gravpipe/stopwatch.hpp"
#include "gravpipe/tree_essential.hpp"
#include "tree_runs.hpp"

namespace gravpipe {

DomainTree::DomainTree(Span<const double> pos, Span<const double> mass, const TreeParams& params,
                       const CurveBox* frame_in)
    : params_(params),
      threads_(params.threads > 0 ? params.threads : omp_get_max_threads()),
      isa_(resolve_isa(params.isa)) {
  check_tree_params(params_);
  refuse_tree_cuda(params_, "the domain tree (MPI ranks)");
  n_local_ = check_j_set(pos, mass, {});
  auto t0 = Clock::now();
  const CurveBox frame = frame_in != nullptr ? *frame_in : bounding_cube(pos, threads_);
  std::vector<std::uint64_t> keys = curve_keys(pos, frame, threads_);
  order_ = sort_keys(keys, threads_);
  for (auto* v : {&x_, &y_, &z_, &m_}) v->resize(n_local_);
  for (std::size_t k = 0; k < n_local_; ++k) {
    const auto o = static_cast<std::size_t>(order_[k]);
    x_[k] = pos[3 * o], y_[k] = pos[3 * o + 1], z_[k] = pos[3 * o + 2], m_[k] = mass[o];
  }
  stats_.seconds_sort = seconds_since(t0);
  t0 = Clock::now();
  local_ = build_octree({keys.data(), keys.size()}, params_.n_leaf);
  group_cells_ = group_cells(local_, params_.n_crit);
  stats_.seconds_build = seconds_since(t0);
  t0 = Clock::now();
  compute_moments(local_, local_particles(), params_.theta, params_.quad_tol, threads_);
  stats_.seconds_moments = seconds_since(t0);
  stats_.n_j = n_local_;
}

InCoreParticles DomainTree::local_particles() const {
  return {{x_.data(), n_local_}, {y_.data(), n_local_}, {z_.data(), n_local_}, {m_.data(), n_local_}};
}

InCoreParticles DomainTree::all_particles() const {
  return {{x_.data(), x_.size()}, {y_.data(), y_.size()}, {z_.data(), z_.size()}, {m_.data(), m_.size()}};
}

void DomainTree::set_old_accelerations(Span<const double> a_abs) {
  if (a_abs.size() != n_local_) throw InputError("old accelerations: length differs from the tree's");
  a_old_.resize(n_local_);
  for (std::size_t k = 0; k < n_local_; ++k) a_old_[k] = a_abs[static_cast<std::size_t>(order_[k])];
}

std::vector<DomainBox> DomainTree::domain() const { return group_boxes(own_groups()); }

EssentialPiece DomainTree::export_for(Span<const DomainBox> d) const {
  const MacParams mac{params_.G, params_.alpha, params_.quadrupole};
  return export_essential(local_, local_particles(), d, mac);
}

std::vector<Group> DomainTree::own_groups() const {
  const bool grafted = grafted_.count() > 0;
  const TreeNodes& nodes = grafted ? grafted_ : local_;
  const bool relative = params_.alpha > 0 && !a_old_.empty();
  std::vector<Group> groups(group_cells_.size());
  for (std::size_t q = 0; q < groups.size(); ++q) {
    const std::int32_t c = grafted ? local_index_[group_cells_[q]] : group_cells_[q];
    Group& g = groups[q];
    g.i_begin = g.ex_begin = nodes.begin[c];
    g.i_end = g.ex_end = nodes.end[c];
    g.lo[0] = nodes.lo_x[c], g.lo[1] = nodes.lo_y[c], g.lo[2] = nodes.lo_z[c];
    g.hi[0] = nodes.hi_x[c], g.hi[1] = nodes.hi_y[c], g.hi[2] = nodes.hi_z[c];
    if (relative) g.a_min = *std::min_element(a_old_.begin() + g.i_begin, a_old_.begin() + g.i_end);
  }
  return groups;
}

void DomainTree::graft(const ReceivedPieces& in) {
  const auto t0 = Clock::now();
  GraftedTree g = graft_tree(local_, in, params_.theta, params_.quad_tol, threads_);
  const std::size_t n_in = in.particles.size() / kPieceParticleDoubles;
  for (auto* v : {&x_, &y_, &z_, &m_}) v->resize(n_local_ + n_in);
  for (std::size_t k = 0; k < n_in; ++k) {
    const double* p = &in.particles[kPieceParticleDoubles * k];
    x_[n_local_ + k] = p[0], y_[n_local_ + k] = p[1], z_[n_local_ + k] = p[2], m_[n_local_ + k] = p[3];
  }
  grafted_ = std::move(g.nodes);
  local_index_ = std::move(g.local_index);
  stats_.seconds_build += seconds_since(t0);
}

void DomainTree::forces(Span<double> acc, Span<double> pot, Span<std::int64_t> cost) {
  if (acc.size() != 3 * n_local_ || pot.size() != n_local_ || (!cost.empty() && cost.size() != n_local_))
    throw InputError("domain tree forces: output sizes differ from the own particle count");
  const auto t_start = Clock::now();
  const bool grafted = grafted_.count() > 0;
  const TreeNodes& nodes = grafted ? grafted_ : local_;
  const bool relative = params_.alpha > 0 && !a_old_.empty();
  // the own particles' groups, each excluding its own particles: self-gravity
  const std::vector<Group> groups = own_groups();
  std::vector<std::int64_t> self(n_local_);
  std::iota(self.begin(), self.end(), std::int64_t{0});
  const InCoreParticles sources = all_particles(), sinks = local_particles();
  const CallerResults results{{order_.data(), n_local_}, acc, pot, cost};
  const InCoreCells cells(nodes);
  const GroupEvaluation<InCoreParticles, InCoreParticles> e{
      cells, params_, isa_, sources, sinks, {self.data(), n_local_}, results};
  const GroupWork work = evaluate_groups(e, groups, threads_);
  if (work.pruned_opened > 0)
    throw EssentialTreeError("locally essential tree: " + std::to_string(work.pruned_opened) +
                             " walks wanted to open cells another rank sent pruned (without children): its MAC "
                             "accepted them for this rank's domain box and the walks here did not; the domain "
                             "boxes or the tree parameters of the ranks disagree");
  record_group_work(stats_, work, seconds_since(t_start), n_local_, groups.size());
  stats_.nodes = nodes.count();
  stats_.relative_criterion_used = relative;
  if (params_.alpha > 0) {
    a_old_.resize(n_local_);
    for (std::size_t k = 0; k < n_local_; ++k) {
      const auto o = static_cast<std::size_t>(order_[k]);
      a_old_[k] = std::sqrt(acc[3 * o] * acc[3 * o] + acc[3 * o + 1] * acc[3 * o + 1] + acc[3 * o + 2] * acc[3 * o + 2]);
    }
  }
}

}  // namespace gravpipe
