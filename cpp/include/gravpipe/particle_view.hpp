// Particles as the tree reads them: through an accessor, never through arrays it owns, so
// that the out-of-core store can later serve the same tree, walk and evaluation code from
// its pages (DESIGN.md, "What comes after": one code, bitwise identical results).
//
// An accessor is any type with
//   std::size_t size() const;                                   particles, in curve order
//   ParticleBlock block(std::int64_t b, std::int64_t e) const;  particles [b, e)
//   void release_thread() const;      the calling thread is done with its blocks
//   void done_with(const ParticleBlock&) const;  ... and with this one, its latest block
// where a block stays valid until the thread that asked for it calls release_thread() (or
// the evaluation ends), or done_with() of it, and block() may be called from many threads at
// once. done_with() is for blocks read once and at once (a list's sources as they are
// gathered, a leaf as its moments are summed): an accessor that copied the block frees the
// copy there, so that what a thread holds in copies is one such block, not all of a run's. The tree calls
// release_thread() where none of the thread's blocks is live any more (after each run of
// groups, after each chunk of leaf moments), so that an accessor that holds pages or copies
// for its blocks holds a run's worth, not the whole walk's. The tree asks for whole cells and
// groups, which are contiguous ranges of the curve order: a leaf's range when it gathers a
// list or sums moments, a run's range for its sinks. InCoreParticles is the accessor over
// arrays in memory, where block() is pointer arithmetic, inlined: the in-core tree pays
// nothing for the indirection. The store's accessor (paged_particles.hpp) pins the pages that hold [b, e).
#pragma once
#include <cstddef>
#include <cstdint>

#include "gravpipe/span.hpp"

namespace gravpipe {

/// Particles [begin, end) of a set in curve order, structure of arrays, each read by its
/// index in the whole set.
class ParticleBlock {
 public:
  /// x..m point at particle `begin`'s entries.
  ParticleBlock(const double* x, const double* y, const double* z, const double* m, std::int64_t begin,
                std::int64_t end)
      : x_(x), y_(y), z_(z), m_(m), begin_(begin), end_(end) {}

  std::int64_t begin() const { return begin_; }
  std::int64_t end() const { return end_; }
  double x(std::int64_t k) const { return x_[k - begin_]; }
  double y(std::int64_t k) const { return y_[k - begin_]; }
  double z(std::int64_t k) const { return z_[k - begin_]; }
  double m(std::int64_t k) const { return m_[k - begin_]; }
  /// Where particle begin()'s x lies (which memory serves the block).
  const double* x_data() const { return x_; }

 private:
  const double *x_, *y_, *z_, *m_;
  std::int64_t begin_, end_;
};

/// The accessor over structure-of-arrays spans in memory (the tree's sorted copies, or the
/// sorted points of forces_at).
class InCoreParticles {
 public:
  InCoreParticles(Span<const double> x, Span<const double> y, Span<const double> z, Span<const double> m)
      : x_(x), y_(y), z_(z), m_(m) {}

  std::size_t size() const { return m_.size(); }
  ParticleBlock block(std::int64_t b, std::int64_t e) const {
    return {x_.data() + b, y_.data() + b, z_.data() + b, m_.data() + b, b, e};
  }
  void release_thread() const {}  // the arrays outlive every block
  void done_with(const ParticleBlock&) const {}

 private:
  Span<const double> x_, y_, z_, m_;
};

/// The end of a run of groups in the tree's evaluation: blocks in memory need no release.
inline void release_run_blocks(const InCoreParticles&) {}

}  // namespace gravpipe
