// The external sort of an out-of-core store against the in-core curve sort: over several
// runs (a buffer far smaller than the particles) and in one, the store ends in the order of
// std::stable_sort of the keys in the sort's frame (ties by the caller's index), with the
// keys non-decreasing, the index a permutation, and every carried field moved with its
// particle. A buffer below the least is refused, naming the least.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "gravpipe/curve_order.hpp"
#include "gravpipe/error.hpp"
#include "gravpipe/particle_store.hpp"
#include "gravpipe/store_sort.hpp"
#include "scratch_dir.hpp"
#include "store_fixture.hpp"
#include "test_harness.hpp"
#include "test_suites.hpp"

namespace gravpipe_test {

namespace {

using gravpipe::ParticleStore;
using gravpipe::StoreConfig;

StoreConfig sort_store(const std::string& dir, std::int64_t n) {
  StoreConfig c;
  c.directory = dir;
  c.n = n;
  c.fields = sortable_fields();
  c.page_bytes = 4096;
  c.threads = 2;
  c.cache_bytes = 32 * 4096;
  c.budget_bytes = ParticleStore::least_budget(c) + 32 * 4096 + (std::uint64_t{16} << 20);
  return c;
}

void check_sorted(Context& t, ParticleStore& s, const Particles& p, const gravpipe::StoreSortStats& st) {
  const std::int64_t n = s.size();
  // the reference: the caller's positions keyed in the sort's frame, stable-sorted
  std::vector<std::uint64_t> keys = gravpipe::curve_keys({p.pos.data(), p.pos.size()}, st.frame, 1);
  const std::vector<std::uint64_t> unsorted = keys;
  std::vector<std::int64_t> want(static_cast<std::size_t>(n));
  std::iota(want.begin(), want.end(), std::int64_t{0});
  std::stable_sort(want.begin(), want.end(), [&](std::int64_t a, std::int64_t b) {
    return unsorted[static_cast<std::size_t>(a)] < unsorted[static_cast<std::size_t>(b)];
  });
  std::vector<std::int64_t> index(static_cast<std::size_t>(n)), key(static_cast<std::size_t>(n)), id(static_cast<std::size_t>(n));
  std::vector<double> pos(static_cast<std::size_t>(3 * n)), vel(static_cast<std::size_t>(3 * n)), mass(static_cast<std::size_t>(n));
  s.read("index", 0, n, index.data());
  s.read("key", 0, n, key.data());
  s.read("id", 0, n, id.data());
  s.read("pos", 0, n, pos.data());
  s.read("vel", 0, n, vel.data());
  s.read("mass", 0, n, mass.data());
  CHECK(index == want);
  CHECK(std::is_sorted(key.begin(), key.end()));
  std::vector<std::int64_t> seen(index);
  std::sort(seen.begin(), seen.end());
  std::vector<std::int64_t> all(static_cast<std::size_t>(n));
  std::iota(all.begin(), all.end(), std::int64_t{0});
  CHECK(seen == all);
  int moved_wrong = 0;
  for (std::int64_t k = 0; k < n; ++k) {
    const auto o = static_cast<std::size_t>(want[static_cast<std::size_t>(k)]);
    const auto u = static_cast<std::size_t>(k);
    moved_wrong += static_cast<std::uint64_t>(key[u]) != unsorted[o] || id[u] != p.id[o] || mass[u] != p.mass[o];
    for (int c = 0; c < 3; ++c) moved_wrong += pos[3 * u + c] != p.pos[3 * o + c] || vel[3 * u + c] != p.vel[3 * o + c];
  }
  CHECK_EQ(moved_wrong, 0);
  // the frame is the bounding cube of the positions, as the in-core tree's
  const gravpipe::CurveBox cube = gravpipe::bounding_cube({p.pos.data(), p.pos.size()}, 1);
  CHECK(gravpipe::same_frame(cube, st.frame));
}

/// `buffer` 0: twice the least, runs of ~1000 particles (with the overlapped reads' second
/// buffer), some twenty of them merged.
void sort_runs(Context& t, std::uint64_t buffer, bool want_several) {
  ScratchDir dir;
  const std::int64_t n = 20000;
  if (buffer == 0) buffer = 2 * gravpipe::least_sort_buffer(n);
  const Particles p = clustered_particles(n, 77);
  {
    ParticleStore s(sort_store(dir.path(), n));
    fill_store(s, p);
    gravpipe::StoreSortConfig c;
    c.buffer_bytes = buffer;
    c.threads = 2;
    const gravpipe::StoreSortStats st = gravpipe::sort_store_by_curve(s, c);
    CHECK_EQ(st.runs > 1, want_several);
    check_sorted(t, s, p, st);
    CHECK_LE(s.budget().peak(), s.budget().total());
    // sorted again, it stays (ties keep their index order)
    const gravpipe::StoreSortStats again = gravpipe::sort_store_by_curve(s, c);
    check_sorted(t, s, p, again);
  }
  CHECK(dir.empty());
}

void too_small_a_buffer_is_refused(Context& t) {
  ScratchDir dir;
  const std::int64_t n = 5000;
  ParticleStore s(sort_store(dir.path(), n));
  fill_store(s, clustered_particles(n, 1));
  gravpipe::StoreSortConfig c;
  c.threads = 1;
  const std::uint64_t least = gravpipe::least_sort_buffer(n);
  c.buffer_bytes = least - 1;
  const std::uint64_t charged = s.budget().used();
  bool thrown = false;
  try {
    gravpipe::sort_store_by_curve(s, c);
  } catch (const gravpipe::BudgetError& e) {
    thrown = true;
    CHECK_EQ(e.least_budget(), least);
  }
  CHECK(thrown);
  CHECK_EQ(s.budget().used(), charged);  // nothing kept from the refused sort
  // the least buffer sorts them
  c.buffer_bytes = least;
  const gravpipe::StoreSortStats st = gravpipe::sort_store_by_curve(s, c);
  CHECK(st.runs >= 1);
}

}  // namespace

Suite store_sort_suite() {
  Suite s("store_sort");
  s.add("several_runs_give_the_in_core_order", [](Context& t) { sort_runs(t, 0, true); });
  s.add("one_run_gives_the_in_core_order", [](Context& t) { sort_runs(t, std::uint64_t{12} << 20, false); });
  s.add("too_small_a_buffer_is_refused", too_small_a_buffer_is_refused);
  return s;
}

}  // namespace gravpipe_test
