// The out-of-core domain tree (paged_domain_tree.hpp) as the walk, gathering and evaluation
// read it: one index space over cells in two places and particles in two places.
//
// Cells [0, base) are the local tree's, in the pages of PagedCells, numbered as built;
// cells [base, base + top.count()) are the grafted top (graft_over, tree_essential.hpp) in
// memory: the synthetic cells, the local root's stand-in (whose children are the paged
// local cells), and the received pieces. Every walk starts at `base`, the synthetic root.
// Particles [0, n_local) are the store's (through PagedParticles), the imported ones follow
// in memory. A leaf's particles lie on one side; a source piece of joined ranges
// (add_range) that straddles n_local is copied into the thread's buffer. Internal to src/tree.
#pragma once
#include <omp.h>

#include <cstdint>
#include <vector>

#include "gravpipe/paged_cells.hpp"
#include "gravpipe/paged_particles.hpp"
#include "gravpipe/particle_view.hpp"
#include "gravpipe/tree.hpp"

namespace gravpipe {

class GraftedPagedCellReader;

/// The cell accessor (tree.hpp) over the paged local cells and the grafted top.
class GraftedPagedCells {
 public:
  GraftedPagedCells(const PagedCells& local, const TreeNodes& top) : local_(local), top_(top) {}
  std::size_t count() const { return static_cast<std::size_t>(local_.count()) + top_.count(); }
  std::int32_t base() const { return static_cast<std::int32_t>(local_.count()); }
  GraftedPagedCellReader reader() const;

 private:
  friend class GraftedPagedCellReader;
  const PagedCells& local_;
  const TreeNodes& top_;
};

/// One thread's reader: its own pins of the local cell pages.
class GraftedPagedCellReader {
 public:
  explicit GraftedPagedCellReader(const GraftedPagedCells& c) : local_(c.local_.reader()), top_(c.top_), base_(c.base()) {}
  std::size_t count() const { return local_.count() + top_.count(); }
  std::int32_t root() const { return base_; }
  const WalkCell& walk(std::int32_t k) const { return k < base_ ? local_.walk(k) : top_.walk(k - base_); }
  CellTerms terms(std::int32_t k) const { return k < base_ ? local_.terms(k) : top_.terms(k - base_); }
  /// The relative criterion is refused out of core: never asked.
  double mass_size2(std::int32_t k) const { return local_.mass_size2(k); }

 private:
  PagedCellReader local_;
  InCoreCells top_;
  std::int32_t base_;
};

inline GraftedPagedCellReader GraftedPagedCells::reader() const { return GraftedPagedCellReader(*this); }

/// The particle accessor (particle_view.hpp) over the store's particles and the imported ones.
class GraftedPagedParticles {
 public:
  /// `x`..`m`: the imported particles (index n_local + k), in memory.
  GraftedPagedParticles(const PagedParticles& local, Span<const double> x, Span<const double> y,
                        Span<const double> z, Span<const double> m, int threads)
      : local_(local), x_(x), y_(y), z_(z), m_(m), n_local_(static_cast<std::int64_t>(local.size())),
        straddling_(static_cast<std::size_t>(threads > 0 ? threads : omp_get_max_threads())) {}
  std::size_t size() const { return static_cast<std::size_t>(n_local_) + m_.size(); }
  ParticleBlock block(std::int64_t b, std::int64_t e) const {
    if (e <= n_local_) return local_.block(b, e);
    if (b >= n_local_) {
      const auto o = static_cast<std::size_t>(b - n_local_);
      return {x_.data() + o, y_.data() + o, z_.data() + o, m_.data() + o, b, e};
    }
    return straddle(b, e);
  }
  void done_with(const ParticleBlock& block) const {
    if (block.end() <= n_local_) local_.done_with(block);
  }
  void release_thread() const { local_.release_thread(); }

 private:
  /// Particles [b, e) across n_local, copied (at most kSourcePiece of them: 32 KiB a thread).
  ParticleBlock straddle(std::int64_t b, std::int64_t e) const {
    std::vector<double>& buf = straddling_.at(static_cast<std::size_t>(omp_get_thread_num()));
    const auto n = static_cast<std::size_t>(e - b);
    buf.resize(4 * n);
    const ParticleBlock lo = local_.block(b, n_local_);
    for (std::int64_t k = b; k < e; ++k) {
      const auto q = static_cast<std::size_t>(k - b);
      if (k < n_local_) {
        buf[q] = lo.x(k), buf[n + q] = lo.y(k), buf[2 * n + q] = lo.z(k), buf[3 * n + q] = lo.m(k);
      } else {
        const auto i = static_cast<std::size_t>(k - n_local_);
        buf[q] = x_[i], buf[n + q] = y_[i], buf[2 * n + q] = z_[i], buf[3 * n + q] = m_[i];
      }
    }
    local_.done_with(lo);
    return {buf.data(), buf.data() + n, buf.data() + 2 * n, buf.data() + 3 * n, b, e};
  }
  const PagedParticles& local_;
  Span<const double> x_, y_, z_, m_;
  std::int64_t n_local_;
  mutable std::vector<std::vector<double>> straddling_;  // per thread
};

}  // namespace gravpipe
