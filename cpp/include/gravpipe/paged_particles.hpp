// The particle accessor over the out-of-core store (particle_view.hpp names the contract),
// so that the tree reads x, y, z, m from pages with the same code that reads arrays.
//
// Blocks are leased per thread. A block whose four columns (x, y, z, m) each lie inside one
// page (one page for all four when pos and mass share a page group, the store's default) is
// served straight from the pinned frames: the thread's lease keeps those pages
// pinned, so the many small blocks of a run of groups (leaves of nearby cells, mostly on the
// same few pages) cost a lookup in a short list, not a copy. A block that straddles a page
// boundary, or that comes when the lease already holds its share of the frames, is copied
// out of the pages into memory charged to the store's budget. release_thread() unpins and
// frees the calling thread's lease: the tree calls it after each run of groups and each
// chunk of leaf moments, so what a thread holds is bounded by one run's blocks, not the walk.
// The share of frames a lease may pin leaves every other thread, the read-ahead thread and
// transient pins a free frame, so a pin never waits on a frame that no one will release.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gravpipe/memory_budget.hpp"
#include "gravpipe/page_cache.hpp"
#include "gravpipe/particle_store.hpp"
#include "gravpipe/particle_view.hpp"

namespace gravpipe {

class PagedParticles {
 public:
  /// Positions from field `pos` (3 components), masses from `mass`, both float64. `threads`:
  /// the OpenMP threads that may ask for blocks at once (0: OpenMP's maximum); blocks are
  /// leased to omp_get_thread_num(). `read_ahead`: blocks hint the pages that follow them
  /// to the store's read-ahead, right for a sweep along the curve (the moments); the
  /// walk turns it off (its leaves jump about the curve, and the hinted pages evicted ones
  /// it needed: 16k of 18k read-ahead loads unused in one step at N = 1e6) and prefetches
  /// its lists' pages itself (walk_prefetch.hpp).
  /// `other_pins`: frames of the store's cache that another reader holds pinned meanwhile
  /// (the tree's build reads the keys through pinned pages while it sums leaves): the leases
  /// leave them out of their share.
  explicit PagedParticles(ParticleStore& store, std::string pos = "pos", std::string mass = "mass",
                          int threads = 0, bool read_ahead = true, int other_pins = 0);
  ~PagedParticles();
  PagedParticles(const PagedParticles&) = delete;
  PagedParticles& operator=(const PagedParticles&) = delete;

  std::size_t size() const { return static_cast<std::size_t>(store_.size()); }
  /// Particles [b, e), valid until the calling thread's release_thread(), release() or
  /// destruction. Safe from many threads (each its own lease).
  ParticleBlock block(std::int64_t b, std::int64_t e) const;
  /// Unpin and free every block handed to the calling thread.
  void release_thread() const;
  /// The calling thread is done with `block`, the latest it was handed: a copied block is
  /// freed (and its charge given back) here; a block served from pinned frames stays until
  /// release_thread(), its pins being the lease's bounded share of frames. Copies thus held
  /// at once are the run's sinks block and the one block being read.
  void done_with(const ParticleBlock& block) const;
  /// The most bytes any one thread's copies held at once, since construction.
  std::uint64_t peak_bytes_held() const;
  /// Free every thread's blocks (no block may be in use: between evaluations).
  void release();
  /// Bytes held by copied blocks (charged to the store's budget); pinned frames are the
  /// cache's and charged there.
  std::uint64_t bytes_held() const;
  /// Blocks served from pinned frames and blocks copied, since construction.
  std::uint64_t blocks_pinned() const;
  std::uint64_t blocks_copied() const;

 private:
  struct Lease;
  Lease& lease() const;
  ParticleBlock copy_block(Lease& l, std::int64_t b, std::int64_t e) const;

  ParticleStore& store_;
  const std::string pos_, mass_;
  std::int64_t per_page_;
  std::vector<std::int64_t> bases_;  // the distinct first pages of the x, y, z, m columns
  int column_page_[4];               // x, y, z, m: which of bases_ holds it
  std::size_t column_offset_[4];     // x, y, z, m: bytes from a page's start to the column
  std::size_t max_pinned_pages_;     // per lease: distinct local pages (bases_.size() frames each)
  bool read_ahead_;
  std::vector<std::unique_ptr<Lease>> leases_;  // one per thread
};

}  // namespace gravpipe
