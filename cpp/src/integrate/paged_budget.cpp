// The paged leapfrog's budget plan (paged_budget.hpp).
#include "gravpipe/paged_budget.hpp"

#include <algorithm>
#include <cmath>

#include "gravpipe/error.hpp"
#include "gravpipe/memory_budget.hpp"
#include "gravpipe/page_cache.hpp"
#include "gravpipe/paged_tree.hpp"
#include "gravpipe/store_sort.hpp"

namespace gravpipe {

namespace {

StoreConfig paged_config(std::int64_t n, std::size_t page_bytes, int read_ahead, int threads) {
  StoreConfig c;
  c.n = n, c.page_bytes = page_bytes, c.read_ahead = read_ahead, c.threads = threads;
  c.fields = paged_leapfrog_fields();
  return c;
}

std::uint64_t cache_share(std::uint64_t spare, int threads) {
  const std::uint64_t kept = static_cast<std::uint64_t>(threads) * kSortAndCellsRoom;
  return spare > kept ? (spare - kept) / 2 : 0;
}

}  // namespace

std::vector<FieldSpec> paged_leapfrog_fields() {
  std::vector<FieldSpec> f = default_fields();
  const auto add = [&f](const char* name, int components, FieldType type, const char* group) {
    f.push_back({name, components, type, group});
  };
  add("index", 1, FieldType::I64, "");
  add("key", 1, FieldType::I64, "");
  add("pos~", 3, FieldType::F64, "body~");
  add("vel~", 3, FieldType::F64, "");
  add("mass~", 1, FieldType::F64, "body~");
  add("id~", 1, FieldType::I64, "");
  add("index~", 1, FieldType::I64, "");
  add("key~", 1, FieldType::I64, "");
  add("pot_check", 1, FieldType::F64, "");  // the diagnostic tree's potential
  return f;
}

std::size_t page_bytes_for_budget(std::uint64_t budget) {
  std::size_t page = 4096;
  while (page * 2 <= std::min<std::uint64_t>(kLargestAutoPage, budget / kAutoPageFrames)) page *= 2;
  return page;
}

std::uint64_t walk_least_cache(std::int64_t n, std::size_t page_bytes, int threads) {
  const auto per_page = static_cast<std::int64_t>(page_bytes / 8);
  const std::uint64_t column_pages = static_cast<std::uint64_t>((n + per_page - 1) / per_page);
  return std::min(kWalkCachePerThread * static_cast<std::uint64_t>(threads + 1), 4 * column_pages * page_bytes);
}

std::uint64_t tree_keep_free(std::int64_t n, int threads, int n_crit, int n_leaf) {
  return static_cast<std::uint64_t>(threads) * PagedTree::copy_allowance(n_crit, n_leaf) +
         24 * static_cast<std::uint64_t>(n / 1024 + 1) + (std::uint64_t{1} << 20);
}

std::uint64_t kick_block_bytes(std::int64_t n, std::int64_t kick_block) {
  return kKickBytesPerParticle * static_cast<std::uint64_t>(std::min(kick_block, n));
}

std::uint64_t paged_table_bytes(std::int64_t n, std::size_t page_bytes) {
  return static_cast<std::uint64_t>(ParticleStore::page_count(paged_config(n, page_bytes, 0, 1))) *
         PageCache::kTableBytesPerPage;
}

LeastPagedBudget least_paged_budget(const PagedBudgetInputs& in) {
  if (in.n < 1) throw InputError("n: must be >= 1, got " + std::to_string(in.n));
  LeastPagedBudget lb;
  lb.store = ParticleStore::least_budget(paged_config(in.n, in.page_bytes, in.read_ahead, in.threads));
  lb.tables = paged_table_bytes(in.n, in.page_bytes);
  const double n = static_cast<double>(in.n);
  const auto cells = static_cast<std::int64_t>(std::ceil(kCellsPerParticleAt16 * 16 / in.n_leaf * n)) + 1;
  lb.groups = static_cast<std::int64_t>(std::ceil(in.groups_per_particle_at_256 * 256 / in.n_crit * n)) + 1;
  lb.tree = PagedTree::least_bytes(cells, lb.groups, in.page_bytes, in.threads);
  lb.blocks = kick_block_bytes(in.n, in.kick_block);
  lb.sort = least_sort_buffer(in.n) + 2 * static_cast<std::uint64_t>(in.n);
  lb.keep_free = in.keep_free ? *in.keep_free : tree_keep_free(in.n, in.threads, in.n_crit, in.n_leaf);
  lb.least = lb.store + std::max(lb.tree + lb.keep_free, lb.sort) + lb.blocks;
  return lb;
}

std::uint64_t walk_budget(PagedBudgetInputs in, bool page_auto) {
  std::uint64_t budget = 0;
  for (int round = 0; round < 8; ++round) {  // the page size follows the budget; a few rounds settle it
    if (page_auto) in.page_bytes = page_bytes_for_budget(std::max<std::uint64_t>(budget, 1));
    const LeastPagedBudget lb = least_paged_budget(in);
    const auto shortfall = static_cast<std::int64_t>(walk_least_cache(in.n, in.page_bytes, in.threads)) -
                           static_cast<std::int64_t>(lb.store - lb.tables);
    const std::uint64_t want =
        lb.least + (shortfall > 0 ? static_cast<std::uint64_t>(in.threads) * kSortAndCellsRoom +
                                        2 * static_cast<std::uint64_t>(shortfall)
                                  : 0);
    if (want <= budget) break;
    budget = want;
  }
  return budget;
}

PagedBudgetPlan plan_paged_budget(const PagedBudgetInputs& in, std::uint64_t budget,
                                  std::optional<std::uint64_t> cache_bytes, std::optional<std::uint64_t> sort_buffer,
                                  bool page_auto) {
  const LeastPagedBudget lb = least_paged_budget(in);
  if (budget < lb.least)
    throw BudgetError(
        "memory budget " + format_bytes(budget) + " is too small for " + std::to_string(in.n) +
            " particles out of core (pages of " + format_bytes(in.page_bytes) + ", " + std::to_string(in.threads) +
            " threads, n_leaf " + std::to_string(in.n_leaf) + ", n_crit " + std::to_string(in.n_crit) +
            "): the page tables and the fewest frames take " + format_bytes(lb.store) +
            ", the tree's fewest cell frames and its groups (~" + std::to_string(lb.groups) + " planned) " +
            format_bytes(lb.tree) + ", the sort " + format_bytes(lb.sort) +
            " (these two use the same room in turn), and the fixed allowances for the kick passes' blocks and the "
            "threads' copied particle blocks " +
            format_bytes(lb.blocks + lb.keep_free) + "; the least budget that works is " + format_bytes(lb.least) +
            " (" + std::to_string(lb.least) + " bytes)",
        budget, lb.least);
  PagedBudgetPlan plan;
  plan.budget = budget;
  plan.tables_and_least_frames = lb.store;
  plan.tree_least = lb.tree;
  const std::uint64_t least_frames = lb.store - lb.tables, spare = budget - lb.least;
  // by default the particles' cache takes half of what the least needs leave, once the
  // sort's buffer and the tree's cell cache have had kSortAndCellsRoom a thread of it; the
  // other half widens those two as well
  plan.cache = least_frames + cache_share(spare, in.threads);
  if (cache_bytes) {
    if (*cache_bytes > least_frames + spare)
      throw BudgetError("cache_bytes " + format_bytes(*cache_bytes) + " leaves too little of the memory budget " +
                            format_bytes(budget) + " for the tree and the sort: at most " +
                            format_bytes(least_frames + spare),
                        *cache_bytes, least_frames + spare);
    plan.cache = std::max(*cache_bytes, least_frames);
  }
  const std::uint64_t walk_least = walk_least_cache(in.n, in.page_bytes, in.threads);
  if (!cache_bytes && plan.cache < walk_least) {
    const std::uint64_t enough = walk_budget(in, page_auto);
    plan.warning = "memory budget " + format_bytes(budget) + " leaves " + std::to_string(in.n) +
                   " particles a cache of " + format_bytes(plan.cache) + ", less than the " +
                   format_bytes(walk_least) + " the tree walk's working set needs (" +
                   format_bytes(kWalkCachePerThread) + " of x, y, z and m pages for each of " +
                   std::to_string(in.threads) + " thread" + (in.threads != 1 ? "s" : "") +
                   " and the prefetch): every step will re-read the same pages many times over. A budget of " +
                   format_bytes(enough) + " (" + std::to_string(enough) + " bytes) or more avoids it.";
  }
  plan.headroom = budget - lb.tables - plan.cache;
  // up to one run of the sort with the next kick-drift inside it (the steady-state step)
  const auto n = static_cast<std::int64_t>(in.n);
  const auto one_run = static_cast<std::int64_t>(sort_run_bytes_per_particle(true)) * n;
  const auto least_sort = static_cast<std::int64_t>(lb.sort) - 2 * n;
  const auto room = static_cast<std::int64_t>(plan.headroom) - static_cast<std::int64_t>(lb.blocks) - 2 * n;
  plan.sort_buffer = static_cast<std::uint64_t>(std::max(least_sort, std::min(one_run, room)));
  if (sort_buffer) {
    if (*sort_buffer < static_cast<std::uint64_t>(least_sort) || *sort_buffer > plan.sort_buffer)
      throw InputError("sort_buffer: must be in [" + format_bytes(static_cast<std::uint64_t>(least_sort)) + ", " +
                       format_bytes(plan.sort_buffer) + "] here, got " + format_bytes(*sort_buffer));
    plan.sort_buffer = *sort_buffer;
  }
  return plan;
}

}  // namespace gravpipe
