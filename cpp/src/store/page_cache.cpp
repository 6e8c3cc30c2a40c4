// The page cache: pin/unpin, loading with write-back of the victim, flush, CRC checks.
#include "gravpipe/page_cache.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>

#include "eviction.hpp"
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
    : file_(file), pages_(pages), page_bytes_(file.page_bytes()) {
  if (frames < 1) throw InputError("page cache: needs at least one frame");
  const auto nframes = static_cast<std::uint64_t>(frames);
  tables_charge_ = budget.reserve(static_cast<std::uint64_t>(pages) * (sizeof(std::uint32_t) + 1),
                                  "the page checksum table (" + std::to_string(pages) + " pages)");
  frames_charge_ = budget.reserve(nframes * page_bytes_, "the page cache (" + std::to_string(frames) +
                                                             " frames of " + format_bytes(page_bytes_) + ")");
  memory_ = AlignedBuffer(nframes * page_bytes_);
  frames_.resize(nframes);
  crc_.assign(static_cast<std::size_t>(pages), 0);
  written_.assign(static_cast<std::size_t>(pages), 0);
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

PageHandle PageCache::pin(std::int64_t page, Access access, bool* stalled) {
  if (page < 0 || page >= pages_)
    throw InputError("page cache: page " + std::to_string(page) + " outside [0, " + std::to_string(pages_) + ")");
  const int frame = acquire(page, access, false, stalled);
  return PageHandle(this, frame, frame_data(frame));
}

bool PageCache::prefetch(std::int64_t page) {
  if (page < 0 || page >= pages_) return false;
  return acquire(page, Access::Read, true) >= 0;
}

bool PageCache::resident(std::int64_t page) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = table_.find(page);
  return it != table_.end() && frames_[static_cast<std::size_t>(it->second)].state == State::Ready &&
         frames_[static_cast<std::size_t>(it->second)].page == page;
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
    const auto it = table_.find(page);
    if (it != table_.end()) {
      if (prefetch) return -1;  // here or on its way
      const int f = it->second;
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
    const auto evictable = [this](std::size_t f) { return frames_[f].pins == 0 && frames_[f].state != State::Busy; };
    // a prefetch takes only a cold frame, and only while few prefetched pages wait unused:
    // speculative loads never push out what the compute threads use
    const int victim = !prefetch                                  ? policy_->victim(evictable)
                       : prefetched_unused_ + prefetches_in_flight_ >= max_prefetched_() ? -1
                                                                  : policy_->cold_victim(evictable);
    if (victim >= 0) {
      if (!prefetch) start_stall();
      const int f = load_into(victim, page, access, prefetch, lock);
      if (!prefetch) {
        ++counters_.misses;
        counters_.stall_seconds += seconds_since(t0);
      }
      return f;
    }
    if (prefetch) return -1;  // every frame in use: read-ahead never waits
    start_stall();
    changed_.wait(lock);
  }
}

// Called and returning with the lock held; releases it around the file I/O.
int PageCache::load_into(int f, std::int64_t page, Access access, bool prefetch, std::unique_lock<std::mutex>& lock) {
  Frame& fr = frames_[static_cast<std::size_t>(f)];
  const std::int64_t old = fr.page;
  const bool write_old = fr.state == State::Ready && fr.dirty;
  if (old >= 0 && !write_old) {
    table_.erase(old);
    ++counters_.evictions;
  }
  // While busy, both the old page (if it is being written back) and the new one map to this
  // frame, so anyone asking for either waits rather than reading the file half-way.
  fr.page = page;
  fr.state = State::Busy;
  if (fr.prefetched) --prefetched_unused_;  // evicted unused
  fr.prefetched = false;
  table_[page] = f;
  if (prefetch) ++prefetches_in_flight_;
  unsigned char* data = frame_data(f);
  lock.unlock();
  try {
    if (write_old) write_back(old, data);
  } catch (...) {
    lock.lock();
    if (prefetch) --prefetches_in_flight_;
    table_.erase(page);  // keep the old page, still dirty: its data exists nowhere else
    fr.page = old;
    fr.state = State::Ready;
    changed_.notify_all();
    throw;
  }
  lock.lock();
  if (write_old) {
    table_.erase(old);
    ++counters_.evictions;
    fr.dirty = false;
  }
  lock.unlock();
  try {
    if (access != Access::Overwrite) read_in(page, data);
  } catch (...) {
    lock.lock();
    if (prefetch) --prefetches_in_flight_;
    table_.erase(page);
    fr = Frame{};
    changed_.notify_all();
    throw;
  }
  lock.lock();
  if (access != Access::Overwrite && written_[static_cast<std::size_t>(page)] != 0) {
    ++counters_.pages_read;
    counters_.bytes_read += static_cast<std::int64_t>(page_bytes_);
    ++counters_.checksum_checks;
  }
  if (prefetch) {
    ++counters_.prefetched;
    ++prefetched_unused_;
    --prefetches_in_flight_;
  }
  fr.state = State::Ready;
  fr.dirty = access != Access::Read;
  fr.pins = prefetch ? 0 : 1;
  fr.prefetched = prefetch;
  policy_->touch(static_cast<std::size_t>(f));
  changed_.notify_all();
  return f;
}

// The page is busy in its frame, so no one else writes its bytes, its CRC or its flag.
void PageCache::write_back(std::int64_t page, const unsigned char* data) {
  const std::uint32_t crc = crc32c(Span<const unsigned char>(data, page_bytes_));
  try {
    file_.write(page, Span<const unsigned char>(data, page_bytes_));
  } catch (const StoreError& e) {  // the file knows the page's number; the store knows what it holds
    if (!namer_) throw;
    throw StoreError(std::string(e.what()) + " [" + describe(page) + "]", e.path(), e.page());
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counters_.pages_written;
    counters_.bytes_written += static_cast<std::int64_t>(page_bytes_);
  }
  // Recorded only after the whole page reached the file: a failed or partial write leaves
  // the old checksum, so a torn page is reported as corrupt, never read as data.
  crc_[static_cast<std::size_t>(page)] = crc;
  written_[static_cast<std::size_t>(page)] = 1;
}

void PageCache::read_in(std::int64_t page, unsigned char* data) {
  if (written_[static_cast<std::size_t>(page)] == 0) {  // never stored: zeros, as a new file
    std::memset(data, 0, page_bytes_);
    return;
  }
  file_.read(page, Span<unsigned char>(data, page_bytes_));
  const std::uint32_t got = crc32c(Span<const unsigned char>(data, page_bytes_));
  const std::uint32_t want = crc_[static_cast<std::size_t>(page)];
  if (got != want)
    throw ChecksumError("scratch file " + file_.path() + ": " + describe(page) +
                            " is corrupt: its CRC32C read back is " + hex32(got) + ", written " + hex32(want) +
                            "; the damaged data was not used (a failing disk or a file changed by someone else)",
                        file_.path(), page);
}

void PageCache::unpin(int f) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (--frames_[static_cast<std::size_t>(f)].pins == 0) changed_.notify_all();
}

void PageCache::cool(std::int64_t first, std::int64_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::int64_t page = std::max<std::int64_t>(first, 0); page < std::min(first + count, pages_); ++page) {
    const auto it = table_.find(page);
    if (it == table_.end()) continue;
    const Frame& fr = frames_[static_cast<std::size_t>(it->second)];
    if (fr.state == State::Ready && fr.pins == 0 && fr.page == page) policy_->cool(static_cast<std::size_t>(it->second));
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
}

void PageCache::discard(std::int64_t first, std::int64_t count) {
  if (first < 0 || count < 0 || first > pages_ - count)
    throw InputError("page cache: discard of pages [" + std::to_string(first) + ", " + std::to_string(first + count) +
                     ") outside [0, " + std::to_string(pages_) + ")");
  std::unique_lock<std::mutex> lock(mutex_);
  for (std::int64_t page = first; page < first + count; ++page) {
    for (;;) {
      const auto it = table_.find(page);
      if (it == table_.end()) break;
      Frame& fr = frames_[static_cast<std::size_t>(it->second)];
      if (fr.state == State::Busy) {  // its load or its frame's write-back must finish first
        changed_.wait(lock);
        continue;
      }
      if (fr.pins == 0) {
        table_.erase(it);
        if (fr.prefetched) --prefetched_unused_;
        fr = Frame{};
        changed_.notify_all();
      }
      break;
    }
    // not mapped: no I/O of it is in flight (a busy page stays mapped), so its flag is ours.
    // Cleared, the page reads as zeros (read_in) and counts no bytes read.
    if (table_.find(page) == table_.end()) written_[static_cast<std::size_t>(page)] = 0;
  }
}

void PageCache::evict_all() {
  flush();
  std::lock_guard<std::mutex> lock(mutex_);
  for (Frame& fr : frames_) {
    if (fr.pins > 0 || fr.state != State::Ready || fr.dirty) continue;
    table_.erase(fr.page);
    if (fr.prefetched) --prefetched_unused_;
    fr = Frame{};
  }
}

StoreCounters PageCache::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

void PageCache::reset_counters() {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_ = StoreCounters{};
}

}  // namespace gravpipe
