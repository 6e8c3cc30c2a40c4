// PagedDomainTree (paged_domain_tree.hpp): the out-of-core tree of a rank's particles, the
// pieces the other ranks send grafted above it in memory, and self-gravity from the two.
#include "gravpipe/paged_domain_tree.hpp"

#include <omp.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "gravpipe/error.hpp"
#include "gravpipe/paged_cells.hpp"
#include "gravpipe/paged_particles.hpp"
#include "gravpipe/stopwatch.hpp"
#include "paged_graft_view.hpp"
#include "store_results.hpp"
#include "tree_runs.hpp"

namespace gravpipe {

namespace {

constexpr const char* kBeside = "arrays held beside the locally essential tree";

/// Bytes a grafted top cell holds: TreeNodes' columns and its walk record.
constexpr std::uint64_t kTopCellBytes = kPieceCellDoubles * sizeof(double) + 2 * sizeof(std::int64_t) +
                                        sizeof(std::int32_t) + 2 * sizeof(std::int8_t) + sizeof(WalkCell);

}  // namespace

PagedDomainTree::PagedDomainTree(ParticleStore& store, const TreeParams& params, std::uint64_t keep_free,
                                 const DomainBox& own)
    : store_(store), params_(params), own_(own) {
  if (store.size() < 1) throw InputError("out-of-core domain tree: the store holds no particle");
  if (own.empty()) throw InputError("out-of-core domain tree: the box of the store's positions is empty");
  tree_ = std::make_unique<PagedTree>(store, params, keep_free);
}

TreeNodes PagedDomainTree::root_row() const {
  const PagedCellRecord r = tree_->cells().reader().record(0);
  TreeNodes t;
  t.begin = {0}, t.end = {store_.size()};
  t.first_child = {r.walk.first_child}, t.n_children = {static_cast<std::int8_t>(r.walk.n_children)};
  t.level = {0};
  const double row[kPieceCellDoubles] = {
      r.moments.m,  r.walk.cx,    r.walk.cy,    r.walk.cz,    own_.lo[0],   own_.lo[1],   own_.lo[2],
      own_.hi[0],   own_.hi[1],   own_.hi[2],   0,            r.walk.r_open2, r.moments.qxx, r.moments.qxy,
      r.moments.qxz, r.moments.qyy, r.moments.qyz, r.moments.qzz, r.moments.qtr};
  for (int c = 0; c < kPieceCellDoubles; ++c) (t.*kPieceColumns[c]).assign(1, row[c]);
  t.size[0] = std::max({own_.hi[0] - own_.lo[0], own_.hi[1] - own_.lo[1], own_.hi[2] - own_.lo[2]});
  return t;
}

EssentialPiece PagedDomainTree::export_for(Span<const DomainBox> d) const {
  const PagedParticles particles(store_, "pos", "mass", 1, false);
  return export_essential_paged(tree_->cells(), particles, own_, d,
                                MacParams{params_.G, params_.alpha, params_.quadrupole});
}

std::uint64_t PagedDomainTree::room() const {
  // the readers that the export, the graft and the walk make charge their page tables: kept free
  const std::int64_t pages = store_.pages() + PagedCells::pages_for(tree_->cell_count(), store_.page_bytes());
  const std::uint64_t tables = PagedCells::reader_table_bytes(pages, tree_->threads());
  const MemoryBudget& b = store_.budget();
  return b.total() > b.used() + tables ? b.total() - b.used() - tables : 0;
}

PieceSize PagedDomainTree::export_size(Span<const DomainBox> d) const {
  return essential_size_paged(tree_->cells(), d, MacParams{params_.G, params_.alpha, params_.quadrupole});
}

Reservation PagedDomainTree::charge(std::uint64_t bytes) {
  if (room() < bytes) tree_->shrink_cell_cache(bytes - room());
  // what is held beside gives way last: the graft its arrays are copied into comes first
  // (they go unaccounted until their owner drops them, and held_beside() says so)
  if (room() < bytes && beside_charge_.bytes() > 0) {
    const std::uint64_t short_by = bytes - room(), held = beside_charge_.bytes();
    beside_charge_ = Reservation();
    if (held > short_by) beside_charge_ = store_.budget().reserve(held - short_by, kBeside);
  }
  return store_.budget().reserve(bytes, "the locally essential tree's imported cells and particles");
}

std::uint64_t PagedDomainTree::hold_beside(std::uint64_t bytes) {
  beside_charge_ = Reservation();  // release() would leave its bytes() in place
  if (bytes == 0) return 0;
  if (room() < bytes) tree_->shrink_cell_cache(bytes - room());
  beside_charge_ = store_.budget().reserve(std::min(bytes, room()), kBeside);
  return beside_charge_.bytes();
}

void PagedDomainTree::graft(const ReceivedPieces& in) {
  const auto t0 = Clock::now();
  const std::size_t n_in = in.particles.size() / kPieceParticleDoubles;
  const std::size_t n_cells = in.cells.size() / kPieceCellDoubles;
  // the synthetic cells are few: one per kGraftFanOut subtrees, and the stand-in
  const std::uint64_t bytes = (n_cells + in.cells_per_piece.size() + 2) * kTopCellBytes + n_in * 4 * sizeof(double);
  graft_charge_.release();
  graft_charge_ = charge(bytes);
  const int threads = params_.threads > 0 ? params_.threads : omp_get_max_threads();
  top_ = graft_over(root_row(), static_cast<std::int32_t>(tree_->cell_count()), in, params_.theta, params_.quad_tol,
                    threads);
  for (auto* v : {&x_, &y_, &z_, &m_}) v->resize(n_in);
  for (std::size_t k = 0; k < n_in; ++k) {
    const double* p = &in.particles[kPieceParticleDoubles * k];
    x_[k] = p[0], y_[k] = p[1], z_[k] = p[2], m_[k] = p[3];
  }
  tree_->stats().seconds_build += seconds_since(t0);
}

void PagedDomainTree::forces(const std::string& acc_field, const std::string& pot_field, const std::string& cost_field,
                             const RunResultsHook& hook) {
  if (top_.count() == 0) throw std::logic_error("out-of-core domain tree: forces() before graft()");
  const auto t_start = Clock::now();
  const int threads = tree_->threads();
  const PagedParticles local(store_, "pos", "mass", threads, false);
  const GraftedPagedParticles sources(local, {x_.data(), x_.size()}, {y_.data(), y_.size()}, {z_.data(), z_.size()},
                                      {m_.data(), m_.size()}, threads);
  StoreResults results(store_, threads, acc_field, pot_field, hook, cost_field);
  const GraftedPagedCells cells(tree_->cells(), top_);
  // every i-particle excludes itself; the threads walk the runs side by side (one
  // neighbourhood of pages in the cache)
  const GroupEvaluation<GraftedPagedParticles, PagedParticles, StoreResults, GraftedPagedCells> e{
      cells, params_, tree_->isa(), sources, local, {}, results, true, nullptr, true};
  const GroupWork work = evaluate_groups(e, tree_->groups(), threads);
  if (work.pruned_opened > 0)
    throw EssentialTreeError("locally essential tree (out of core): " + std::to_string(work.pruned_opened) +
                             " walks wanted to open cells another rank sent pruned (without children): the "
                             "domain boxes or the tree parameters of the ranks disagree");
  TreeStats& s = tree_->stats();
  record_group_work(s, work, seconds_since(t_start), static_cast<std::size_t>(store_.size()), tree_->groups().size());
  s.nodes = static_cast<std::uint64_t>(cells.count());
}

}  // namespace gravpipe
