// The C++ side of the out-of-core budget plan (gravpipe.ooc.plan_budget shares a budget
// between the particles' cache, the sort and the tree): byte sizes, reservations that never
// exceed the budget and refuse what does not fit naming the least budget, the store's least
// budget and default cache as documented, and the tree's least bytes, which must be enough:
// a budget that leaves the tree least_bytes (and the threads' copied blocks) builds it, one
// byte less is refused.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gravpipe/curve_order.hpp"
#include "gravpipe/error.hpp"
#include "gravpipe/memory_budget.hpp"
#include "gravpipe/paged_tree.hpp"
#include "gravpipe/particle_store.hpp"
#include "gravpipe/tree.hpp"
#include "scratch_dir.hpp"
#include "store_fixture.hpp"
#include "test_harness.hpp"
#include "test_suites.hpp"

namespace gravpipe_test {

namespace {

using gravpipe::BudgetError;
using gravpipe::MemoryBudget;
using gravpipe::ParticleStore;
using gravpipe::Reservation;
using gravpipe::StoreConfig;

void byte_sizes(Context& t) {
  using gravpipe::parse_byte_size;
  CHECK_EQ(parse_byte_size("4GiB"), std::uint64_t{4} << 30);
  CHECK_EQ(parse_byte_size("512 MiB"), std::uint64_t{512} << 20);
  CHECK_EQ(parse_byte_size("1.5GB"), std::uint64_t{1500000000});
  CHECK_EQ(parse_byte_size("64k"), std::uint64_t{65536});
  CHECK_EQ(parse_byte_size("4096"), std::uint64_t{4096});
  CHECK_EQ(parse_byte_size("2 tb"), std::uint64_t{2000000000000});
  for (const char* bad : {"", "GiB", "4 parsecs", "1e3", "-1", "1.2.3k"})
    CHECK_THROWS_AS(parse_byte_size(bad), gravpipe::InputError);
  CHECK_EQ(gravpipe::format_bytes(512), std::string("512 B"));
  CHECK_EQ(gravpipe::format_bytes(1536), std::string("1.50 KiB"));
  CHECK_EQ(gravpipe::format_bytes(std::uint64_t{4} << 30), std::string("4 GiB"));
}

void reservations(Context& t) {
  MemoryBudget b(1000);
  {
    Reservation a = b.reserve(600, "a");
    Reservation c = b.reserve(400, "c");  // exactly full
    CHECK_EQ(b.used(), std::uint64_t{1000});
    bool thrown = false;
    try {
      b.reserve(1, "one byte more");
    } catch (const BudgetError& e) {
      thrown = true;
      CHECK_EQ(e.requested(), std::uint64_t{1});
      CHECK_EQ(e.least_budget(), std::uint64_t{1001});  // what is charged plus what was asked
      CHECK(std::string(e.what()).find("one byte more") != std::string::npos);
    }
    CHECK(thrown);
    CHECK_EQ(b.used(), std::uint64_t{1000});  // the refusal charged nothing
    Reservation moved = std::move(a);         // the charge moves with it, once
    CHECK_EQ(b.used(), std::uint64_t{1000});
    a = std::move(c);  // a took c's 400; moved keeps 600
    CHECK_EQ(b.used(), std::uint64_t{1000});
    moved.release();
    CHECK_EQ(b.used(), std::uint64_t{400});
    moved.release();  // twice: nothing more
    CHECK_EQ(b.used(), std::uint64_t{400});
  }
  CHECK_EQ(b.used(), std::uint64_t{0});
  CHECK_EQ(b.peak(), std::uint64_t{1000});
  CHECK_THROWS_AS(b.reserve(1001, "too much at once"), BudgetError);
  CHECK_THROWS_AS(b.reserve(UINT64_MAX, "overflowing"), BudgetError);
}

void reservations_from_threads(Context& t) {
  MemoryBudget b(10000);
  std::atomic<int> over{0};
  std::vector<std::thread> pool;
  for (int w = 0; w < 4; ++w)
    pool.emplace_back([&, w] {
      std::mt19937 rng(static_cast<std::uint32_t>(w));
      std::vector<Reservation> held;
      for (int k = 0; k < 20000; ++k) {
        if (held.size() > 5 || (!held.empty() && rng() % 2 == 0)) {
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(rng() % held.size()));
        } else {
          try {
            held.push_back(b.reserve(1 + rng() % 1500, "a block"));
          } catch (const BudgetError&) {  // full at the moment: fine
          }
        }
        if (b.used() > b.total()) ++over;
      }
    });
  for (std::thread& th : pool) th.join();
  CHECK_EQ(over.load(), 0);
  CHECK_EQ(b.used(), std::uint64_t{0});
  CHECK_LE(b.peak(), b.total());
}

StoreConfig store_config(const std::string& dir, std::int64_t n) {
  StoreConfig c;
  c.directory = dir;
  c.n = n;
  c.page_bytes = 4096;
  c.threads = 2;
  c.read_ahead = 4;
  return c;
}

void store_least_budget(Context& t) {
  ScratchDir dir;
  StoreConfig c = store_config(dir.path(), 10000);
  const std::int64_t pages = ParticleStore::page_count(c);
  const std::uint64_t tables = static_cast<std::uint64_t>(pages) * gravpipe::PageCache::kTableBytesPerPage;
  const std::int64_t least_frames = c.threads + 2 + 1;  // a frame a thread, one spare, one for read-ahead
  const std::uint64_t least = tables + static_cast<std::uint64_t>(least_frames) * c.page_bytes;
  CHECK_EQ(ParticleStore::least_budget(c), least);
  c.budget_bytes = least - 1;
  bool thrown = false;
  try {
    ParticleStore s(c);
  } catch (const BudgetError& e) {
    thrown = true;
    CHECK_EQ(e.least_budget(), least);
  }
  CHECK(thrown);
  c.budget_bytes = least;
  {
    ParticleStore s(c);
    CHECK_EQ(s.frames(), least_frames);
    CHECK_EQ(s.budget().used(), least);
  }
  // by default the cache takes half of what the tables leave, the rest for the sort and the tree
  c.budget_bytes = tables + 40 * 4096 + 100;
  {
    ParticleStore s(c);
    CHECK_EQ(s.frames(), std::int64_t{20});
    CHECK_EQ(s.budget().used(), tables + 20 * 4096);
    CHECK_LE(s.budget().used(), s.budget().total());
  }
  // a cache asked for that cannot serve the threads is refused, naming the least cache
  c.cache_bytes = 4 * 4096;
  thrown = false;
  try {
    ParticleStore s(c);
  } catch (const BudgetError& e) {
    thrown = true;
    CHECK_EQ(e.least_budget(), static_cast<std::uint64_t>(least_frames) * 4096);
  }
  CHECK(thrown);
}

/// A store of particles already in curve order, with their keys: what the out-of-core tree
/// is built from; its cache of a fixed 64 frames, so that what it charges is known and the
/// rest of the budget is the tree's.
struct SortedStore {
  StoreConfig config;
  std::vector<double> pos, mass;
  std::vector<std::int64_t> key;
};

SortedStore sorted_store(const std::string& dir, std::int64_t n) {
  SortedStore s;
  s.config = store_config(dir, n);
  s.config.fields = sortable_fields();
  s.config.cache_bytes = 64 * s.config.page_bytes;
  s.config.io_mode = gravpipe::IoMode::Buffered;  // the cells' file too: no device latency per page
  const Particles p = clustered_particles(n, 5);
  const gravpipe::CurveBox box = gravpipe::bounding_cube({p.pos.data(), p.pos.size()}, 1);
  std::vector<std::uint64_t> keys = gravpipe::curve_keys({p.pos.data(), p.pos.size()}, box, 1);
  const std::vector<std::int64_t> order = gravpipe::sort_keys(keys, 1);
  for (std::size_t k = 0; k < order.size(); ++k) {
    const auto o = static_cast<std::size_t>(order[k]);
    for (int c = 0; c < 3; ++c) s.pos.push_back(p.pos[3 * o + c]);
    s.mass.push_back(p.mass[o]);
    s.key.push_back(static_cast<std::int64_t>(keys[k]));
  }
  return s;
}

void tree_fits_its_least_bytes(Context& t) {
  ScratchDir dir;
  const std::int64_t n = 20000;
  SortedStore sorted = sorted_store(dir.path(), n);
  gravpipe::TreeParams params;
  params.threads = sorted.config.threads;
  params.n_leaf = 16;
  params.n_crit = 256;
  // the out-of-core octree is the in-core one over the same particles
  const gravpipe::Tree in_core({sorted.pos.data(), sorted.pos.size()}, {sorted.mass.data(), sorted.mass.size()}, params);
  const auto cells = static_cast<std::int64_t>(in_core.nodes().count());
  const auto groups = static_cast<std::int64_t>(gravpipe::group_cells(in_core.nodes(), params.n_crit).size());
  const std::uint64_t tree_least =
      gravpipe::PagedTree::least_bytes(cells, groups, sorted.config.page_bytes, params.threads);
  const std::uint64_t copies =
      static_cast<std::uint64_t>(params.threads) * gravpipe::PagedTree::copy_allowance(params.n_crit, params.n_leaf);
  // the page tables and the 64 frames (least_budget: the tables and the fewest frames)
  const std::uint64_t store_least = ParticleStore::least_budget(sorted.config) +
                                    static_cast<std::uint64_t>(64 - (params.threads + 3)) * sorted.config.page_bytes;
  // one byte short of the tree's least: refused by name
  {
    StoreConfig c = sorted.config;
    c.budget_bytes = store_least + tree_least - 1;
    ParticleStore s(c);
    s.write("pos", 0, n, sorted.pos.data()), s.write("mass", 0, n, sorted.mass.data()), s.write("key", 0, n, sorted.key.data());
    CHECK_EQ(s.budget().used(), store_least);
    CHECK_THROWS_AS(gravpipe::PagedTree(s, params), BudgetError);
  }
  // the least and a little more, 512 bytes at a time across a page, the threads'
  // copied particle blocks kept free as the plan keeps them (gravpipe.ooc.tree_keep_free):
  // every one builds the tree, which charges no more than the budget. Kept free nothing
  // (keep_free 0), the cell cache takes the blocks' room and the build may be refused, but
  // by an exception, never by ending the process from inside its parallel region.
  int refused = 0, refused_without_room = 0;
  std::string first_refusal;
  for (std::uint64_t extra = 0; extra <= sorted.config.page_bytes; extra += 512)
    for (const std::uint64_t keep_free : {copies, std::uint64_t{0}}) {
      StoreConfig c = sorted.config;
      c.budget_bytes = store_least + tree_least + copies + extra;
      ParticleStore s(c);
      s.write("pos", 0, n, sorted.pos.data()), s.write("mass", 0, n, sorted.mass.data()), s.write("key", 0, n, sorted.key.data());
      try {
        const gravpipe::PagedTree tree(s, params, keep_free);
        CHECK_EQ(tree.cell_count(), cells);
        CHECK_LE(s.budget().peak(), s.budget().total());
      } catch (const BudgetError& e) {
        if (keep_free == 0) {
          ++refused_without_room;
        } else if (refused++ == 0) {
          first_refusal = "extra " + std::to_string(extra) + ": " + e.what();
        }
      }
      CHECK_LE(s.budget().peak(), s.budget().total());
    }
  if (refused != 0) t.fail(__FILE__, __LINE__, std::to_string(refused) + " budgets above the least refused; " + first_refusal);
  std::printf("  (kept free nothing, %d of 9 budgets refused)\n", refused_without_room);
}

}  // namespace

Suite budget_plan_suite() {
  Suite s("budget_plan");
  s.add("byte_sizes", byte_sizes);
  s.add("reservations", reservations);
  s.add("reservations_from_threads", reservations_from_threads);
  s.add("store_least_budget", store_least_budget);
  s.add("tree_fits_its_least_bytes", tree_fits_its_least_bytes);
  return s;
}

}  // namespace gravpipe_test
