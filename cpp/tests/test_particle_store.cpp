// The particle store against a copy of every field in memory: random range writes and reads
// (across pages, page groups and a cache far smaller than the data) return what was written
// last; the layout (page_of, offset_in_page) matches one computed here from the page size and
// the page groups; ranges outside the particles are refused; the traffic counters are whole
// pages; the scratch file is removed with the store.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gravpipe/error.hpp"
#include "gravpipe/particle_store.hpp"
#include "scratch_dir.hpp"
#include "test_harness.hpp"
#include "test_suites.hpp"

namespace gravpipe_test {

namespace {

using gravpipe::ParticleStore;
using gravpipe::StoreConfig;

StoreConfig small_store(const std::string& dir, std::int64_t n) {
  StoreConfig c;
  c.directory = dir;
  c.n = n;
  c.page_bytes = 4096;  // 512 values of a column, 128 of each of pos x, y, z and mass
  c.threads = 2;
  c.read_ahead = 2;
  c.cache_bytes = 8 * 4096;  // far below the data: every sweep evicts
  c.budget_bytes = ParticleStore::least_budget(c) + 64 * 4096;
  return c;
}

void writes_read_back(Context& t) {
  ScratchDir dir;
  const std::int64_t n = 3001;  // not a whole number of pages
  {
    ParticleStore s(small_store(dir.path(), n));
    std::vector<double> pos(3 * n, 0.0), mass(n, 0.0), vel(3 * n, 0.0);
    std::vector<std::int64_t> id(n, 0);
    s.write("pos", 0, n, pos.data()), s.write("mass", 0, n, mass.data());
    s.write("vel", 0, n, vel.data()), s.write("id", 0, n, id.data());
    std::mt19937_64 rng(3);
    for (int step = 0; step < 300; ++step) {
      const auto b = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n));
      const auto count = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(std::min<std::int64_t>(n - b, 700) + 1));
      const int which = static_cast<int>(rng() % 4);
      if (which == 0) {  // pos: 3 columns in the page group "body"
        std::vector<double> v(3 * count);
        for (double& x : v) x = static_cast<double>(rng() % 1000000);
        s.write("pos", b, count, v.data());
        std::copy(v.begin(), v.end(), pos.begin() + 3 * b);
      } else if (which == 1) {  // mass: the 4th column of that group
        std::vector<double> v(count);
        for (double& x : v) x = static_cast<double>(rng() % 1000);
        s.write("mass", b, count, v.data());
        std::copy(v.begin(), v.end(), mass.begin() + b);
      } else if (which == 2) {  // vel: three columns of their own
        std::vector<double> v(3 * count);
        for (double& x : v) x = -static_cast<double>(rng() % 1000);
        s.write("vel", b, count, v.data());
        std::copy(v.begin(), v.end(), vel.begin() + 3 * b);
      } else {
        std::vector<std::int64_t> v(count);
        for (std::int64_t& x : v) x = static_cast<std::int64_t>(rng());
        s.write("id", b, count, v.data());
        std::copy(v.begin(), v.end(), id.begin() + b);
      }
    }
    std::vector<double> got_pos(3 * n), got_mass(n), got_vel(3 * n), one(n);
    std::vector<std::int64_t> got_id(n);
    s.read("pos", 0, n, got_pos.data());
    s.read("mass", 0, n, got_mass.data());
    s.read("vel", 0, n, got_vel.data());
    s.read("id", 0, n, got_id.data());
    CHECK(got_pos == pos);
    CHECK(got_mass == mass);
    CHECK(got_vel == vel);
    CHECK(got_id == id);
    s.read_component("pos", 1, 0, n, one.data());
    bool y_ok = true;
    for (std::int64_t k = 0; k < n; ++k) y_ok = y_ok && one[k] == pos[3 * k + 1];
    CHECK(y_ok);
    // again, every page from the file through its checksum
    s.evict_all();
    s.read("pos", 0, n, got_pos.data());
    CHECK(got_pos == pos);
    const gravpipe::StoreCounters c = s.counters();
    CHECK_EQ(c.bytes_read, c.pages_read * 4096);
    CHECK_EQ(c.bytes_written, c.pages_written * 4096);
    CHECK(c.pages_read > 0 && c.pages_written > 0);
    CHECK_LE(s.budget().used(), s.budget().total());
  }
  CHECK(dir.empty());  // the scratch file went with the store
}

void layout_is_the_documented_one(Context& t) {
  ScratchDir dir;
  const std::int64_t n = 1000;
  const StoreConfig c = small_store(dir.path(), n);
  ParticleStore s(c);
  // body (pos x, y, z, mass): 4096 / 8 / 4 = 128 particles a page; the others 512
  const std::int64_t body_pages = (n + 127) / 128, column_pages = (n + 511) / 512;
  // pos + mass share a stripe; vel 3, id 1, acc 3, pot 1 columns of their own
  CHECK_EQ(ParticleStore::page_count(c), body_pages + 8 * column_pages);
  CHECK_EQ(s.pages(), ParticleStore::page_count(c));
  CHECK_EQ(s.particles_per_page("pos"), std::int64_t{128});
  CHECK_EQ(s.particles_per_page("vel"), std::int64_t{512});
  int wrong = 0;
  std::vector<std::int64_t> owner(static_cast<std::size_t>(s.pages() * 4096 / 8), -1);  // who holds each slot
  std::int64_t column = 0;
  for (const gravpipe::FieldSpec& f : s.fields())
    for (int comp = 0; comp < f.components; ++comp, ++column)
      for (std::int64_t k = 0; k < n; ++k) {
        const std::int64_t page = s.page_of(f.name, comp, k);
        const std::size_t at = s.offset_in_page(f.name, comp, k);
        wrong += page < 0 || page >= s.pages() || at % 8 != 0 || at + 8 > 4096;
        const auto slot = static_cast<std::size_t>(page * 512 + static_cast<std::int64_t>(at / 8));
        if (slot < owner.size()) {
          wrong += owner[slot] != -1;  // no two values share a slot
          owner[slot] = column * n + k;
        }
      }
  CHECK_EQ(wrong, 0);
  // the group's pages hold x[128], y[128], z[128], m[128] of the same particles
  CHECK_EQ(s.page_of("pos", 2, 130), s.page_of("mass", 0, 130));
  CHECK_EQ(s.offset_in_page("mass", 0, 130) - s.offset_in_page("pos", 0, 130), std::size_t{3 * 128 * 8});
}

void ranges_outside_are_refused(Context& t) {
  ScratchDir dir;
  ParticleStore s(small_store(dir.path(), 100));
  std::vector<double> v(3 * 101);
  CHECK_THROWS_AS(s.read("pos", 0, 101, v.data()), gravpipe::InputError);
  CHECK_THROWS_AS(s.read("pos", -1, 2, v.data()), gravpipe::InputError);
  CHECK_THROWS_AS(s.write("mass", 99, 2, v.data()), gravpipe::InputError);
  CHECK_THROWS_AS(s.read_component("pos", 3, 0, 1, v.data()), gravpipe::InputError);
  CHECK_THROWS_AS(s.read_component("id", 0, 0, 1, v.data()), gravpipe::InputError);  // not float64
  CHECK_THROWS_AS(s.page_of("vel", 0, 100), gravpipe::InputError);
  CHECK_THROWS_AS(s.read("nope", 0, 1, v.data()), gravpipe::InputError);
  StoreConfig bad = small_store(dir.path(), 100);
  bad.page_bytes = 1000;  // not a multiple of 4096
  CHECK_THROWS_AS(ParticleStore{bad}, gravpipe::InputError);
  bad = small_store(dir.path(), 0);
  CHECK_THROWS_AS(ParticleStore{bad}, gravpipe::InputError);
}

}  // namespace

Suite particle_store_suite() {
  Suite s("particle_store");
  s.add("writes_read_back", writes_read_back);
  s.add("layout_is_the_documented_one", layout_is_the_documented_one);
  s.add("ranges_outside_are_refused", ranges_outside_are_refused);
  return s;
}

}  // namespace gravpipe_test
