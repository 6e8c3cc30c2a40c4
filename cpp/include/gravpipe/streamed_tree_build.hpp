// The out-of-core tree built as the external sort writes the particles (store_sort.hpp,
// SortObserver), instead of in passes of its own that read them back (paged_tree_build.hpp):
// the merge's sorted keys stream past a count of the cells (tree_stream.hpp), and the
// permute's sorted positions and masses past the build of their records, each level's in
// curve order, whole pages of them written straight to the cells' file. The tree's reads of
// the keys (the count's and the build's binary searches) and of the positions and masses (the
// leaves' moments) are gone: at N = 1e7, ~0.5 GB a step (BENCHMARKS.md).
//
// The cells, groups and every moment are those of the pass that reads them back (and of the
// in-core tree), bit for bit: the same octree rule, the same moment arithmetic in the same
// order (cell_moments.hpp), the same breadth-first indices. PagedTree takes the result
// (PagedTree's constructor from BuiltCells) and widens the cells' cache to what the budget
// has left once the sort's buffers are gone.
//
// Memory: what it holds during the sort is charged to the store's budget: the groups, the
// cells' page tables and fewest frames, the pages of records under construction (one a
// level) and a window of the last particles (a leaf's worth, up to kStreamWindow). When the
// budget cannot hold them, or a leaf of equal keys outgrows the window, the build declines
// (declined() says why) and the tree is built after the sort, with the same result.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gravpipe/memory_budget.hpp"
#include "gravpipe/paged_cells.hpp"
#include "gravpipe/particle_store.hpp"
#include "gravpipe/store_sort.hpp"
#include "gravpipe/tree.hpp"

namespace gravpipe {

/// Particles the build's window may hold (the last leaf's, waiting for the next n_leaf keys).
constexpr std::int64_t kStreamWindow = 8192;

/// A tree's cells as the streamed build hands them to PagedTree.
struct BuiltCells {
  std::unique_ptr<PagedCells> cells;
  std::vector<Group> groups;      // in curve order
  Reservation groups_charge;
  std::int64_t leaves = 0;
};

class StreamedTreeBuild final : public SortObserver {
 public:
  /// A build of the tree `params` describes over the store's particles, which a sort is about
  /// to put in curve order (config.observer = this).
  StreamedTreeBuild(ParticleStore& store, const TreeParams& params);
  ~StreamedTreeBuild() override;
  StreamedTreeBuild(const StreamedTreeBuild&) = delete;
  StreamedTreeBuild& operator=(const StreamedTreeBuild&) = delete;

  void merged(std::int64_t begin, Span<const std::int64_t> keys) override;
  void merge_done() override;
  bool wants_bodies() const override;
  void permuted(std::int64_t begin, std::int64_t n, const void* x, const void* y, const void* z, const void* m,
                const std::int64_t* keys) override;
  void permute_done() override;

  /// Every record written and every group found: take() may be called.
  bool complete() const { return complete_; }
  /// Why the build stopped ("" unless it did).
  const std::string& declined() const { return declined_; }
  /// Seconds spent counting (in the merge) and building (in the permute, on its own thread).
  double seconds_count() const { return seconds_count_; }
  double seconds_build() const { return seconds_build_; }
  /// Bytes of the budget the build took for the permute (its groups, the cells' page tables
  /// and fewest frames, its pages and window).
  std::uint64_t charged() const { return charged_; }
  /// The cells and groups, for a tree of `params`: once, complete() only (std::logic_error
  /// otherwise); InputError, the build kept, when they were made with other parameters
  /// (n_leaf, n_crit, theta, quad_tol).
  BuiltCells take(const TreeParams& params);

 private:
  struct Count;
  struct Build;
  /// Stop, releasing everything, for `why`.
  void decline(const std::string& why);

  ParticleStore& store_;
  TreeParams params_;
  int threads_;
  std::unique_ptr<Count> count_;
  std::unique_ptr<Build> build_;
  bool complete_ = false, taken_ = false;
  std::string declined_;
  double seconds_count_ = 0, seconds_build_ = 0;
  std::uint64_t charged_ = 0;
};

}  // namespace gravpipe
