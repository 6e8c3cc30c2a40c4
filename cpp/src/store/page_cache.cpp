// The page cache: pin/unpin, loading with write-back of the victim, flush, CRC checks.
#include "gravpipe/page_cache.hpp"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "eviction.hpp"
#include "gravpipe/batched_page_io.hpp"
#include "gravpipe/crc32c.hpp"
#include "gravpipe/error.hpp"

namespace gravpipe {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

}  // namespace

Eviction parse_eviction(const std::string& name) {
  if (name == "clock") return Eviction::Clock;
  if (name == "lru") return Eviction::Lru;
  throw InputError("eviction: unknown policy '" + name + "' (expected clock or lru)");
}

std::string eviction_name(Eviction e) { return e == Eviction::Clock ? "clock" : "lru"; }

PageHandle::~PageHandle() {
  if (cache_ != nullptr) cache_->unpin(frame_);
}

PageCache::PageCache(const PageFile& file, std::int64_t pages, std::int64_t frames, Eviction eviction,
                     MemoryBudget& budget)
    : file_(file), pages_(pages), page_bytes_(file.page_bytes()), eviction_(eviction), budget_(&budget) {
  if (frames < 1) throw InputError("page cache: needs at least one frame");
  const auto nframes = static_cast<std::uint64_t>(frames);
  tables_charge_ = budget.reserve(static_cast<std::uint64_t>(pages) * kTableBytesPerPage,
                                  "the page checksum table (" + std::to_string(pages) + " pages)");
  frames_charge_ = budget.reserve(nframes * page_bytes_, "the page cache (" + std::to_string(frames) +
                                                             " frames of " + format_bytes(page_bytes_) + ")");
  memory_ = AlignedBuffer(nframes * page_bytes_);
  frames_.resize(nframes);
  crc_.assign(static_cast<std::size_t>(pages), 0);
  written_.assign(static_cast<std::size_t>(pages), 0);
  table_.assign(static_cast<std::size_t>(pages), kNoFrame);
  policy_ = std::make_unique<EvictionPolicy>(eviction, nframes);
}

PageCache::~PageCache() = default;

unsigned char* PageCache::frame_data(int frame) const {
  return memory_.data() + static_cast<std::size_t>(frame) * page_bytes_;
}

std::string PageCache::describe(std::int64_t page) const {
  std::string s = "page " + std::to_string(page);
  if (namer_) s += " (" + namer_(page) + ")";
  return s;
}

StoreError PageCache::named(const StoreError& e, std::int64_t page) const {
  // the file knows the page's number; the store knows what it holds
  if (!namer_) return e;
  return StoreError(std::string(e.what()) + " [" + describe(page) + "]", e.path(), e.page());
}

void PageCache::fail_io(const char* doing, std::int64_t page, int error) const {
  try {
    file_.fail(doing, page, error);
  } catch (const StoreError& e) {
    throw named(e, page);
  }
}

void PageCache::note_stored(std::int64_t page, std::uint32_t crc) {
  crc_[static_cast<std::size_t>(page)] = crc;
  written_[static_cast<std::size_t>(page)] = kStored;
  ++counters_.pages_written;
  counters_.bytes_written += static_cast<std::int64_t>(page_bytes_);
}

PageHandle PageCache::pin(std::int64_t page, Access access, bool* stalled) {
  if (page < 0 || page >= pages_)
    throw InputError("page cache: page " + std::to_string(page) + " outside [0, " + std::to_string(pages_) + ")");
  const int frame = acquire(page, access, false, stalled);
  PageHandle h(this, frame, frame_data(frame));  // unpins if a check below throws
  if constexpr (kDebugChecks) {
    std::lock_guard<std::mutex> lock(mutex_);
    check_invariants(frame, page, false);
  }
  return h;
}

void PageCache::check_invariants(int pinned_frame, std::int64_t page, bool sweep) const {
#if GRAVPIPE_DEBUG_CHECKS
  GRAVPIPE_DEBUG_ASSERT(unpin_error_.empty(), unpin_error_);
  GRAVPIPE_DEBUG_ASSERT(budget_->used() <= budget_->total(), "charged " + std::to_string(budget_->used()) +
                                                                 " of " + std::to_string(budget_->total()));
  GRAVPIPE_DEBUG_ASSERT(frames_charge_.bytes() == frames_.size() * page_bytes_,
                        std::to_string(frames_.size()) + " frames, " + std::to_string(frames_charge_.bytes()) +
                            " bytes charged for them");
  GRAVPIPE_DEBUG_ASSERT(tables_charge_.bytes() == static_cast<std::uint64_t>(pages_) * kTableBytesPerPage,
                        std::to_string(tables_charge_.bytes()) + " bytes charged for the tables");
  GRAVPIPE_DEBUG_ASSERT(prefetched_unused_ >= 0 && prefetches_in_flight_ >= 0,
                        "prefetched unused " + std::to_string(prefetched_unused_) + ", in flight " +
                            std::to_string(prefetches_in_flight_));
  GRAVPIPE_DEBUG_ASSERT(counters_.bytes_read == counters_.pages_read * static_cast<std::int64_t>(page_bytes_) &&
                            counters_.bytes_written == counters_.pages_written * static_cast<std::int64_t>(page_bytes_),
                        "page and byte counters disagree");
  if (pinned_frame >= 0) {
    const Frame& fr = frames_[static_cast<std::size_t>(pinned_frame)];
    GRAVPIPE_DEBUG_ASSERT(fr.page == page && frame_of(page) == pinned_frame && fr.pins >= 1,
                          "page " + std::to_string(page) + " pinned in frame " + std::to_string(pinned_frame) +
                              ", which holds page " + std::to_string(fr.page) + " with " +
                              std::to_string(fr.pins) + " pins; the table says frame " +
                              std::to_string(frame_of(page)));
  }
  if (!sweep) return;
  for (std::size_t f = 0; f < frames_.size(); ++f) {
    const Frame& fr = frames_[f];
    GRAVPIPE_DEBUG_ASSERT(fr.pins >= 0, "frame " + std::to_string(f) + " has " + std::to_string(fr.pins) + " pins");
    GRAVPIPE_DEBUG_ASSERT(fr.state != State::Ready || (fr.page >= 0 && frame_of(fr.page) == static_cast<int>(f)),
                          "frame " + std::to_string(f) + " is ready with page " + std::to_string(fr.page) +
                              ", which the table puts in frame " + std::to_string(frame_of(fr.page)));
    GRAVPIPE_DEBUG_ASSERT(fr.state != State::Empty || (fr.page < 0 && fr.pins == 0 && !fr.dirty),
                          "empty frame " + std::to_string(f) + " holds page " + std::to_string(fr.page));
  }
  for (std::int64_t p = 0; p < pages_; ++p) {
    const int f = frame_of(p);
    if (f == kNoFrame) continue;
    GRAVPIPE_DEBUG_ASSERT(f >= 0 && f < frames() && (frames_[static_cast<std::size_t>(f)].page == p ||
                                                     frames_[static_cast<std::size_t>(f)].state == State::Busy),
                          "the table puts page " + std::to_string(p) + " in frame " + std::to_string(f) +
                              ", which holds another");
  }
#else
  (void)pinned_frame, (void)page, (void)sweep;
#endif
}

bool PageCache::prefetch(std::int64_t page) {
  if (page < 0 || page >= pages_) return false;
  return acquire(page, Access::Read, true) >= 0;
}

bool PageCache::resident(std::int64_t page) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const int f = frame_of(page);
  return f != kNoFrame && frames_[static_cast<std::size_t>(f)].state == State::Ready &&
         frames_[static_cast<std::size_t>(f)].page == page;
}

int PageCache::acquire(std::int64_t page, Access access, bool prefetch, bool* stalled) {
  std::unique_lock<std::mutex> lock(mutex_);
  // the clock starts when the pin first waits or loads: a hit (most pins) reads no clock
  Clock::time_point t0{};
  bool waited = false;
  const auto start_stall = [&] {
    if (!waited) t0 = Clock::now();
    waited = true;
    if (stalled != nullptr) *stalled = true;
  };
  for (;;) {
    const int f = frame_of(page);
    if (f != kNoFrame) {
      if (prefetch) return -1;  // here or on its way
      Frame& fr = frames_[static_cast<std::size_t>(f)];
      if (fr.state == State::Busy || fr.page != page) {  // being loaded, or its frame being written back
        start_stall();
        changed_.wait(lock);
        continue;
      }
      ++fr.pins;
      fr.dirty = fr.dirty || access != Access::Read;
      policy_->touch(static_cast<std::size_t>(f));
      if (fr.prefetched) {
        ++counters_.prefetch_hits;
        --prefetched_unused_;
      }
      fr.prefetched = false;
      if (waited) {
        ++counters_.misses;
        counters_.stall_seconds += seconds_since(t0);
      } else {
        ++counters_.hits;
      }
      return f;
    }
    const auto evictable = [this](std::size_t k) { return frames_[k].pins == 0 && frames_[k].state != State::Busy; };
    // a prefetch takes only a cold frame, and only while few prefetched pages wait unused:
    // speculative loads never push out what the compute threads use
    const int victim = !prefetch                                  ? policy_->victim(evictable)
                       : prefetched_unused_ + prefetches_in_flight_ >= max_prefetched_() ? -1
                                                                  : policy_->cold_victim(evictable);
    if (victim >= 0 && !prefetch && file_.mode() == IoMode::Direct && frames_[static_cast<std::size_t>(victim)].dirty) {
      // write it back with other dirty frames about to give way, their writes in flight
      // together, then choose again: each stays resident, clean
      start_stall();
      clean_with_cold_neighbours(victim, lock);
      continue;
    }
    if (victim >= 0) {
      if (!prefetch) start_stall();
      const int loaded = load_into(victim, page, access, prefetch, lock);
      if (!prefetch) {
        ++counters_.misses;
        counters_.stall_seconds += seconds_since(t0);
      }
      return loaded;
    }
    if (prefetch) return -1;  // every frame in use: read-ahead never waits
    start_stall();
    changed_.wait(lock);
  }
}

// Called and returning with the lock held; releases it around the file I/O.
int PageCache::load_into(int f, std::int64_t page, Access access, bool prefetch, std::unique_lock<std::mutex>& lock) {
  const Claim c = claim(f, page, prefetch);
  write_back_claimed(c, lock);
  lock.unlock();
  try {
    if (access != Access::Overwrite) read_in(page, frame_data(f));
  } catch (...) {
    lock.lock();
    drop_claim(c);
    throw;
  }
  lock.lock();
  complete_claim(c, access, access != Access::Overwrite);
  return f;
}

namespace {
/// Dirty frames written back together when a thread must evict one (the victim and the cold
/// ones found after it): one wait for a batch in flight instead of a synchronous pwrite,
/// with its sleep, wake and (on a virtual disk) doorbell, per eviction. N = 1e7 at 1/10 on the
/// scratch disk: the tree build's record writes waited ~1 thread-s a build for their victims'
/// write-backs, one page at a time.
constexpr std::size_t kCleanBatch = 16;
}  // namespace

// Called and returning with the lock held; releases it around the writes. `victim` is
// dirty, unpinned and ready; it and up to kCleanBatch - 1 other such frames that the policy
// would give up soon are marked busy (a pin of their pages waits), written through one
// BatchedPageIo batch, and made clean and ready again, their pages still resident. A page
// whose write fails stays dirty, as a failed eviction leaves it; the victim's failure is
// raised (the others' are met by whoever evicts them next).
std::size_t PageCache::clean_with_cold_neighbours(int victim, std::unique_lock<std::mutex>& lock) {
  const std::size_t n = frames_.size();
  std::vector<int> batch{victim};
  for (std::size_t step = 1; step < n && batch.size() < kCleanBatch; ++step) {
    const std::size_t f = (static_cast<std::size_t>(victim) + step) % n;
    const Frame& fr = frames_[f];
    if (fr.state == State::Ready && fr.dirty && fr.pins == 0 && policy_->cold(f)) batch.push_back(static_cast<int>(f));
  }
  std::vector<BatchedPageIo::Page> pages;
  for (const int f : batch) {
    frames_[static_cast<std::size_t>(f)].state = State::Busy;
    pages.push_back({frames_[static_cast<std::size_t>(f)].page, frame_data(f)});
  }
  // an AIO context of the cache's pool: setting one up and tearing it down costs
  // milliseconds (io_destroy waits for the kernel's RCU grace period), far more than a batch
  std::unique_ptr<BatchedPageIo> io;
  if (!idle_writers_.empty()) {
    io = std::move(idle_writers_.back());
    idle_writers_.pop_back();
  }
  lock.unlock();
  std::vector<std::uint32_t> crcs(pages.size());
  std::vector<int> errors(pages.size(), EIO);
  try {
    for (std::size_t k = 0; k < pages.size(); ++k) crcs[k] = crc32c(Span<const unsigned char>(pages[k].data, page_bytes_));
    if (!io) io = std::make_unique<BatchedPageIo>(file_, static_cast<int>(kCleanBatch));
    io->write(Span<const BatchedPageIo::Page>(pages.data(), pages.size()), Span<int>(errors.data(), errors.size()));
  } catch (...) {  // no AIO context could even be set up: every page stays dirty
  }
  lock.lock();
  if (io) idle_writers_.push_back(std::move(io));
  for (std::size_t k = 0; k < batch.size(); ++k) {
    Frame& fr = frames_[static_cast<std::size_t>(batch[k])];
    fr.state = State::Ready;
    if (errors[k] != 0) continue;
    note_stored(pages[k].page, crcs[k]);
    fr.dirty = false;
  }
  changed_.notify_all();
  if (errors[0] != 0) fail_io("writing", pages[0].page, errors[0]);
  return batch.size();
}

std::size_t PageCache::clean_cold() {
  if (file_.mode() != IoMode::Direct) return 0;  // buffered: the kernel writes behind already
  std::unique_lock<std::mutex> lock(mutex_);
  const std::size_t n = frames_.size();
  for (std::size_t step = 0; step < n; ++step) {
    const std::size_t f = (policy_->next() + step) % n;
    const Frame& fr = frames_[f];
    if (fr.state != State::Ready || !fr.dirty || fr.pins != 0 || !policy_->cold(f)) continue;
    try {
      return clean_with_cold_neighbours(static_cast<int>(f), lock);
    } catch (const std::exception&) {  // the page stays dirty: its eviction raises the error
      return 0;
    }
  }
  return 0;
}

// With the lock held: frame f is given to `page`, busy until complete_claim or drop_claim.
PageCache::Claim PageCache::claim(int f, std::int64_t page, bool prefetch) {
  Frame& fr = frames_[static_cast<std::size_t>(f)];
  const Claim c{f, page, fr.page, fr.state == State::Ready && fr.dirty, prefetch};
  if (c.old >= 0 && !c.write_old) {
    unmap(c.old);
    ++counters_.evictions;
  }
  // While busy, both the old page (if it is being written back) and the new one map to this
  // frame, so anyone asking for either waits rather than reading the file half-way.
  fr.page = page;
  fr.state = State::Busy;
  if (fr.prefetched) --prefetched_unused_;  // evicted unused
  fr.prefetched = false;
  table_[static_cast<std::size_t>(page)] = f;
  if (prefetch) ++prefetches_in_flight_;
  return c;
}

// Called and returning with the lock held; releases it around the write.
void PageCache::write_back_claimed(const Claim& c, std::unique_lock<std::mutex>& lock) {
  if (!c.write_old) return;
  Frame& fr = frames_[static_cast<std::size_t>(c.frame)];
  lock.unlock();
  try {
    write_back(c.old, frame_data(c.frame));
  } catch (...) {
    lock.lock();
    if (c.prefetch) --prefetches_in_flight_;
    unmap(c.page);  // keep the old page, still dirty: its data exists nowhere else
    fr.page = c.old;
    fr.state = State::Ready;
    changed_.notify_all();
    throw;
  }
  lock.lock();
  unmap(c.old);
  ++counters_.evictions;
  fr.dirty = false;
}

// With the lock held: the claimed page could not be read; its frame is left empty.
void PageCache::drop_claim(const Claim& c) {
  if (c.prefetch) --prefetches_in_flight_;
  unmap(c.page);
  frames_[static_cast<std::size_t>(c.frame)] = Frame{};
  changed_.notify_all();
}

// With the lock held: the claimed page's bytes are in its frame (read when `was_read`).
void PageCache::complete_claim(const Claim& c, Access access, bool was_read) {
  Frame& fr = frames_[static_cast<std::size_t>(c.frame)];
  if (was_read && written_[static_cast<std::size_t>(c.page)] == kStored) {
    ++counters_.pages_read;
    counters_.bytes_read += static_cast<std::int64_t>(page_bytes_);
    ++counters_.checksum_checks;
  }
  if (c.prefetch) {
    ++counters_.prefetched;
    ++prefetched_unused_;
    --prefetches_in_flight_;
  }
  fr.state = State::Ready;
  fr.dirty = access != Access::Read;
  fr.pins = c.prefetch ? 0 : 1;
  fr.prefetched = c.prefetch;
  policy_->touch(static_cast<std::size_t>(c.frame));
  changed_.notify_all();
}

std::int64_t PageCache::prefetch_many(Span<const std::int64_t> pages, BatchedPageIo& reads) {
  std::vector<Claim> claims;
  std::int64_t failed = 0;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto evictable = [this](std::size_t k) { return frames_[k].pins == 0 && frames_[k].state != State::Busy; };
    bool full = false;
    for (std::size_t k = 0; k < pages.size() && !full;) {
      const std::int64_t page = pages[k];
      if (page < 0 || page >= pages_ || frame_of(page) != kNoFrame) {  // here or on its way
        ++k;
        continue;
      }
      if (prefetched_unused_ + prefetches_in_flight_ >= max_prefetched_()) break;
      const int victim = policy_->cold_victim(evictable);
      if (victim < 0) break;
      if (file_.mode() == IoMode::Direct && frames_[static_cast<std::size_t>(victim)].dirty) {
        // as acquire() does: the victim and other cold dirty frames written in one batch,
        // then choose again (the lock was let go: this page may have arrived meanwhile)
        try {
          clean_with_cold_neighbours(victim, lock);
        } catch (...) {  // the victim stays dirty; a later pin or flush reports its error
          ++failed;
          full = true;
        }
        continue;
      }
      claims.push_back(claim(victim, page, true));
      ++k;
    }
    // dirty victims (without direct I/O) go out first, one at a time, as prefetch() writes
    // its victim back
    for (std::size_t k = 0; k < claims.size();) {
      try {
        write_back_claimed(claims[k], lock);
        ++k;
      } catch (...) {  // the old page stays, dirty; a later pin or flush reports the error
        ++failed;
        claims.erase(claims.begin() + static_cast<std::ptrdiff_t>(k));
      }
    }
  }
  // unwritten pages read as zeros; the others come from the file all at once
  std::vector<BatchedPageIo::Page> to_read;
  std::vector<std::size_t> read_claim;
  std::vector<std::uint8_t> good(claims.size(), 1);
  for (std::size_t k = 0; k < claims.size(); ++k) {
    unsigned char* data = frame_data(claims[k].frame);
    const std::uint8_t state = written_[static_cast<std::size_t>(claims[k].page)];
    if (state == kNotStored) {
      std::memset(data, 0, page_bytes_);
    } else if (state == kWriteFailed) {
      good[k] = 0;  // the pin that wants it raises the error
    } else {
      to_read.push_back({claims[k].page, data});
      read_claim.push_back(k);
    }
  }
  std::vector<int> errors(to_read.size());
  reads.read(Span<const BatchedPageIo::Page>(to_read.data(), to_read.size()), Span<int>(errors.data(), errors.size()));
  for (std::size_t r = 0; r < to_read.size(); ++r) {
    // a failed read or a bad checksum leaves the page out: the pin that wants it reads it
    // again and raises the error, naming the page, in the thread that needs the data
    good[read_claim[r]] = errors[r] == 0 && crc_matches(to_read[r].page, to_read[r].data);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t k = 0; k < claims.size(); ++k) {
    if (good[k]) {
      complete_claim(claims[k], Access::Read, true);
    } else {
      drop_claim(claims[k]);
      ++failed;
    }
  }
  return failed;
}

// The page is busy in its frame, so no one else writes its bytes, its CRC or its flag.
void PageCache::write_back(std::int64_t page, const unsigned char* data) {
  const std::uint32_t crc = crc32c(Span<const unsigned char>(data, page_bytes_));
  try {
    file_.write(page, Span<const unsigned char>(data, page_bytes_));
  } catch (const StoreError& e) {
    throw named(e, page);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  note_stored(page, crc);
}

std::optional<PageHandle> PageCache::pin_if_resident(std::int64_t page) {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    const int f = frame_of(page);
    if (f == kNoFrame) return std::nullopt;
    Frame& fr = frames_[static_cast<std::size_t>(f)];
    if (fr.state == State::Busy || fr.page != page) {  // being loaded, or its frame being written back
      changed_.wait(lock);
      continue;
    }
    ++fr.pins;
    policy_->touch(static_cast<std::size_t>(f));
    if (fr.prefetched) {
      ++counters_.prefetch_hits;
      --prefetched_unused_;
      fr.prefetched = false;
    }
    ++counters_.hits;
    return PageHandle(this, f, frame_data(f));
  }
}

void PageCache::read_past(Span<const BatchedPageIo::Page> pages, BatchedPageIo& io) {
  std::vector<BatchedPageIo::Page> stored;
  for (const BatchedPageIo::Page& p : pages) {
    if (p.page < 0 || p.page >= pages_)
      throw InputError("page cache: read of page " + std::to_string(p.page) + " outside [0, " +
                       std::to_string(pages_) + ")");
    const std::uint8_t state = written_[static_cast<std::size_t>(p.page)];
    if (state == kNotStored) {
      std::memset(p.data, 0, page_bytes_);  // never stored: zeros, as a new file
    } else if (state == kWriteFailed) {
      read_in(p.page, p.data);  // raises the error
    } else {
      stored.push_back(p);
    }
  }
  std::vector<int> errors(stored.size());
  io.read(Span<const BatchedPageIo::Page>(stored.data(), stored.size()), Span<int>(errors.data(), errors.size()));
  for (std::size_t k = 0; k < stored.size(); ++k) {
    if (errors[k] != 0) fail_io("reading", stored[k].page, errors[k]);
    if (!crc_matches(stored[k].page, stored[k].data)) read_in(stored[k].page, stored[k].data);  // raises, naming it
  }
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.pages_read += static_cast<std::int64_t>(stored.size());
  counters_.bytes_read += static_cast<std::int64_t>(stored.size() * page_bytes_);
  counters_.checksum_checks += static_cast<std::int64_t>(stored.size());
  counters_.read_past += static_cast<std::int64_t>(stored.size());
}

void PageCache::write_through(Span<const BatchedPageIo::Page> pages, BatchedPageIo& io) {
  std::vector<std::uint32_t> crcs(pages.size());
  for (std::size_t k = 0; k < pages.size(); ++k) {
    if (pages[k].page < 0 || pages[k].page >= pages_)
      throw InputError("page cache: write-through of page " + std::to_string(pages[k].page) + " outside [0, " +
                       std::to_string(pages_) + ")");
    crcs[k] = crc32c(Span<const unsigned char>(pages[k].data, page_bytes_));
  }
  {
    // the pages' bytes are replaced whole: a copy in memory, clean or dirty, is dropped
    std::unique_lock<std::mutex> lock(mutex_);
    for (const BatchedPageIo::Page& p : pages) {
      for (;;) {
        const int f = frame_of(p.page);
        if (f == kNoFrame) break;
        Frame& fr = frames_[static_cast<std::size_t>(f)];
        if (fr.state == State::Busy) {  // its load or its frame's write-back must finish first
          changed_.wait(lock);
          continue;
        }
        if (fr.pins > 0)
          throw std::logic_error("page cache: write-through of " + describe(p.page) + ", which is pinned");
        unmap(p.page);
        if (fr.prefetched) --prefetched_unused_;
        fr = Frame{};
        changed_.notify_all();
        break;
      }
    }
  }
  std::vector<int> errors(pages.size());
  io.write(pages, Span<int>(errors.data(), errors.size()));
  std::int64_t failed = -1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::size_t k = 0; k < pages.size(); ++k) {
      const auto page = static_cast<std::size_t>(pages[k].page);
      if (errors[k] != 0) {  // whatever the file holds there now is not these bytes
        written_[page] = kWriteFailed;
        if (failed < 0) failed = static_cast<std::int64_t>(k);
        continue;
      }
      note_stored(pages[k].page, crcs[k]);
      ++counters_.written_through;
    }
  }
  if (failed >= 0) fail_io("writing", pages[static_cast<std::size_t>(failed)].page, errors[static_cast<std::size_t>(failed)]);
}

void PageCache::read_in(std::int64_t page, unsigned char* data) {
  const std::uint8_t state = written_[static_cast<std::size_t>(page)];
  if (state == kNotStored) {  // never stored: zeros, as a new file
    std::memset(data, 0, page_bytes_);
    return;
  }
  if (state == kWriteFailed)
    throw StoreError("scratch file " + file_.path() + ": " + describe(page) +
                         " cannot be read: its last write failed, so its bytes never reached the file",
                     file_.path(), page);
  file_.read(page, Span<unsigned char>(data, page_bytes_));
  if (!crc_matches(page, data)) {
    const std::uint32_t got = crc32c(Span<const unsigned char>(data, page_bytes_));
    throw ChecksumError("scratch file " + file_.path() + ": " + describe(page) +
                            " is corrupt: its CRC32C read back is " + hex32(got) + ", written " +
                            hex32(crc_[static_cast<std::size_t>(page)]) +
                            "; the damaged data was not used (a failing disk or a file changed by someone else)",
                        file_.path(), page);
  }
}

bool PageCache::crc_matches(std::int64_t page, const unsigned char* data) const {
  return crc32c(Span<const unsigned char>(data, page_bytes_)) == crc_[static_cast<std::size_t>(page)];
}

void PageCache::unpin(int f) {
  std::lock_guard<std::mutex> lock(mutex_);
#if GRAVPIPE_DEBUG_CHECKS
  if (frames_[static_cast<std::size_t>(f)].pins <= 0) {
    if (unpin_error_.empty())
      unpin_error_ = "frame " + std::to_string(f) + " released with " +
                     std::to_string(frames_[static_cast<std::size_t>(f)].pins) + " pins";
    return;
  }
#endif
  if (--frames_[static_cast<std::size_t>(f)].pins == 0) changed_.notify_all();
}

void PageCache::cool(std::int64_t first, std::int64_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::int64_t page = std::max<std::int64_t>(first, 0); page < std::min(first + count, pages_); ++page) {
    const int f = frame_of(page);
    if (f == kNoFrame) continue;
    const Frame& fr = frames_[static_cast<std::size_t>(f)];
    if (fr.state == State::Ready && fr.pins == 0 && fr.page == page) policy_->cool(static_cast<std::size_t>(f));
  }
}

void PageCache::flush() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (std::size_t f = 0; f < frames_.size(); ++f) {
    Frame& fr = frames_[f];
    while (fr.dirty && (fr.pins > 0 || fr.state == State::Busy)) changed_.wait(lock);
    if (!fr.dirty || fr.state != State::Ready) continue;
    fr.state = State::Busy;  // the page stays mapped: readers of it wait
    lock.unlock();
    try {
      write_back(fr.page, frame_data(static_cast<int>(f)));
    } catch (...) {
      lock.lock();
      fr.state = State::Ready;  // still dirty: nothing lost
      changed_.notify_all();
      throw;
    }
    lock.lock();
    fr.state = State::Ready;
    fr.dirty = false;
    changed_.notify_all();
  }
  if constexpr (kDebugChecks) check_invariants(-1, -1, true);
}

void PageCache::set_frames(std::int64_t frames) {
  if (frames < 1) throw InputError("page cache: needs at least one frame");
  flush();
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Frame& fr : frames_)
    if (fr.pins > 0 || fr.state == State::Busy || fr.dirty)
      throw std::logic_error("page cache: set_frames while " + describe(fr.page) + " is in use");
  const auto n = static_cast<std::uint64_t>(frames);
  const std::uint64_t old = frames_charge_.bytes();
  frames_charge_.release();  // the old frames' bytes are free for the new ones
  try {
    frames_charge_ = budget_->reserve(n * page_bytes_, "the page cache (" + std::to_string(frames) + " frames of " +
                                                           format_bytes(page_bytes_) + ")");
  } catch (...) {
    frames_charge_ = budget_->reserve(old, "the page cache's frames, kept");
    throw;
  }
  memory_ = AlignedBuffer();  // freed before the new frames are taken
  memory_ = AlignedBuffer(n * page_bytes_);
  frames_.assign(n, Frame{});
  std::fill(table_.begin(), table_.end(), kNoFrame);
  policy_ = std::make_unique<EvictionPolicy>(eviction_, n);
  prefetched_unused_ = 0;
  changed_.notify_all();
  if constexpr (kDebugChecks) check_invariants(-1, -1, true);
}

void PageCache::discard(std::int64_t first, std::int64_t count) {
  if (first < 0 || count < 0 || first > pages_ - count)
    throw InputError("page cache: discard of pages [" + std::to_string(first) + ", " + std::to_string(first + count) +
                     ") outside [0, " + std::to_string(pages_) + ")");
  std::unique_lock<std::mutex> lock(mutex_);
  for (std::int64_t page = first; page < first + count; ++page) {
    for (;;) {
      const int f = frame_of(page);
      if (f == kNoFrame) break;
      Frame& fr = frames_[static_cast<std::size_t>(f)];
      if (fr.state == State::Busy) {  // its load or its frame's write-back must finish first
        changed_.wait(lock);
        continue;
      }
      if (fr.pins == 0) {
        unmap(page);
        if (fr.prefetched) --prefetched_unused_;
        fr = Frame{};
        changed_.notify_all();
      }
      break;
    }
    // not mapped: no I/O of it is in flight (a busy page stays mapped), so its flag is ours.
    // Cleared, the page reads as zeros (read_in) and counts no bytes read.
    if (frame_of(page) == kNoFrame) written_[static_cast<std::size_t>(page)] = kNotStored;
  }
}

void PageCache::evict_all() {
  flush();
  std::lock_guard<std::mutex> lock(mutex_);
  for (Frame& fr : frames_) {
    if (fr.pins > 0 || fr.state != State::Ready || fr.dirty) continue;
    unmap(fr.page);
    if (fr.prefetched) --prefetched_unused_;
    fr = Frame{};
  }
  if constexpr (kDebugChecks) check_invariants(-1, -1, true);
}

StoreCounters PageCache::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if constexpr (kDebugChecks) check_invariants(-1, -1, false);
  return counters_;
}

void PageCache::reset_counters() {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_ = StoreCounters{};
}

}  // namespace gravpipe
