// The octree over a stream of sorted keys (tree_stream.hpp).
#include "tree_stream.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "gravpipe/error.hpp"

namespace gravpipe {

namespace {
/// The top 3 level bits of `key`: what the keys of one cell at `level` share (0 at the root).
std::uint64_t prefix_of(std::uint64_t key, int level) { return key >> (3 * (kTreeMaxLevel - level)); }
}  // namespace

TreeStream::TreeStream(std::int64_t n, int n_leaf, TreeStreamSink& sink) : n_(n), n_leaf_(n_leaf), sink_(sink) {
  if (n < 1) throw InputError("tree stream: needs at least one particle");
  if (n_leaf < 1) throw InputError("tree stream: n_leaf must be >= 1, got " + std::to_string(n_leaf));
}

void TreeStream::feed(const std::uint64_t* keys, std::int64_t count) {
  if (count < 0 || fed() + count > n_)
    throw std::logic_error("tree stream: " + std::to_string(fed() + count) + " keys fed for " + std::to_string(n_));
  for (std::int64_t k = 0; k < count; ++k) {
    if (fed() + k > 0 && keys[k] < last_key_)
      throw InputError("out-of-core tree: the keys are not in curve order (key " + std::to_string(fed() + k) +
                       " is below key " + std::to_string(fed() + k - 1) + ")");
    last_key_ = keys[k];
  }
  window_.insert(window_.end(), keys, keys + count);
  while (next_ < n_ && step()) {
  }
  drop_done();
}

void TreeStream::finish() {
  if (fed() != n_) throw std::logic_error("tree stream: finished after " + std::to_string(fed()) + " of " +
                                          std::to_string(n_) + " keys");
  while (next_ < n_)
    if (!step()) throw std::logic_error("tree stream: a leaf wants keys past the last");
  close_to(-1, n_);
  drop_done();
}

bool TreeStream::step() {
  const std::uint64_t k = key(next_);
  // the split cells that particle next_ has left end here
  std::size_t keep = open_.size();
  while (keep > 0 && open_[keep - 1].prefix != prefix_of(k, open_[keep - 1].level)) --keep;
  close_to(keep == 0 ? -1 : open_[keep - 1].level, next_);
  // the cells that start here, down to the leaf (whether a cell is small needs the key n_leaf on)
  for (int level = open_.empty() ? 0 : open_.back().level + 1;; ++level) {
    const std::int64_t probe = next_ + n_leaf_;
    if (probe < n_ && probe >= fed()) return false;
    const bool small = probe >= n_ || prefix_of(key(probe), level) != prefix_of(k, level);
    if (small || level == kTreeMaxLevel) {
      const std::int64_t end = leaf_end(level);
      if (end < 0) return false;  // equal keys past the window: wait for its end
      sink_.leaf(level, next_, end);
      if (!open_.empty()) ++open_.back().children;
      next_ = end;
      return true;
    }
    open_.push_back(Open{next_, prefix_of(k, level), level, 0});
  }
}

std::int64_t TreeStream::leaf_end(int level) const {
  const std::uint64_t p = prefix_of(key(next_), level);
  std::int64_t j = next_ + 1;
  while (j < fed() && prefix_of(key(j), level) == p) ++j;
  return j < fed() || fed() == n_ ? j : -1;
}

void TreeStream::close_to(int level_above, std::int64_t end) {
  while (!open_.empty() && open_.back().level > level_above) {
    const Open c = open_.back();
    open_.pop_back();
    sink_.split(c.level, c.b, end, c.children);
    if (!open_.empty()) ++open_.back().children;
  }
}

void TreeStream::drop_done() {
  const std::int64_t done = std::min(next_, fed()) - base_;
  if (done <= 0) return;
  window_.erase(window_.begin(), window_.begin() + done);
  base_ += done;
}

}  // namespace gravpipe
