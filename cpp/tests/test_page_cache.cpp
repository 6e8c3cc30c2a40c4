// The page cache's accounting against a model written here: a textbook LRU cache of the
// same number of frames predicts every hit, miss, eviction, page read and page written of the
// LRU policy exactly; for CLOCK (whose victims the model does not predict) the counters must
// still add up and every byte read back must be the one last written. The budget is charged
// the frames and tables and never more.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <list>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "gravpipe/error.hpp"
#include "gravpipe/memory_budget.hpp"
#include "gravpipe/page_cache.hpp"
#include "gravpipe/page_file.hpp"
#include "scratch_dir.hpp"
#include "test_harness.hpp"
#include "test_suites.hpp"

namespace gravpipe_test {

namespace {

using gravpipe::Eviction;
using gravpipe::IoMode;
using gravpipe::MemoryBudget;
using gravpipe::PageCache;
using gravpipe::PageFile;
using gravpipe::StoreCounters;
using Access = PageCache::Access;

constexpr std::size_t kPage = 4096;

std::uint64_t charge_of(std::int64_t pages, std::int64_t frames) {
  return static_cast<std::uint64_t>(pages) * PageCache::kTableBytesPerPage + static_cast<std::uint64_t>(frames) * kPage;
}

/// What an LRU cache of `frames` frames does, page by page: the counters it must report.
class LruModel {
 public:
  explicit LruModel(std::size_t frames) : frames_(frames) {}

  void access(std::int64_t page, Access a) {
    const auto at = std::find_if(lru_.begin(), lru_.end(), [&](const Entry& e) { return e.page == page; });
    if (at != lru_.end()) {
      ++c.hits;
      Entry e = *at;
      e.dirty = e.dirty || a != Access::Read;
      lru_.erase(at);
      lru_.push_back(e);
      return;
    }
    ++c.misses;
    if (lru_.size() == frames_) {
      const Entry victim = lru_.front();
      lru_.pop_front();
      ++c.evictions;
      if (victim.dirty) store(victim.page);
    }
    if (a != Access::Overwrite && stored_.count(page) != 0) ++c.pages_read;  // never stored: zeros, no read
    lru_.push_back({page, a != Access::Read});
  }
  void flush() {
    for (Entry& e : lru_)
      if (e.dirty) store(e.page), e.dirty = false;
  }
  void evict_all() {
    flush();
    lru_.clear();
  }
  StoreCounters c;

 private:
  struct Entry {
    std::int64_t page;
    bool dirty;
  };
  void store(std::int64_t page) {
    ++c.pages_written;
    stored_.insert(page);
  }
  std::size_t frames_;
  std::list<Entry> lru_;
  std::set<std::int64_t> stored_;
};

/// A page's bytes as the test last wrote them: a seed repeated, so any byte tells whose it is.
void fill(unsigned char* data, std::uint32_t seed) {
  for (std::size_t k = 0; k < kPage; k += 4) std::memcpy(data + k, &seed, 4);
}

/// The same counters that the model predicts, compared one by one.
void check_counters(Context& t, const StoreCounters& got, const StoreCounters& want) {
  CHECK_EQ(got.hits, want.hits);
  CHECK_EQ(got.misses, want.misses);
  CHECK_EQ(got.evictions, want.evictions);
  CHECK_EQ(got.pages_read, want.pages_read);
  CHECK_EQ(got.pages_written, want.pages_written);
}

/// Counters that hold whatever the policy: bytes are whole pages, every pin a hit or a miss,
/// every page read checked against its checksum.
void check_consistent(Context& t, const StoreCounters& c, std::int64_t pins) {
  CHECK_EQ(c.hits + c.misses, pins);
  CHECK_EQ(c.bytes_read, c.pages_read * static_cast<std::int64_t>(kPage));
  CHECK_EQ(c.bytes_written, c.pages_written * static_cast<std::int64_t>(kPage));
  CHECK_EQ(c.checksum_checks, c.pages_read);
  CHECK_LE(c.evictions, c.misses);
}

/// Random pins of `pages` pages through `frames` frames, each checked against the bytes the
/// test wrote last; returns the pins made. With LRU, the counters must be the model's.
std::int64_t random_traffic(Context& t, PageCache& cache, Eviction eviction, std::int64_t pages, std::int64_t frames,
                            std::uint32_t seed, MemoryBudget& budget) {
  std::mt19937 rng(seed);
  std::vector<std::uint32_t> content(static_cast<std::size_t>(pages), 0);  // 0: never written (zeros)
  LruModel model(static_cast<std::size_t>(frames));
  std::int64_t pins = 0;
  std::uint32_t next = 1;
  const std::uint64_t charged = budget.used();
  for (int step = 0; step < 4000; ++step) {
    // a working set that drifts, so that there are runs of hits and runs of misses
    const std::int64_t centre = (step / 200) % pages;
    const std::int64_t page = (centre + static_cast<std::int64_t>(rng() % static_cast<std::uint32_t>(frames + 4))) % pages;
    const auto roll = rng() % 10;
    const Access a = roll < 6 ? Access::Read : roll < 9 ? Access::Modify : Access::Overwrite;
    {
      const gravpipe::PageHandle h = cache.pin(page, a);
      ++pins;
      if (a != Access::Overwrite) {
        std::vector<unsigned char> want(kPage);
        fill(want.data(), content[static_cast<std::size_t>(page)]);
        REQUIRE(std::memcmp(h.data(), want.data(), kPage) == 0);
      }
      if (a != Access::Read) {
        content[static_cast<std::size_t>(page)] = next++;
        fill(h.data(), content[static_cast<std::size_t>(page)]);
      }
    }
    model.access(page, a);
    CHECK_EQ(budget.used(), charged);  // pins charge nothing: the frames are paid for
    if (step == 1500) {
      cache.flush();
      model.flush();
    }
    if (step == 3000) {
      cache.evict_all();
      model.evict_all();
      for (std::int64_t p = 0; p < pages; ++p) CHECK(!cache.resident(p));
    }
  }
  cache.flush();
  model.flush();
  const StoreCounters c = cache.counters();
  check_consistent(t, c, pins);
  if (eviction == Eviction::Lru) check_counters(t, c, model.c);
  // everything back from the file: the bytes last written, through their checksums
  cache.evict_all();
  for (std::int64_t p = 0; p < pages; ++p) {
    const gravpipe::PageHandle h = cache.pin(p, Access::Read);
    std::vector<unsigned char> want(kPage);
    fill(want.data(), content[static_cast<std::size_t>(p)]);
    CHECK(std::memcmp(h.data(), want.data(), kPage) == 0);
  }
  return pins;
}

void run_policy(Context& t, Eviction eviction, IoMode mode) {
  ScratchDir dir;
  const PageFile file(dir.path(), kPage, mode);
  const std::int64_t pages = 40, frames = 7;
  MemoryBudget budget(charge_of(pages, frames) + 1000);
  {
    PageCache cache(file, pages, frames, eviction, budget);
    CHECK_EQ(budget.used(), charge_of(pages, frames));
    random_traffic(t, cache, eviction, pages, frames, 12345u + static_cast<std::uint32_t>(eviction), budget);
    CHECK_LE(budget.peak(), budget.total());
  }
  CHECK_EQ(budget.used(), std::uint64_t{0});  // the cache's charges go with it
}

void budget_refuses_what_does_not_fit(Context& t) {
  ScratchDir dir;
  const PageFile file(dir.path(), kPage, IoMode::Buffered);
  const std::int64_t pages = 100, frames = 10;
  const std::uint64_t need = charge_of(pages, frames);
  {
    MemoryBudget budget(need - 1);
    bool thrown = false;
    try {
      PageCache cache(file, pages, frames, Eviction::Clock, budget);
    } catch (const gravpipe::BudgetError& e) {
      thrown = true;
      CHECK_EQ(e.least_budget(), need);  // tables first, then the frames on top of them
      CHECK_EQ(e.requested(), static_cast<std::uint64_t>(frames) * kPage);
    }
    CHECK(thrown);
    CHECK_EQ(budget.used(), std::uint64_t{0});  // the tables' charge went back with the failure
  }
  MemoryBudget budget(need);
  PageCache cache(file, pages, frames, Eviction::Clock, budget);
  CHECK_EQ(budget.used(), need);
  // more frames than the budget holds: refused, the old frames kept and still charged
  CHECK_THROWS_AS(cache.set_frames(frames + 1), gravpipe::BudgetError);
  CHECK_EQ(cache.frames(), frames);
  CHECK_EQ(budget.used(), need);
  cache.set_frames(frames - 4);
  CHECK_EQ(budget.used(), charge_of(pages, frames - 4));
  CHECK_THROWS_AS(cache.pin(pages, Access::Read), gravpipe::InputError);
  CHECK_THROWS_AS(cache.pin(-1, Access::Read), gravpipe::InputError);
}

void pinned_pages_stay(Context& t) {
  ScratchDir dir;
  const PageFile file(dir.path(), kPage, IoMode::Auto);
  const std::int64_t pages = 30, frames = 4;
  MemoryBudget budget(charge_of(pages, frames));
  PageCache cache(file, pages, frames, Eviction::Clock, budget);
  // three pages held through a long sweep of the others, which must all go through one frame
  std::vector<gravpipe::PageHandle> held;
  for (std::int64_t p = 0; p < 3; ++p) {
    held.push_back(cache.pin(p, Access::Overwrite));
    fill(held.back().data(), 1000u + static_cast<std::uint32_t>(p));
  }
  for (int round = 0; round < 3; ++round)
    for (std::int64_t p = 3; p < pages; ++p) {
      const gravpipe::PageHandle h = cache.pin(p, Access::Modify);
      fill(h.data(), static_cast<std::uint32_t>(round * 100 + p));
    }
  for (std::int64_t p = 0; p < 3; ++p) {
    CHECK(cache.resident(p));
    std::vector<unsigned char> want(kPage);
    fill(want.data(), 1000u + static_cast<std::uint32_t>(p));
    CHECK(std::memcmp(held[static_cast<std::size_t>(p)].data(), want.data(), kPage) == 0);
  }
  const StoreCounters c = cache.counters();
  // 27 pages through the one free frame, three times: every pin a miss, each eviction of a
  // dirty page a write (the first round's victims were written too: Modify makes them dirty)
  CHECK_EQ(c.misses, std::int64_t{3 + 3 * 27});
  CHECK_EQ(c.pages_written, c.evictions);
  CHECK_EQ(c.pages_read, std::int64_t{2 * 27});  // rounds two and three read back what round one stored
  held.clear();
  cache.flush();
  CHECK_EQ(cache.counters().pages_written, c.pages_written + 4);  // the three held and the last swept page
}

void corrupt_page_is_refused(Context& t) {
  ScratchDir dir;
  const PageFile file(dir.path(), kPage, IoMode::Auto);
  MemoryBudget budget(charge_of(4, 2));
  PageCache cache(file, 4, 2, Eviction::Lru, budget);
  {
    const gravpipe::PageHandle h = cache.pin(2, Access::Overwrite);
    fill(h.data(), 77u);
  }
  cache.evict_all();  // written back with its checksum, no longer in memory
  CHECK_EQ(cache.counters().pages_written, std::int64_t{1});
  {  // someone else changes one byte of it in the file
    const int fd = ::open(file.path().c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    const unsigned char bad = 0xEE;
    REQUIRE(::pwrite(fd, &bad, 1, static_cast<off_t>(2 * kPage + 100)) == 1);
    ::fsync(fd);
    ::close(fd);
  }
  bool thrown = false;
  try {
    cache.pin(2, Access::Read);
  } catch (const gravpipe::ChecksumError& e) {
    thrown = true;
    CHECK_EQ(e.page(), std::int64_t{2});
  }
  CHECK(thrown);
  // the other pages are untouched: never stored, they read as zeros without a read
  const gravpipe::PageHandle h = cache.pin(1, Access::Read);
  CHECK(std::all_of(h.data(), h.data() + kPage, [](unsigned char b) { return b == 0; }));
}

void threads_share_the_frames(Context& t) {
  ScratchDir dir;
  const PageFile file(dir.path(), kPage, IoMode::Auto);
  const int threads = 4;
  const std::int64_t per_thread = 6, pages = threads * per_thread, frames = threads + 2;
  MemoryBudget budget(charge_of(pages, frames));
  PageCache cache(file, pages, frames, Eviction::Clock, budget);
  const int pins_each = 1500;
  std::vector<std::thread> pool;
  std::atomic<int> wrong{0};
  for (int w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      // each thread owns its pages: a counter at the start of each, bumped on every pin
      std::mt19937 rng(static_cast<std::uint32_t>(w));
      std::vector<std::uint32_t> count(static_cast<std::size_t>(per_thread), 0);
      for (int k = 0; k < pins_each; ++k) {
        const auto local = static_cast<std::int64_t>(rng() % static_cast<std::uint32_t>(per_thread));
        const gravpipe::PageHandle h = cache.pin(w * per_thread + local, Access::Modify);
        std::uint32_t v;
        std::memcpy(&v, h.data(), 4);
        if (v != count[static_cast<std::size_t>(local)]) ++wrong;
        ++v;
        std::memcpy(h.data(), &v, 4);
        count[static_cast<std::size_t>(local)] = v;
      }
    });
  for (std::thread& th : pool) th.join();
  CHECK_EQ(wrong.load(), 0);
  cache.flush();
  const StoreCounters c = cache.counters();
  check_consistent(t, c, std::int64_t{threads} * pins_each);
  CHECK_LE(budget.used(), budget.total());
}

}  // namespace

Suite page_cache_suite() {
  Suite s("page_cache");
  s.add("lru_counters_match_a_model_buffered", [](Context& t) { run_policy(t, Eviction::Lru, IoMode::Buffered); });
  s.add("lru_counters_match_a_model_auto_io", [](Context& t) { run_policy(t, Eviction::Lru, IoMode::Auto); });
  s.add("clock_counters_add_up", [](Context& t) { run_policy(t, Eviction::Clock, IoMode::Auto); });
  s.add("budget_refuses_what_does_not_fit", budget_refuses_what_does_not_fit);
  s.add("pinned_pages_stay", pinned_pages_stay);
  s.add("corrupt_page_is_refused", corrupt_page_is_refused);
  s.add("threads_share_the_frames", threads_share_the_frames);
  return s;
}

}  // namespace gravpipe_test
