// The out-of-core tree built as the external sort writes the particles
// (streamed_tree_build.hpp): a count over the merge's keys, then the records over the
// permute's positions and masses, both through TreeStream.
#include "gravpipe/streamed_tree_build.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <stdexcept>
#include <utility>

#include "cell_moments.hpp"
#include "gravpipe/aligned_buffer.hpp"
#include "gravpipe/batched_page_io.hpp"
#include "gravpipe/error.hpp"
#include "gravpipe/stopwatch.hpp"
#include "paged_tree_build.hpp"
#include "tree_stream.hpp"

namespace gravpipe {

namespace {

/// Keys fed to a stream at a time: its window then holds at most this and a leaf.
constexpr std::int64_t kFeed = kStreamWindow / 2;
/// Bytes the window holds a particle: its key, position and mass.
constexpr std::uint64_t kWindowBytesPerParticle = 40;
/// Bytes of finished record pages written at once (at least a page, at most
/// kMostPagesPerWrite): deep enough that the device sees the cells' writes beside the
/// permute's own, and that the build, which the permute waits for chunk by chunk, seldom
/// waits for a write (N = 1e7 on the scratch disk: permute 1.35-1.74 s with 8 pages of 64 KiB
/// a write, 1.20-1.33 s with 32; N = 1e8: 28.7 s with 2 pages of 1 MiB, against 8.0 s for
/// the permute alone).
constexpr std::size_t kRecordWriteBytes = std::size_t{16} << 20;
constexpr std::size_t kMostPagesPerWrite = 32;  // small pages: the requests a write keeps in flight

/// The cells' records as the build makes them, each level's in curve order. A page of one
/// level's records fills from its first record to its last: it is made in memory, one such
/// page a level at a time, and written straight to the cells' file when whole,
/// kRecordWriteBytes at a time, on a thread of its own while the next ones fill. A page where
/// levels meet (a level's first page, if the level before ends on it) fills from both ends at
/// once, the later level's first records early and the earlier level's last ones at the end
/// of the stream: those few pages go through the cells' cache instead.
class RecordPages {
 public:
  RecordPages(const PagedCells& cells, const std::vector<std::int64_t>& level_begin)
      : cells_(cells), page_bytes_(cells.file().page_bytes()), per_page_(cells.records_per_page()),
        per_write_(pages_per_write(page_bytes_)), meeting_(level_begin.size(), -1), current_(level_begin.size()),
        shared_(cells.reader(true)), io_(cells.file(), static_cast<int>(per_write_)) {
    for (std::size_t l = 0; l < level_begin.size(); ++l)
      if (level_begin[l] % per_page_ != 0 && level_begin[l] < cells.count()) meeting_[l] = level_begin[l] / per_page_;
  }
  ~RecordPages() {
    if (writing_.valid()) writing_.wait();  // its buffers are ours
  }

  /// Record k, of a cell at `level`.
  void put(int level, std::int64_t k, const PagedCellRecord& r) {
    const std::int64_t page = k / per_page_;
    const auto l = static_cast<std::size_t>(level);
    if (page == meeting_[l] || page == meeting_[l + 1]) {  // its level's first page, or its last
      shared_.put(k, r);
      return;
    }
    Open& p = current_[l];
    if (p.page != page) start(p, page);
    cells_.place(p.bytes.data(), k, r);
    if (++p.filled == expected(page)) finish_page(p);
  }

  /// Write what is left; every page of one level must be whole. The pages where levels meet
  /// stay in the cache, dirty, unpinned.
  void finish() {
    write();
    if (writing_.valid()) writing_.get();
    shared_.release();
    for (const Open& p : current_)
      if (p.page >= 0)
        throw std::logic_error("streamed tree build: page " + std::to_string(p.page) + " of records is " +
                               std::to_string(p.filled) + " of " + std::to_string(expected(p.page)));
  }

  /// Pages in memory at once, at most: one a level, and two writes' worth.
  static std::uint64_t most_pages(std::size_t levels, std::size_t page_bytes) {
    return levels + 2 * pages_per_write(page_bytes);
  }
  static std::size_t pages_per_write(std::size_t page_bytes) {
    return std::clamp<std::size_t>(kRecordWriteBytes / page_bytes, 1, kMostPagesPerWrite);
  }

 private:
  struct Open {
    std::int64_t page = -1;
    AlignedBuffer bytes;
    std::int64_t filled = 0;
  };
  std::int64_t expected(std::int64_t page) const { return std::min(per_page_, cells_.count() - page * per_page_); }
  void start(Open& p, std::int64_t page) {
    if (p.page >= 0)
      throw std::logic_error("streamed tree build: page " + std::to_string(p.page) + " left at " +
                             std::to_string(p.filled) + " records");
    if (free_.empty()) {
      p.bytes = AlignedBuffer(page_bytes_);
    } else {
      p.bytes = std::move(free_.back());
      free_.pop_back();
      std::memset(p.bytes.data(), 0, page_bytes_);  // a page's unused tail reads as the file's zeros
    }
    p.page = page, p.filled = 0;
  }
  void finish_page(Open& p) {
    done_.push_back(std::move(p));
    p = Open{};
    if (done_.size() >= per_write_) write();
  }
  /// The finished pages to the file on the writing thread, after the write before them.
  void write() {
    if (done_.empty()) return;
    if (writing_.valid()) writing_.get();  // rethrows its error; its buffers come back
    for (Open& p : writing_pages_) free_.push_back(std::move(p.bytes));
    writing_pages_ = std::move(done_);
    done_.clear();
    writing_ = std::async(std::launch::async, [this] {
      std::vector<BatchedPageIo::Page> pages;
      for (const Open& p : writing_pages_) pages.push_back({p.page, p.bytes.data()});
      cells_.write_pages(Span<const BatchedPageIo::Page>(pages.data(), pages.size()), io_);
    });
  }

  const PagedCells& cells_;
  std::size_t page_bytes_;
  std::int64_t per_page_;
  std::size_t per_write_;              // pages a write
  std::vector<std::int64_t> meeting_;  // per level: its first page if the level before ends there, or -1
  std::vector<Open> current_;          // per level: its page being filled
  PagedCellReader shared_;             // the pages where levels meet, through the cache
  BatchedPageIo io_;
  std::vector<Open> done_, writing_pages_;
  std::vector<AlignedBuffer> free_;
  std::future<void> writing_;
};

}  // namespace

/// The count: cells per level, leaves and groups, as count_paged_tree finds them. A group is
/// a cell that is a leaf or holds at most n_crit particles, with no group above it: as the
/// levels' counts only grow going up, exactly those whose parent holds more than n_crit, so
/// each cell's candidates are settled when it is.
struct StreamedTreeBuild::Count final : TreeStreamSink {
  Count(std::int64_t n, int n_leaf, int n_crit)
      : stream(n, n_leaf, *this), n_crit(n_crit), per_level(kTreeMaxLevel + 1, 0), candidates(kTreeMaxLevel + 1, 0) {}

  void leaf(int level, std::int64_t, std::int64_t) override {
    ++per_level[static_cast<std::size_t>(level)];
    ++leaves;
    candidate(level);
  }
  void split(int level, std::int64_t b, std::int64_t e, int) override {
    ++per_level[static_cast<std::size_t>(level)];
    std::int64_t& below = candidates[static_cast<std::size_t>(level)];
    if (e - b > n_crit) groups += below;
    below = 0;
    if (e - b <= n_crit) candidate(level);
  }
  void candidate(int level) {
    if (level == 0)
      ++groups;  // the root: no group above it
    else
      ++candidates[static_cast<std::size_t>(level) - 1];
  }
  std::int64_t cells() const {
    std::int64_t c = 0;
    for (std::int64_t l : per_level) c += l;
    return c;
  }

  TreeStream stream;
  int n_crit;
  std::vector<std::int64_t> per_level;
  std::vector<std::int64_t> candidates;  // per level: the open cell's children that may be groups
  std::int64_t leaves = 0, groups = 0;
  Reservation window_charge;
};

/// The records: each cell's moments from its particles (a leaf) or its children's, written
/// at its breadth-first index (where its level begins and the cells of that level told
/// before it); the groups kept in curve order, a cell's candidates below it replaced by it.
struct StreamedTreeBuild::Build final : TreeStreamSink {
  Build(std::int64_t n, const TreeParams& p, const std::vector<std::int64_t>& per_level, BuiltCells built)
      : stream(n, p.n_leaf, *this), params(p), out(std::move(built)), level_begin(begins(per_level)),
        told(per_level.size() + 1, 0), kids(per_level.size() + 1), pages(*out.cells, level_begin) {
    for (auto& k : kids) k.reserve(8);
    for (std::vector<double>* v : {&x, &y, &z, &m}) v->reserve(static_cast<std::size_t>(kStreamWindow + kFeed));
  }

  void leaf(int level, std::int64_t b, std::int64_t e) override {
    const auto at = static_cast<std::size_t>(b - base);
    const ParticleBlock block(x.data() + at, y.data() + at, z.data() + at, m.data() + at, b, e);
    tell(level, b, e, leaf_moments(block, b, e), -1, 0, true);
  }
  void split(int level, std::int64_t b, std::int64_t e, int children) override {
    std::vector<CellMoments>& km = kids[static_cast<std::size_t>(level)];
    if (static_cast<int>(km.size()) != children)
      throw std::logic_error("streamed tree build: a cell told " + std::to_string(children) + " children, " +
                             std::to_string(km.size()) + " made");
    const CellMoments c = parent_moments(km.data(), children);
    km.clear();
    const auto below = static_cast<std::size_t>(level) + 1;
    const std::int64_t first = level_begin[below] + told[below] - children;
    tell(level, b, e, c, static_cast<std::int32_t>(first), children, e - b <= params.n_crit);
  }
  void tell(int level, std::int64_t b, std::int64_t e, const CellMoments& c, std::int32_t first_child, int children,
            bool may_group) {
    const auto l = static_cast<std::size_t>(level);
    pages.put(level, level_begin[l] + told[l]++, record_of(c, b, e, first_child, children, params.theta, params.quad_tol));
    if (may_group) {  // the highest such cell is the group: it replaces those below it
      while (!out.groups.empty() && out.groups.back().i_begin >= b) out.groups.pop_back();
      out.groups.push_back(group_of(c, b, e));
    }
    if (level > 0) kids[l - 1].push_back(c);
  }
  /// Where each level begins in breadth-first order, and the end of the last.
  static std::vector<std::int64_t> begins(const std::vector<std::int64_t>& per_level) {
    std::vector<std::int64_t> b(per_level.size() + 1, 0);
    for (std::size_t l = 0; l < per_level.size(); ++l) b[l + 1] = b[l] + per_level[l];
    return b;
  }
  /// Particles [base, ...) no cell still to be told holds go.
  void drop_done() {
    const std::int64_t done = stream.next() - base;
    if (done <= 0) return;
    for (std::vector<double>* v : {&x, &y, &z, &m}) v->erase(v->begin(), v->begin() + done);
    base += done;
  }

  TreeStream stream;
  TreeParams params;
  BuiltCells out;
  std::vector<std::int64_t> level_begin, told;
  std::vector<std::vector<CellMoments>> kids;  // per level: the open cell's children's moments
  std::vector<double> x, y, z, m;              // particles [base, stream.fed())
  std::int64_t base = 0;
  RecordPages pages;
  Reservation window_charge, pages_charge;
};

StreamedTreeBuild::StreamedTreeBuild(ParticleStore& store, const TreeParams& params)
    : store_(store), params_(params), threads_(params.threads > 0 ? params.threads : omp_get_max_threads()) {
  check_tree_params(params_);
  if (store.size() < 1) {
    decline("an empty store");
    return;
  }
  count_ = std::make_unique<Count>(store.size(), params.n_leaf, params.n_crit);
  try {
    count_->window_charge = store.budget().reserve((kStreamWindow + kFeed) * sizeof(std::uint64_t),
                                                   "the streamed tree count's window");
  } catch (const BudgetError& e) {
    decline(std::string("the budget: ") + e.what());
  }
}

StreamedTreeBuild::~StreamedTreeBuild() = default;

void StreamedTreeBuild::decline(const std::string& why) {
  if (declined_.empty()) declined_ = why;
  build_.reset();
  count_.reset();
  complete_ = false;
}

void StreamedTreeBuild::merged(std::int64_t begin, Span<const std::int64_t> keys) {
  if (!count_) return;
  const auto t0 = Clock::now();
  if (begin != count_->stream.fed()) throw std::logic_error("streamed tree build: keys out of order");
  // int64 and uint64 may alias: the keys are non-negative
  const auto* k = reinterpret_cast<const std::uint64_t*>(keys.data());
  for (std::size_t at = 0; at < keys.size() && count_; at += kFeed) {
    count_->stream.feed(k + at, std::min<std::int64_t>(kFeed, static_cast<std::int64_t>(keys.size() - at)));
    if (count_->stream.fed() - count_->stream.next() > kStreamWindow)
      decline("a leaf of more than " + std::to_string(kStreamWindow - kFeed) + " equal keys");
  }
  seconds_count_ += seconds_since(t0);
}

void StreamedTreeBuild::merge_done() {
  if (!count_) return;
  const auto t0 = Clock::now();
  count_->stream.finish();
  const std::int64_t cells = count_->cells();
  if (cells > INT32_MAX) {
    decline(std::to_string(cells) + " cells exceed the 32-bit cell index");
    return;
  }
  BuiltCells out;
  out.leaves = count_->leaves;
  const std::size_t page = store_.page_bytes();
  try {
    MemoryBudget& budget = store_.budget();
    const std::uint64_t used_before = budget.used();
    out.groups_charge = budget.reserve(static_cast<std::uint64_t>(count_->groups) * sizeof(Group),
                                       "the tree's " + std::to_string(count_->groups) + " groups");
    out.cells = std::make_unique<PagedCells>(store_.scratch_shelf(), page, store_.file().mode(), store_.eviction(),
                                             cells, PagedCells::least_frames(threads_), threads_, budget);
    // its frames grow for the walk (PagedTree); the records go past them, whole pages at once
    out.groups.reserve(static_cast<std::size_t>(count_->groups));
    Reservation window = budget.reserve((kStreamWindow + kFeed) * kWindowBytesPerParticle,
                                        "the streamed tree build's window");
    Reservation pages = budget.reserve(RecordPages::most_pages(count_->per_level.size(), page) * page,
                                       "the streamed tree build's pages");
    charged_ = budget.used() - used_before;
    build_ = std::make_unique<Build>(store_.size(), params_, count_->per_level, std::move(out));
    build_->window_charge = std::move(window);
    build_->pages_charge = std::move(pages);
  } catch (const BudgetError& e) {
    decline(std::string("the budget: ") + e.what());
    return;
  }
  count_.reset();
  seconds_count_ += seconds_since(t0);
}

bool StreamedTreeBuild::wants_bodies() const { return build_ != nullptr; }

void StreamedTreeBuild::permuted(std::int64_t begin, std::int64_t n, const void* x, const void* y, const void* z,
                                 const void* m, const std::int64_t* keys) {
  if (!build_) return;
  const auto t0 = Clock::now();
  Build& b = *build_;
  if (begin != b.stream.fed()) throw std::logic_error("streamed tree build: particles out of order");
  const auto* k = reinterpret_cast<const std::uint64_t*>(keys);
  for (std::int64_t at = 0; at < n && build_; at += kFeed) {
    const std::int64_t c = std::min(kFeed, n - at);
    // the pages hold the values' bytes: copied, not reinterpreted
    const void* from[4] = {x, y, z, m};
    std::vector<double>* to[4] = {&b.x, &b.y, &b.z, &b.m};
    for (int q = 0; q < 4; ++q) {
      const std::size_t was = to[q]->size();
      to[q]->resize(was + static_cast<std::size_t>(c));
      std::memcpy(to[q]->data() + was, static_cast<const unsigned char*>(from[q]) + at * 8, static_cast<std::size_t>(c) * 8);
    }
    b.stream.feed(k + at, c);
    b.drop_done();
    if (b.stream.fed() - b.stream.next() > kStreamWindow)
      decline("a leaf of more than " + std::to_string(kStreamWindow - kFeed) + " equal keys");
  }
  seconds_build_ += seconds_since(t0);
}

void StreamedTreeBuild::permute_done() {
  if (!build_) return;
  const auto t0 = Clock::now();
  Build& b = *build_;
  b.stream.finish();
  b.pages.finish();
  for (std::size_t l = 0; l + 1 < b.level_begin.size(); ++l)
    if (b.told[l] != b.level_begin[l + 1] - b.level_begin[l])
      throw std::logic_error("streamed tree build: level " + std::to_string(l) + " told " + std::to_string(b.told[l]) +
                             " cells, counted " + std::to_string(b.level_begin[l + 1] - b.level_begin[l]));
  if (static_cast<std::int64_t>(b.out.groups.size()) * sizeof(Group) != b.out.groups_charge.bytes())
    throw std::logic_error("streamed tree build: " + std::to_string(b.out.groups.size()) + " groups, counted " +
                           std::to_string(b.out.groups_charge.bytes() / sizeof(Group)));
  complete_ = true;
  seconds_build_ += seconds_since(t0);
}

BuiltCells StreamedTreeBuild::take(const TreeParams& params) {
  if (taken_) throw std::logic_error("streamed tree build: its cells were taken already (by an earlier tree)");
  if (!complete_ || !build_)
    throw std::logic_error("streamed tree build: not complete" + (declined_.empty() ? std::string() : " (" + declined_ + ")"));
  if (params.n_leaf != params_.n_leaf || params.n_crit != params_.n_crit || params.theta != params_.theta ||
      params.quad_tol != params_.quad_tol)
    throw InputError("out-of-core tree: the cells built in the sort were made with other parameters (n_leaf, n_crit, "
                     "theta, quad_tol) than this tree's");
  BuiltCells out = std::move(build_->out);
  build_.reset();
  complete_ = false, taken_ = true;
  return out;
}

}  // namespace gravpipe
