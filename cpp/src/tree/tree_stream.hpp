// The octree met as the sorted keys stream past, in one pass and a look-ahead of n_leaf keys:
// the cells of octree_split.hpp's rule, each told to a sink when it is complete, children
// before their parent (post-order), each level's cells in curve order. So a pass that makes
// the sorted keys (the external sort's merge) can count the tree, and one that makes the
// sorted particles (its permute) can build it, without reading either back
// (streamed_tree_build.hpp). Internal to src/tree.
//
// Why a look-ahead of n_leaf keys is enough: a cell that starts at particle i holds at most
// n_leaf particles, and so is a leaf, exactly when particle i + n_leaf is outside it. A cell's
// end is needed only for a leaf (at most n_leaf on); a split cell ends where a later key
// leaves its prefix. Only a leaf at the last level (kTreeMaxLevel: equal keys) can hold more,
// and then its particles wait until its end comes.
#pragma once
#include <cstdint>
#include <vector>

#include "gravpipe/tree.hpp"

namespace gravpipe {

/// Told each cell once it is complete: children before their parent, each level's cells in
/// curve order (so a level's k-th call is its k-th cell in breadth-first order).
class TreeStreamSink {
 public:
  virtual ~TreeStreamSink() = default;
  /// A leaf: particles [b, e) at `level`.
  virtual void leaf(int level, std::int64_t b, std::int64_t e) = 0;
  /// A split cell [b, e) at `level`, after its `children` children (the last cells told one
  /// level down).
  virtual void split(int level, std::int64_t b, std::int64_t e, int children) = 0;
};

class TreeStream {
 public:
  /// A tree over `n` keys with leaves of at most `n_leaf` particles.
  TreeStream(std::int64_t n, int n_leaf, TreeStreamSink& sink);

  /// The next `count` keys (particles fed() ..), in curve order: every cell they complete is
  /// told. InputError when a key is below the one before.
  void feed(const std::uint64_t* keys, std::int64_t count);
  /// After the n-th key: the last cells, the root last.
  void finish();

  std::int64_t fed() const { return base_ + static_cast<std::int64_t>(window_.size()); }
  /// The first particle that a cell still to be told may hold: those before it are done with.
  std::int64_t next() const { return next_; }

 private:
  struct Open {  // a split cell whose end has not come
    std::int64_t b;
    std::uint64_t prefix;  // its keys' top 3 level bits
    int level;
    int children;
  };
  std::uint64_t key(std::int64_t i) const { return window_[static_cast<std::size_t>(i - base_)]; }
  /// Tell the cells that particle next_ completes and start its leaf; false when that needs
  /// keys not fed yet.
  bool step();
  /// Where the leaf at `level` that starts at next_ ends; -1 when that is past the keys fed.
  std::int64_t leaf_end(int level) const;
  void close_to(int level_above, std::int64_t end);  // tell the open cells below level_above
  void drop_done();

  std::int64_t n_;
  int n_leaf_;
  TreeStreamSink& sink_;
  std::vector<std::uint64_t> window_;  // keys of particles [base_, fed())
  std::int64_t base_ = 0;
  std::int64_t next_ = 0;  // the first particle not in a told leaf
  std::vector<Open> open_;  // root first
  std::uint64_t last_key_ = 0;
};

}  // namespace gravpipe
