// The out-of-core tree's cell tables and their per-thread readers (paged_cells.hpp).
#include "gravpipe/paged_cells.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "gravpipe/error.hpp"

namespace gravpipe {

namespace {
/// Ways of a reader's sets of slots.
constexpr std::size_t kWays = 8;
/// Hinted cell pages that may wait for the read-ahead thread (a few per reader's miss).
constexpr std::size_t kCellReadAheadQueue = 16;

std::size_t checked_slots(std::size_t slots) {
  if (slots == 0 || (slots & (slots - 1)) != 0)
    throw InputError("pinned slots: a power of two >= 1 needed, got " + std::to_string(slots));
  return slots;
}
}  // namespace

PinnedSlots::PinnedSlots(PageCache& cache, std::size_t slots, PageCache::Access access, ReadAhead* ahead)
    : cache_(&cache),
      access_(access),
      ahead_(ahead),
      slots_(checked_slots(slots)),
      ways_(std::min(slots, kWays)),
      set_mask_(slots / ways_ - 1) {
  if (slots_.size() == 1) return;
  const auto pages = static_cast<std::size_t>(cache.pages());
  where_charge_ = cache.budget().reserve(pages * sizeof(std::int32_t),
                                         "a reader's table of " + std::to_string(pages) + " pinned pages");
  where_.assign(pages, -1);
}

void PinnedSlots::refill(Slot& s, std::int64_t page) {
  if (s.page == last_page_) last_page_ = -1, last_data_ = nullptr;  // its pin goes now
  if (s.page >= 0 && !where_.empty()) where_[static_cast<std::size_t>(s.page)] = -1;
  s.handle.reset();  // unpin first: the cache may need this frame
  s.page = -1;
  bool loaded = false;
  s.handle.emplace(cache_->pin(page, access_, &loaded));
  s.page = page;
  s.data = s.handle->data();
  if (!where_.empty()) where_[static_cast<std::size_t>(page)] = static_cast<std::int32_t>(&s - slots_.data());
  // a miss: the sweep at this level will want the next page soon (N = 1e7 at 1/10: walk
  // misses 12.1k -> 8.9k, 71% of the pages read ahead used)
  if (loaded && ahead_ != nullptr) ahead_->hint(page + 1);
}

void PinnedSlots::release() {
  last_page_ = -1, last_data_ = nullptr;
  for (Slot& s : slots_) {
    if (s.page >= 0 && !where_.empty()) where_[static_cast<std::size_t>(s.page)] = -1;
    s.handle.reset(), s.page = -1, s.data = nullptr;
  }
}

namespace {
/// log2 of the walk records a page holds: the largest power of two that fits.
int walk_shift_for(std::size_t page_bytes) {
  int shift = 0;
  while ((std::size_t{2} << shift) * sizeof(PagedCellRecord) <= page_bytes) ++shift;
  return shift;
}
}  // namespace

std::int64_t PagedCells::pages_for(std::int64_t cells, std::size_t page_bytes) {
  const std::int64_t per_page = std::int64_t{1} << walk_shift_for(page_bytes);
  return (cells + per_page - 1) / per_page;
}

PagedCells::PagedCells(ScratchFileShelf& shelf, std::size_t page_bytes, IoMode mode, Eviction eviction,
                       std::int64_t cells, std::int64_t frames, int threads, MemoryBudget& budget)
    : threads_(threads), cells_(cells), shelf_(shelf) {
  if (cells < 1) throw InputError("paged cells: need at least one cell");
  if (frames < least_frames(threads))
    throw InputError("paged cells: " + std::to_string(frames) + " frames, fewer than the " +
                     std::to_string(least_frames(threads)) + " that " + std::to_string(threads) + " threads need");
  PageFile::check_page_bytes(page_bytes);
  file_ = shelf_.take(page_bytes, mode);
  walk_shift_ = walk_shift_for(page_bytes);
  walk_mask_ = (std::int64_t{1} << walk_shift_) - 1;
  const std::int64_t pages = pages_for(cells, page_bytes);
  cache_ = std::make_unique<PageCache>(*file_, pages, std::min(frames, pages), eviction, budget);
  read_ahead_ = std::make_unique<ReadAhead>(*cache_, kCellReadAheadQueue);
  cache_->set_page_namer([this](std::int64_t page) {
    return "walk records of cells " + std::to_string(page << walk_shift_) + "..";
  });
  share_frames();
}

PagedCells::~PagedCells() {
  read_ahead_.reset();  // what reads and writes the file goes first
  cache_.reset();
  if (file_) shelf_.put(std::move(file_));
}

void PagedCells::share_frames() {
  // slots per reader: as many as leave each of threads + 1 readers its share with a frame to
  // spare for loads, a power of two, at most 256 (N = 1e7 at 1/10: 128 slots pin 4.0M times a
  // walk against 7.7M for 64, with the same misses)
  const std::int64_t share = std::max<std::int64_t>(1, (cache_->frames() - 2) / (threads_ + 1));
  slots_ = 1;
  while (slots_ * 2 <= static_cast<std::size_t>(std::min<std::int64_t>(share, 256))) slots_ *= 2;
}

void PagedCells::set_frames(std::int64_t frames) {
  if (frames < least_frames(threads_))
    throw InputError("paged cells: " + std::to_string(frames) + " frames, fewer than the " +
                     std::to_string(least_frames(threads_)) + " that " + std::to_string(threads_) + " threads need");
  cache_->set_frames(std::min(frames, cache_->pages()));
  share_frames();
}

PagedCellReader PagedCells::reader(bool write) const { return PagedCellReader(*this, write); }

PagedCellReader::PagedCellReader(const PagedCells& cells, bool write)
    : cells_(&cells),
      slots_(*cells.cache_, cells.slots_, write ? PageCache::Access::Modify : PageCache::Access::Read,
             write ? nullptr : cells.read_ahead_.get()) {}

double PagedCellReader::mass_size2(std::int32_t) const {
  throw InputError("out-of-core tree: the relative opening criterion (alpha > 0) is not available out of core");
}

}  // namespace gravpipe
