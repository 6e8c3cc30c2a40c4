// How the paged leapfrog shares its memory budget (Salmon & Warren, seed 004: everything
// that grows with N stays inside it). The budget covers the page checksum tables, the
// particles' page cache, the tree's cells (128 bytes a cell, ~0.23 N cells for a Plummer
// sphere, ~0.35 N for a uniform cube at n_leaf = 16, paged through a cache of their own:
// paged_tree.hpp), its groups (88 bytes each), the sort buffer and the merge's run sources (2
// bytes a particle), each thread's particle blocks copied out of the pages
// (PagedTree::copy_allowance, ~96 KiB) and the separate kick pass's blocks (72 bytes a
// particle of a block). By default the particles' cache gets half of what the least needs
// leave beyond kSortAndCellsRoom a thread kept for the sort's buffer and the cells, and the
// tree's cell cache what is left when the tree is built (the sort's buffer has gone back by
// then). A budget that cannot hold the least of them is a BudgetError naming the least
// budget; one that holds them but leaves the particles' cache less than the walk's working
// set (walk_least_cache) comes with a warning naming a budget that does not.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gravpipe/particle_store.hpp"

namespace gravpipe {

/// Particles of a block of the separate kick-drift pass.
constexpr std::int64_t kKickBlock = std::int64_t{1} << 16;
/// Bytes a particle of a kick-drift block takes: its velocity, acceleration and position.
constexpr std::uint64_t kKickBytesPerParticle = 72;
/// Cells per particle the budget plans for at n_leaf = 16 (measured: Plummer 0.23, uniform
/// cube 0.29-0.35); scaled by 16 / n_leaf.
constexpr double kCellsPerParticleAt16 = 0.4;
/// Groups per particle the budget plans for at n_crit = 256 (measured: Plummer 1e7 1/80,
/// uniform cube 1/64); scaled by 256 / n_crit.
constexpr double kGroupsPerParticleAt256 = 1.0 / 48;
/// Bytes of x, y, z and m pages the walk's working set holds for each compute thread and the
/// prefetch: below it every step re-reads pages many times over (N = 3e6, 2 threads, 32 KiB
/// pages: a walk of 6.8 s and 0.64 GiB read with a 16.5 MiB particle cache, 7.5 s and 1.3 GiB
/// with 9 MiB, 10 s and 3.9 GiB with 4 MiB; with 0.2 MiB, > 500 GiB).
constexpr std::uint64_t kWalkCachePerThread = std::uint64_t{3} << 20;
/// Bytes a thread of a budget's spare room (beyond the least) that go to the sort's buffer
/// and the cells' cache before the particles' cache shares in it. N = 1e7 at 1/10, 2 threads
/// (benchmarks/ooc/copy_allowance_ab.py): giving half of 7.8 MiB more to the particles' cache
/// read 5% fewer bytes and made the step 0.3 s slower (the permute's buffer smaller).
constexpr std::uint64_t kSortAndCellsRoom = std::uint64_t{4} << 20;
/// Frames (of both caches) the automatic page size aims for, and its largest page.
constexpr std::uint64_t kAutoPageFrames = 1024;
constexpr std::size_t kLargestAutoPage = std::size_t{1} << 20;

/// The store's fields for the paged leapfrog: the defaults, the sort's twins, its keys and
/// the caller's index, and the diagnostic tree's potential.
std::vector<FieldSpec> paged_leapfrog_fields();

/// What a budget plan depends on.
struct PagedBudgetInputs {
  std::int64_t n = 0;
  std::size_t page_bytes = 0;
  int threads = 1;
  int n_leaf = 16, n_crit = 256;
  int read_ahead = 4;
  std::int64_t kick_block = kKickBlock;
  double groups_per_particle_at_256 = kGroupsPerParticleAt256;
  /// Bytes the tree's cell cache leaves to the walk's other charges (default tree_keep_free).
  std::optional<std::uint64_t> keep_free;
};

/// The parts of the least budget (bytes).
struct LeastPagedBudget {
  std::uint64_t least = 0;   // all of them together
  std::uint64_t store = 0;   // the page tables and the store's fewest frames
  std::uint64_t tables = 0;  // ... of which the page tables
  std::uint64_t tree = 0;    // the tree's fewest cell frames and its groups
  std::int64_t groups = 0;   // groups planned
  std::uint64_t sort = 0;    // the least sort buffer and its run sources
  std::uint64_t blocks = 0;  // the kick pass's blocks
  std::uint64_t keep_free = 0;  // the threads' copied blocks and the prefetch's table
};

/// How a budget is shared (bytes): the particles' cache, the least the tree needs, and the
/// headroom the sort and the tree use in turn (the sort buffer and run sources; the cell
/// cache, groups and copied blocks).
struct PagedBudgetPlan {
  std::uint64_t budget = 0, tables_and_least_frames = 0, tree_least = 0, headroom = 0, sort_buffer = 0, cache = 0;
  /// A MemoryBudgetWarning's text ("" for none): the cache is thinner than the walk needs.
  std::string warning;
};

/// The automatic page size: the largest power of two that leaves ~kAutoPageFrames frames in
/// the budget, between 4 KiB and 1 MiB.
std::size_t page_bytes_for_budget(std::uint64_t budget);
/// Bytes of particle cache below which the walk thrashes: its working set, or every page of
/// x, y, z and m when they take less.
std::uint64_t walk_least_cache(std::int64_t n, std::size_t page_bytes, int threads);
/// Bytes the tree's cell cache leaves to the walk's other charges: the threads' copied
/// particle blocks and the prefetch's table of runs (24 bytes a run of ~2048 particles).
std::uint64_t tree_keep_free(std::int64_t n, int threads, int n_crit, int n_leaf);
/// Bytes of the separate kick pass's blocks for n particles.
std::uint64_t kick_block_bytes(std::int64_t n, std::int64_t kick_block = kKickBlock);
/// Bytes of the page checksum tables of the paged leapfrog's store.
std::uint64_t paged_table_bytes(std::int64_t n, std::size_t page_bytes);

LeastPagedBudget least_paged_budget(const PagedBudgetInputs& in);
/// The least budget whose default split gives the particles' cache the walk's working set;
/// page_auto: pages sized from the budget (the inputs' page_bytes unused).
std::uint64_t walk_budget(PagedBudgetInputs in, bool page_auto);
/// The plan for `budget`: BudgetError naming the least budget when it cannot hold the least
/// needs, or when `cache_bytes` leaves too little; InputError for a sort_buffer outside what
/// the plan allows. page_auto: the page size was sized from the budget (so is the budget a
/// warning names).
PagedBudgetPlan plan_paged_budget(const PagedBudgetInputs& in, std::uint64_t budget,
                                  std::optional<std::uint64_t> cache_bytes = std::nullopt,
                                  std::optional<std::uint64_t> sort_buffer = std::nullopt, bool page_auto = false);

}  // namespace gravpipe
