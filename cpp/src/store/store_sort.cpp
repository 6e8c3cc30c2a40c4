// The external sort of a store by curve key (store_sort.hpp).
#include "gravpipe/store_sort.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <numeric>
#include <queue>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "gravpipe/aligned_buffer.hpp"
#include "gravpipe/batched_page_io.hpp"
#include "gravpipe/debug_checks.hpp"
#include "gravpipe/error.hpp"
#include "gravpipe/leapfrog_element.hpp"
#include "gravpipe/memory_budget.hpp"
#include "gravpipe/stopwatch.hpp"

namespace gravpipe {

namespace {

// Bytes per particle of a run in memory: positions and masses (32), keys and their order,
// twice in the radix sort (32), one column in and out (16); 80, rounded to what the budget
// plans. Masses are read with the positions: they share their pages (the page group "body"),
// which a later read would find evicted by the run's other columns and the next run's loads.
constexpr std::uint64_t kRunBytesPerParticle = 80;
// a kick-drift holds the run's velocities (24) and one column of accelerations (8) besides
constexpr std::uint64_t kKickDriftRunBytesPerParticle = kRunBytesPerParticle + 32;
// overlapped reads hold a second LoadedRun: positions and masses (32), and with a kick-drift
// velocities and a column of accelerations (32)
constexpr std::uint64_t kSecondLoadBytes = 32, kSecondLoadKickDriftBytes = 32 + 32;
constexpr std::int64_t kMaxRuns = 65535;       // the run of each output particle in 2 bytes
constexpr int kWriteThroughDepth = 16;         // whole twin pages written at once
constexpr std::int64_t kChunk = 1 << 16;       // output particles per merge / permute chunk
// No read-ahead along the columns for the runs, the merge and the permute: they read slices of
// many ranges in turn (the loader thread already overlaps the runs' reads), and hints past
// each slice loaded pages that the other slices evicted before use (N = 1e7 at 1/10, 51 runs:
// 196 -> 163 bytes read a particle). The bounds pass, one sweep of the positions, keeps it; the
// merge and the permute load exactly the pages they read next, in batches (BatchedLoads), and
// the merge hints the next run's pages to the read-ahead workers (hint_next_refill).
constexpr bool kReadAhead = false;

bool carries_mass(const StoreSortConfig& c) {
  return std::find(c.carried.begin(), c.carried.end(), "mass") != c.carried.end();
}

/// A carried column: field and component.
using CarriedColumn = std::pair<std::string, int>;

/// The carried columns in sets that share their pages (a page group: pos and mass), each
/// column of an ungrouped field a set of its own.
std::vector<std::vector<CarriedColumn>> columns_by_page(const ParticleStore& s, const StoreSortConfig& c) {
  std::vector<std::vector<CarriedColumn>> sets;
  std::vector<std::int64_t> first_page;
  for (const std::string& f : c.carried)
    for (int comp = 0; comp < s.field(f).components; ++comp) {
      const std::int64_t page = s.page_of(f, comp, 0);
      const auto it = std::find(first_page.begin(), first_page.end(), page);
      if (it != first_page.end()) {
        sets[static_cast<std::size_t>(it - first_page.begin())].emplace_back(f, comp);
      } else {
        first_page.push_back(page);
        sets.push_back({{f, comp}});
      }
    }
  return sets;
}

void check_fields(ParticleStore& s, const StoreSortConfig& c, bool twins) {
  if (s.field("pos").components != 3 || s.field("pos").type != FieldType::F64)
    throw InputError("store sort: field 'pos' must be a float64 3-vector");
  if (carries_mass(c) && (s.field("mass").components != 1 || s.field("mass").type != FieldType::F64))
    throw InputError("store sort: field 'mass' must be a float64 scalar");
  for (const char* f : {"index", "key"})
    if (s.field(f).components != 1 || s.field(f).type != FieldType::I64)
      throw InputError(std::string("store sort: field '") + f + "' must be an int64 scalar");
  if (c.kick_drift) {
    for (const char* f : {"vel", "acc"})
      if (s.field(f).components != 3 || s.field(f).type != FieldType::F64)
        throw InputError(std::string("store sort: a kick-drift needs field '") + f + "' as a float64 3-vector");
    if (std::find(c.carried.begin(), c.carried.end(), "vel") == c.carried.end())
      throw InputError("store sort: a kick-drift needs 'vel' among the carried fields");
  }
  if (!twins) return;
  for (const std::string& f : c.carried) {
    const FieldSpec& a = s.field(f);
    const FieldSpec& b = s.field(sort_twin(f));  // throws naming the fields when missing
    if (a.components != b.components || a.type != b.type)
      throw InputError("store sort: field '" + sort_twin(f) + "' differs in shape from '" + f + "'");
  }
  for (const char* f : {"index", "key"}) s.field(sort_twin(f));
}

/// The bounding cube of every position, read block by block (one block when the sort has one
/// run: `buf` then holds every position for the run to use).
AxisBounds store_bounds(ParticleStore& s, std::int64_t block, std::vector<double>& buf) {
  AxisBounds bounds;  // exact, so blocks give the in-core bounding_cube's box bit for bit
  for (std::int64_t b = 0; b < s.size(); b += block) {
    const std::int64_t n = std::min(block, s.size() - b);
    s.read("pos", b, n, buf.data());
    for (std::int64_t k = 0; k < n; ++k) bounds.add(&buf[3 * k]);
  }
  return bounds;
}

/// The frame of positions with these bounds: the one given, else a step's (step_frame)
/// after a drift, else their bounding cube.
CurveBox frame_of(const StoreSortConfig& c, const AxisBounds& bounds) {
  if (c.frame) return *c.frame;
  return c.drift_origin ? step_frame(*c.drift_origin, bounds) : bounds.cube();
}

/// What load_run reads of one run (run particles each; vel and acc only for a kick-drift):
/// with overlapped reads, the next run's is filled by a loader thread meanwhile.
struct LoadedRun {
  std::int64_t b = 0, n = 0;           // particles [b, b + n)
  std::vector<double> pos, mass, vel, acc;  // acc: one component at a time
  AxisBounds drifted;                  // of every run this buffer has held

  void size_for(std::int64_t run, bool kick_drift) {
    pos.resize(static_cast<std::size_t>(3 * run)), mass.resize(static_cast<std::size_t>(run));
    if (kick_drift) vel.resize(static_cast<std::size_t>(3 * run)), acc.resize(static_cast<std::size_t>(run));
  }
};

/// The sort's own scratch for one run.
struct RunScratch {
  std::vector<std::int64_t> local, in;
  /// a permuted column on its way out: aligned, so that its whole pages go to the file from here
  std::vector<std::int64_t, PageAlignedAllocator<std::int64_t>> out;
};

/// Reads of a run past the cache (ParticleStore::read_through): the walk's worker, whose
/// runs would otherwise pass through the walk's frames and evict the pages the walk uses.
struct RunReadThrough {
  ParticleStore& s;
  BatchedPageIo& io;
  AlignedBuffer& staging;
  void operator()(std::vector<ParticleStore::ColumnOut> columns, std::int64_t b, std::int64_t n) const {
    s.read_through(Span<const ParticleStore::ColumnOut>(columns.data(), columns.size()), b, n, io, staging);
  }
};

/// Read run [r.b, r.b + r.n)'s positions (unless `pos_loaded`: the bounds pass left them in
/// r.pos), masses and, with a kick-drift, its velocities, both kicked and drifted; the
/// drifted positions' bounds go into r.drifted. `through` (optional): read past the cache.
void load_run(ParticleStore& s, const StoreSortConfig& c, bool pos_loaded, LoadedRun& r,
              const RunReadThrough* through = nullptr) {
  const std::int64_t b = r.b, n = r.n;
  if (through != nullptr) {
    std::vector<ParticleStore::ColumnOut> cols;
    for (int comp = 0; comp < 3 && !pos_loaded; ++comp) cols.push_back({"pos", comp, r.pos.data() + comp, 3});
    if (carries_mass(c)) cols.push_back({"mass", 0, r.mass.data(), 1});
    if (!cols.empty()) (*through)(cols, b, n);
  } else {
    // positions and masses share pages: read together, a few pages at a time, so that a run
    // longer than the cache holds does not read each page twice
    for (std::int64_t k0 = 0; k0 < n; k0 += kChunk) {
      const std::int64_t m = std::min(kChunk, n - k0);
      if (!pos_loaded) s.read("pos", b + k0, m, r.pos.data() + 3 * k0, kReadAhead);
      if (carries_mass(c)) s.read("mass", b + k0, m, r.mass.data() + k0, kReadAhead);
    }
  }
  if (!c.kick_drift) return;
  const double h = c.kick_drift->h, dt = c.kick_drift->dt;
  if (through != nullptr) {
    (*through)({{"vel", 0, r.vel.data(), 3}, {"vel", 1, r.vel.data() + 1, 3}, {"vel", 2, r.vel.data() + 2, 3}}, b, n);
  } else {
    s.read("vel", b, n, r.vel.data(), kReadAhead);
  }
  for (int comp = 0; comp < 3; ++comp) {
    if (through != nullptr) {
      (*through)({{"acc", comp, r.acc.data(), 1}}, b, n);
    } else {
      s.read_column("acc", comp, b, n, r.acc.data(), kReadAhead);
    }
    for (std::int64_t k = 0; k < n; ++k) {  // paged_kick_drift's loop, one component at a time
      r.vel[3 * k + comp] = kicked(r.vel[3 * k + comp], r.acc[k], h);
      r.pos[3 * k + comp] = drifted(r.pos[3 * k + comp], r.vel[3 * k + comp], dt);
    }
  }
  for (std::int64_t k = 0; k < n; ++k) r.drifted.add(&r.pos[3 * k]);
}

/// Where a run's permuted columns go (field, component, first particle, count, values).
using ColumnWriter = std::function<void(const std::string&, int, std::int64_t, std::int64_t, const void*)>;

/// ParticleStore::write_column: through the cache.
ColumnWriter through_the_cache(ParticleStore& s) {
  return [&s](const std::string& f, int comp, std::int64_t b, std::int64_t n, const void* v) {
    s.write_column(f, comp, b, n, v);
  };
}

/// ParticleStore::write_column_through: whole pages straight to the file through `io`, for
/// the twins (written once, read by the merge after every run is written).
ColumnWriter straight_to_the_file(ParticleStore& s, BatchedPageIo& io) {
  return [&s, &io](const std::string& f, int comp, std::int64_t b, std::int64_t n, const void* v) {
    s.write_column_through(f, comp, b, n, v, io);
  };
}

/// Sort the loaded run [b, b + n) by (key, index) and write every carried field, key and
/// index permuted, through `write`, to the fields named by `to` (the twins, or the fields
/// themselves for one run). Positions (and kicked velocities) come from the run's buffers,
/// the rest is read.
void sort_run(ParticleStore& s, const StoreSortConfig& c, const CurveBox& frame, bool to_twin, const LoadedRun& r,
              RunScratch& w, const ColumnWriter& write, const RunReadThrough* through = nullptr) {
  const auto read_column = [&](const std::string& f, int comp, std::int64_t* out) {
    if (through != nullptr) {
      (*through)({{f, comp, out, 1}}, r.b, r.n);
    } else {
      s.read_column(f, comp, r.b, r.n, out, kReadAhead);
    }
  };
  const std::int64_t b = r.b, n = r.n;
  std::vector<std::uint64_t> keys = curve_keys({r.pos.data(), static_cast<std::size_t>(3 * n)}, frame, c.threads);
  std::vector<std::int64_t>& local = w.local;
  std::vector<std::int64_t>& in = w.in;
  auto& out = w.out;
  read_column("index", 0, in.data());
  // the in-core parallel radix sort by key (stable: ties in store order), then ties put in
  // caller (index) order, which the store order need not be after a drift
  local.resize(static_cast<std::size_t>(n));
  std::iota(local.begin(), local.end(), std::int64_t{0});
  sort_by_key(keys, local, c.threads);
  for (std::int64_t k = 0; k < n;) {
    std::int64_t e = k + 1;
    while (e < n && keys[e] == keys[k]) ++e;
    if (e - k > 1)
      std::sort(local.begin() + k, local.begin() + e, [&](std::int64_t u, std::int64_t v) { return in[u] < in[v]; });
    k = e;
  }
#if GRAVPIPE_DEBUG_CHECKS
  for (std::int64_t k = 1; k < n; ++k)
    GRAVPIPE_DEBUG_ASSERT(keys[k - 1] < keys[k] || (keys[k - 1] == keys[k] && in[local[k - 1]] < in[local[k]]),
                          "run at " + std::to_string(b) + ": particle " + std::to_string(k) +
                              " is not after the one before it in (key, index) order");
#endif
  const auto name = [&](const std::string& f) { return to_twin ? sort_twin(f) : f; };
  for (std::int64_t k = 0; k < n; ++k) out[k] = static_cast<std::int64_t>(keys[k]);
  if (to_twin || c.write_keys) write(name("key"), 0, b, n, out.data());
  if (!to_twin) s.set_stale("key", !c.write_keys);  // one run: every key of the store
  for (std::int64_t k = 0; k < n; ++k) out[k] = in[local[k]];
  write(name("index"), 0, b, n, out.data());
  // positions, masses, and velocities a kick-drift changed, are in memory: permuted from there
  const auto held = [&](const std::string& f) -> const std::vector<double>* {
    return f == "pos" ? &r.pos : f == "mass" ? &r.mass : f == "vel" && c.kick_drift ? &r.vel : nullptr;
  };
  if (!to_twin) {  // in place: the pages of what memory holds need not be read to be overwritten
    std::vector<std::string> in_memory;
    for (const std::string& f : c.carried)
      if (held(f) != nullptr) in_memory.push_back(f);
    s.discard_fields(in_memory);
  }
  const auto gather = [&](const std::string& f, int comp, std::int64_t k0, std::int64_t m, std::int64_t* o) {
    const std::vector<double>& h = *held(f);
    const int comps = s.field(f).components;
    for (std::int64_t k = 0; k < m; ++k) std::memcpy(&o[k], &h[comps * local[k0 + k] + comp], sizeof(double));
  };
  for (const std::vector<CarriedColumn>& set : columns_by_page(s, c)) {
    const bool all_held = std::all_of(set.begin(), set.end(), [&](const CarriedColumn& col) { return held(col.first); });
    if (set.size() > 1 && all_held) {
      // a page group: chunk by chunk, every column of it, so that its pages are written whole
      // while they are in the cache (column by column, each page would be read and written
      // once per column when the run's pages outgrow the cache)
      const std::int64_t chunk = kChunk / static_cast<std::int64_t>(set.size());
      for (std::int64_t k0 = 0; k0 < n; k0 += chunk) {
        const std::int64_t m = std::min(chunk, n - k0);
        for (const auto& [f, comp] : set) {
          gather(f, comp, k0, m, out.data());
          write(name(f), comp, b + k0, m, out.data());
        }
      }
      continue;
    }
    for (const auto& [f, comp] : set) {
      if (held(f) != nullptr) {
        gather(f, comp, 0, n, out.data());
      } else {
        read_column(f, comp, in.data());
        for (std::int64_t k = 0; k < n; ++k) out[k] = in[local[k]];
      }
      write(name(f), comp, b, n, out.data());
    }
  }
}

/// One run's head in the merge: a buffer of its next keys and indices.
struct RunHead {
  std::int64_t next = 0, end = 0;         // the run's unread particles [next, end) in the twins
  std::vector<std::int64_t> key, index;   // buffered from buf_at
  std::int64_t buf_at = 0, buf_n = 0;
  std::int64_t asked = 0;                 // its key and index pages are loaded (or asked for) up to here
  std::int64_t hinted = 0;                // its pages are hinted to the read-ahead workers up to here
};

/// Pages a pass reads next, loaded into the cache together: asked for range by range, their
/// reads in flight at once on flush() (Linux AIO through the sort's BatchedPageIo; pages that
/// follow one another in the file joined into one request). For the merge and the permute,
/// which know exactly which pages they read next: one page read at a time (a sleep, a wake
/// and a doorbell each) held the merge to 0.31 GB/s on the scratch disk (N = 1e7 at 1/10:
/// 0.51-0.63 s of a 0.72-0.89 s merge in 1526 refills), and the read-ahead workers, one
/// pread each, the permute to ~1 GB/s of reads and write-backs together.
class BatchedLoads {
 public:
  BatchedLoads(ParticleStore& s, BatchedPageIo& io) : s_(s), io_(io) {}

  /// The pages of particles [begin, begin + count) of column `component` of `field`.
  void ask(const std::string& field, int component, std::int64_t begin, std::int64_t count) {
    if (count <= 0) return;
    const std::int64_t last = s_.page_of(field, component, begin + count - 1);
    for (std::int64_t p = s_.page_of(field, component, begin); p <= last; ++p)
      if (pages_.empty() || pages_.back() != p) pages_.push_back(p);
  }
  std::size_t asked() const { return pages_.size(); }
  /// Load every page asked for since the last flush (resident ones are skipped; a page that
  /// fails to load is read again, and its error raised, by the reader's own read).
  void flush() {
    if (pages_.empty()) return;
    s_.prefetch_pages(Span<const std::int64_t>(pages_.data(), pages_.size()), io_);
    pages_.clear();
  }

 private:
  ParticleStore& s_;
  BatchedPageIo& io_;
  std::vector<std::int64_t> pages_;
};

/// Pages of a run the merge loads beyond a head's next buffer when it refills it: after a
/// step the runs are slices of the last step's curve order, and the merge takes each nearly
/// whole in turn, so a head that empties is about to be read on.
constexpr std::int64_t kMergeAheadPages = 4;
/// Pages the first fill of the heads loads in one batch.
constexpr std::size_t kFirstFillBatchPages = 64;

/// The end of the particles a refill of h at `next` asks for: `count` and `ahead_pages` key
/// pages further, within the run.
std::int64_t refill_end(const ParticleStore& s, const RunHead& h, std::int64_t next, std::int64_t count,
                        std::int64_t ahead_pages) {
  return std::min(h.end, next + count + ahead_pages * s.particles_per_page(sort_twin("key")));
}

/// Ask for the key and index pages of h's particles [h.next, h.next + count), and
/// `ahead_pages` key pages further, that h has not asked for yet.
void ask_ahead(BatchedLoads& loads, const ParticleStore& s, RunHead& h, std::int64_t count, std::int64_t ahead_pages) {
  const std::int64_t to = refill_end(s, h, h.next, count, ahead_pages);
  const std::int64_t from = std::max(h.next, h.asked);
  if (from >= to) return;
  loads.ask(sort_twin("key"), 0, from, to - from);
  loads.ask(sort_twin("index"), 0, from, to - from);
  h.asked = to;
}

/// The pages h's next refill asks for (ask_ahead), hinted to the store's read-ahead workers:
/// called as the run before h is refilled, since after a step the merge takes the runs nearly
/// whole in turn, so that h's pages load while that run is merged. (N = 1e7 at 1/10 on the
/// scratch disk: the merge's waits for its refills' loads 0.108 -> 0.024 s a step.) A hint
/// the workers have not served in time costs nothing: the refill loads what is missing.
void hint_next_refill(ParticleStore& s, RunHead& h, std::int64_t size, std::vector<std::int64_t>& pages) {
  const std::int64_t buf_end = h.buf_at + h.buf_n;
  const std::int64_t from = std::max({h.asked, buf_end, h.hinted});
  const std::int64_t to = refill_end(s, h, buf_end, size, kMergeAheadPages);
  if (from >= to) return;
  h.hinted = to;
  pages.clear();
  for (const std::string& f : {sort_twin("key"), sort_twin("index")})
    for (std::int64_t p = s.page_of(f, 0, from); p <= s.page_of(f, 0, to - 1); ++p) pages.push_back(p);
  s.hint(Span<const std::int64_t>(pages.data(), pages.size()));
}

/// h's next buffer of `size` from the cache (its pages loaded by `loads`, or on demand).
void refill(ParticleStore& s, RunHead& h, std::int64_t size) {
  h.buf_at = h.next;
  h.buf_n = std::min(size, h.end - h.next);
  s.read_column(sort_twin("key"), 0, h.buf_at, h.buf_n, h.key.data(), kReadAhead);
  s.read_column(sort_twin("index"), 0, h.buf_at, h.buf_n, h.index.data(), kReadAhead);
}

/// Every head's first buffer, their pages loaded a batch of heads at a time.
void first_fill(ParticleStore& s, std::vector<RunHead>& heads, std::int64_t size, BatchedLoads& loads) {
  std::size_t batch_begin = 0;
  for (std::size_t r = 0; r <= heads.size(); ++r) {
    if (r == heads.size() || loads.asked() >= kFirstFillBatchPages) {
      loads.flush();
      for (; batch_begin < r; ++batch_begin)
        if (heads[batch_begin].next < heads[batch_begin].end) refill(s, heads[batch_begin], size);
    }
    if (r < heads.size()) ask_ahead(loads, s, heads[r], size, 0);
  }
}

/// The merge's output columns: page-aligned, so that their whole pages go to the file
/// through the merge's BatchedPageIo instead of being written back from frames one by one.
using AlignedColumn = std::vector<std::int64_t, PageAlignedAllocator<std::int64_t>>;

/// How far the merge has written `from` (the run of each output particle): a permute lane
/// that starts during the merge waits on it before it counts a chunk's sources. A merge that
/// throws fails it, so that the lane stops instead of waiting for particles never merged.
class MergeProgress {
 public:
  void advance(std::int64_t merged) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      merged_ = merged;
    }
    changed_.notify_all();
  }
  void fail() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      failed_ = true;
    }
    changed_.notify_all();
  }
  /// Blocks until particles [0, k) are merged; throws if the merge failed first.
  void wait_for(std::int64_t k) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return merged_ >= k || failed_; });
    // (never seen by a caller: the merge's own error is the one raised)
    if (merged_ < k) throw std::runtime_error("store sort: the merge stopped before the permute could follow it");
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::int64_t merged_ = 0;
  bool failed_ = false;
};

/// Merge the runs' (key, index): "index" (and "key", with `write_keys`) in curve order, and
/// the run of each output particle in `from`.
void merge_runs(ParticleStore& s, std::vector<RunHead>& heads, std::int64_t head_size, std::vector<std::uint16_t>& from,
                bool write_keys, BatchedPageIo& io, SortObserver* observer, MergeProgress& progress) {
  using Top = std::tuple<std::uint64_t, std::int64_t, std::uint16_t>;  // key, index, run
  std::priority_queue<Top, std::vector<Top>, std::greater<Top>> heap;
  BatchedLoads loads(s, io);
  first_fill(s, heads, head_size, loads);
  std::vector<std::int64_t> hints;
  auto push = [&](std::size_t r) {
    RunHead& h = heads[r];
    if (h.next >= h.end) return;
    if (h.next >= h.buf_at + h.buf_n) {
      ask_ahead(loads, s, h, head_size, kMergeAheadPages);
      loads.flush();
      refill(s, h, head_size);
      if (r + 1 < heads.size()) hint_next_refill(s, heads[r + 1], head_size, hints);
    }
    const std::int64_t q = h.next - h.buf_at;
    heap.emplace(static_cast<std::uint64_t>(h.key[q]), h.index[q], static_cast<std::uint16_t>(r));
  };
  for (std::size_t r = 0; r < heads.size(); ++r) push(r);
  AlignedColumn key(kChunk), index(kChunk);
  const std::int64_t n = s.size();
#if GRAVPIPE_DEBUG_CHECKS
  std::pair<std::uint64_t, std::int64_t> last_out{0, -1};  // the merge's output so far ends here
#endif
  for (std::int64_t k0 = 0; k0 < n; k0 += kChunk) {
    const std::int64_t m = std::min(kChunk, n - k0);
    for (std::int64_t k = 0; k < m;) {
      const auto [kk, ii, r] = heap.top();
      heap.pop();
      key[k] = static_cast<std::int64_t>(kk), index[k] = ii, from[k0 + k] = r;
      ++heads[r].next, ++k;
      // a gallop: the run's buffered particles that still precede every other run's head
      // follow without the heap. After a step the runs are slices of the last step's curve
      // order, so each run leads for most of its length ((key, index) pairs are distinct:
      // the order is the heap's)
      RunHead& h = heads[r];
      const std::int64_t buffered_end = std::min(h.end, h.buf_at + h.buf_n);
      while (k < m && h.next < buffered_end) {
        const std::int64_t q = h.next - h.buf_at;
        const auto next = std::make_pair(static_cast<std::uint64_t>(h.key[q]), h.index[q]);
        if (!heap.empty() && std::make_pair(std::get<0>(heap.top()), std::get<1>(heap.top())) < next) break;
        key[k] = h.key[q], index[k] = h.index[q], from[k0 + k] = r;
        ++h.next, ++k;
      }
      push(r);
    }
#if GRAVPIPE_DEBUG_CHECKS
    for (std::int64_t k = 0; k < m; ++k) {
      const std::pair<std::uint64_t, std::int64_t> out{static_cast<std::uint64_t>(key[k]), index[k]};
      GRAVPIPE_DEBUG_ASSERT(k0 + k == 0 || last_out < out, "merged particle " + std::to_string(k0 + k) +
                                                               " is not after the one before it in (key, index) order");
      last_out = out;
    }
#endif
    progress.advance(k0 + m);
    if (observer != nullptr) observer->merged(k0, Span<const std::int64_t>(key.data(), static_cast<std::size_t>(m)));
    if (write_keys) s.write_column_through("key", 0, k0, m, key.data(), io);
    s.write_column_through("index", 0, k0, m, index.data(), io);
  }
  s.set_stale("key", !write_keys);
}

/// The distinct fields of a set of columns.
std::vector<std::string> fields_of(const std::vector<CarriedColumn>& set) {
  std::vector<std::string> fields;
  for (const auto& [f, comp] : set)
    if (std::find(fields.begin(), fields.end(), f) == fields.end()) fields.push_back(f);
  return fields;
}

/// Where x, y, z and m lie among a set's columns ({-1, ...}: the set is not pos and mass).
std::array<int, 4> body_columns(const std::vector<CarriedColumn>& set) {
  std::array<int, 4> at{-1, -1, -1, -1};
  for (std::size_t q = 0; q < set.size(); ++q) {
    if (set[q].first == "pos") at[static_cast<std::size_t>(set[q].second)] = static_cast<int>(q);
    if (set[q].first == "mass") at[3] = static_cast<int>(q);
  }
  for (int a : at)
    if (a < 0) return {-1, -1, -1, -1};
  return at;
}

/// Bytes the permute holds per value of a chunk: the slices read (8), two output buffers
/// (16), the source of each value (4), the staged pages of a write (8).
constexpr std::uint64_t kPermuteBytesPerValue = 36;
/// Values a permute chunk holds at most (~9 MiB of buffers): chunks of a few MiB keep
/// several requests in flight in each batch of loads and of writes.
constexpr std::int64_t kPermuteMaxValues = std::int64_t{1} << 18;

/// The permute's chunks and buffers, for one lane's sets within `room` values a chunk.
struct PermuteSizes {
  PermuteSizes(const ParticleStore& store, std::int64_t room_values, const std::vector<std::vector<CarriedColumn>>& sets)
      : s(store), room(room_values) {
    for (const auto& set : sets) {
      values = std::max(values, chunk(set) * static_cast<std::int64_t>(set.size()));
      pages = std::max(pages, chunk(set) / s.particles_per_page(set.front().first));
      if (body_columns(set)[0] >= 0) body_chunk = chunk(set);
    }
  }
  /// A set's chunk: whole pages, at least one.
  std::int64_t chunk(const std::vector<CarriedColumn>& set) const {
    const std::int64_t per_page = s.particles_per_page(set.front().first);
    return std::max(per_page, room / static_cast<std::int64_t>(set.size()) / per_page * per_page);
  }
  /// Bytes of its buffers: the slices, two outputs, the sources, the staged pages, and an
  /// observer's two chunks of keys.
  std::uint64_t bytes(bool observer) const {
    return static_cast<std::uint64_t>(values) * (8 + 16 + 4) + static_cast<std::uint64_t>(pages) * s.page_bytes() +
           (observer ? static_cast<std::uint64_t>(body_chunk) * 16 : 0);
  }
  const ParticleStore& s;
  std::int64_t room;
  std::int64_t values = 0, pages = 0, body_chunk = 0;
};

/// The permute's sets in two lanes that run side by side, each with its own buffers and
/// threads (loads, gathers, writes): the positions and masses (which an observer sees) in
/// one, the other fields in the other, so that the device has both lanes' loads and writes
/// in flight. One lane alone kept it ~60% busy: N = 1e7 at 1/10 on the scratch disk,
/// alternating steps, 5 rounds, permute median 0.943 -> 0.838 s, lower in every round. The
/// lanes share the one lane's buffer (half its chunk each), so the budget left to the
/// observer (the tree's build) is the same. One lane where the sets do not split.
/// Lane 1 starts during the merge, its buffers (at most ~1/8 of the sort buffer: N = 1e7 at
/// 1/10, its full half chunk, 4.7 of the 40 MB) out of the merge heads' share, where they
/// leave the heads at least 3/4 of it.
struct PermutePlan {
  std::vector<std::vector<std::vector<CarriedColumn>>> lanes;
  std::vector<PermuteSizes> sizes;
  std::uint64_t bytes = 0;        // every lane's buffers
  std::uint64_t in_merge = 0;     // bytes of lane 1's buffers when it starts during the merge, else 0
};

PermutePlan plan_permute(const ParticleStore& s, const StoreSortConfig& c,
                         const std::vector<std::vector<CarriedColumn>>& sets) {
  PermutePlan plan;
  plan.lanes.resize(2);
  for (const auto& set : sets) plan.lanes[body_columns(set)[0] >= 0 ? 0 : 1].push_back(set);
  if (plan.lanes[0].empty() || plan.lanes[1].empty()) plan.lanes.assign(1, sets);
  const auto values_in = [](std::uint64_t bytes) { return static_cast<std::int64_t>(bytes / kPermuteBytesPerValue); };
  const auto lanes = static_cast<std::int64_t>(plan.lanes.size());
  const std::int64_t room = std::min(kPermuteMaxValues, values_in(c.buffer_bytes)) / lanes;
  for (const auto& lane : plan.lanes) {
    const bool second = &lane != &plan.lanes.front();
    plan.sizes.emplace_back(s, second ? std::min(room, values_in(c.buffer_bytes / 8)) : room, lane);
    plan.bytes += plan.sizes.back().bytes(c.observer != nullptr);
  }
  if (plan.lanes.size() > 1 && plan.sizes[1].bytes(false) <= c.buffer_bytes / 4)
    plan.in_merge = plan.sizes[1].bytes(false);
  return plan;
}

/// The sets of one lane from the runs (twins) into curve order, one set (columns that share
/// their pages) at a time, in chunks of whole pages (up to ~kPermuteMaxValues / (the set's
/// columns) particles, within the sort's buffer): the twin pages of each run's slice of the
/// chunk loaded together (BatchedLoads) on a loading thread while the chunk before is
/// gathered (N = 1e7 at 1/10 on the scratch disk, alternating steps: permute median 0.935 ->
/// 0.874 s), every column of the set read from them, and the
/// chunk's whole output pages laid out and written straight to the file together
/// (ParticleStore::write_through) by a second thread while the next chunk loads, so that
/// the device has reads and writes in flight at once. Before, the read-ahead workers loaded
/// the next chunk's pages one pread each and wrote the cooled output back one pwrite each
/// (N = 1e7 at 1/10 on the scratch disk: permute 0.96-1.25 s). The twin pages are cooled
/// once read: they go first when a frame is needed. An observer that wants them is shown
/// each chunk of the positions and masses (a page group) with its keys, made again from the
/// positions in the sort's `frame`, on a thread of its own while the next chunk loads;
/// returns whether it saw every particle. `sizes`: the lane's chunks and buffers; `merging`
/// (or null: merged already) the merge's progress, which a chunk's sources wait for.
bool permute_lane(ParticleStore& s, const StoreSortConfig& c, const std::vector<std::vector<CarriedColumn>>& sets,
                  const PermuteSizes& sizes, const std::vector<std::int64_t>& run_begin,
                  const std::vector<std::uint16_t>& from, const CurveBox& frame, MergeProgress* merging) {
  const std::int64_t n = s.size();
  const std::size_t k_runs = run_begin.size();
  const std::int64_t values = sizes.values, pages = sizes.pages;
  const auto chunk_of = [&sizes](const std::vector<CarriedColumn>& set) { return sizes.chunk(set); };
  // the next chunk's pages load on a thread of their own (its own AIO context) while this
  // chunk is gathered and laid out, so that the device is not idle between the chunks' loads
  BatchedPageIo ahead_io(s.file(), kWriteThroughDepth);
  BatchedLoads loads(s, ahead_io);
  std::future<void> loading;  // the next chunk's loads (its future waits for them if we throw)
  BatchedPageIo write_io(s.file(), kWriteThroughDepth);  // the writing thread's
  AlignedBuffer staging(static_cast<std::size_t>(pages) * s.page_bytes());
  std::vector<std::int64_t> slices(static_cast<std::size_t>(values)), cursor(k_runs), count(k_runs), count_next(k_runs),
      at(k_runs);
  AlignedColumn out[2] = {AlignedColumn(static_cast<std::size_t>(values)), AlignedColumn(static_cast<std::size_t>(values))};
  std::vector<std::int32_t> source(static_cast<std::size_t>(values));  // where each output value lies in the slices
  AlignedColumn keys[2];       // the chunks' keys, for an observer
  std::future<void> writing;  // the last chunk's write (its future waits for it if we throw)
  std::future<void> observing;  // the observer's look at the last chunk
  bool observed = false;
  int half = 0;
  for (const std::vector<CarriedColumn>& set : sets) {
    const auto width = static_cast<std::int64_t>(set.size());
    const std::int64_t chunk = chunk_of(set);
    const std::vector<std::string> fields = fields_of(set);
    const std::array<int, 4> body = body_columns(set);
    const bool observe = c.observer != nullptr && !observed && body[0] >= 0 && c.observer->wants_bodies();
    if (observe) keys[0].resize(static_cast<std::size_t>(chunk)), keys[1].resize(static_cast<std::size_t>(chunk));
    std::copy(run_begin.begin(), run_begin.end(), cursor.begin());
    // the twin pages of a chunk whose runs' slices start at `from_run`, loaded on the loading
    // thread: `counts` its slices' lengths
    // (what it uses is captured by value or outlives `loading`, which waits for it on unwinding)
    const auto load_chunk = [&loads, k_runs, twin = sort_twin(set.front().first),
                             comp = set.front().second](std::vector<std::int64_t> from_run, std::vector<std::int64_t> counts) {
      return std::async(std::launch::async, [&loads, k_runs, twin, comp, from_run = std::move(from_run),
                                             counts = std::move(counts)] {
        // the columns of a set share their pages: the first one's are every one's
        for (std::size_t r = 0; r < k_runs; ++r) loads.ask(twin, comp, from_run[r], counts[r]);
        loads.flush();
      });
    };
    const auto count_chunk = [&](std::int64_t k0, std::int64_t m, std::vector<std::int64_t>& counts) {
      if (merging != nullptr) merging->wait_for(k0 + m);
      std::fill(counts.begin(), counts.end(), 0);
      for (std::int64_t k = 0; k < m; ++k) ++counts[from[k0 + k]];
    };
    count_chunk(0, std::min(chunk, n), count);
    loading = load_chunk(cursor, count);
    for (std::int64_t k0 = 0; k0 < n; k0 += chunk, half ^= 1) {
      const std::int64_t m = std::min(chunk, n - k0);
      loading.get();  // this chunk's pages (rethrows the loads' error)
      if (k0 + chunk < n) {  // the next chunk's, while this one is gathered
        const std::int64_t m_next = std::min(chunk, n - k0 - chunk);
        std::vector<std::int64_t> cursor_next(k_runs);
        count_chunk(k0 + chunk, m_next, count_next);
        for (std::size_t r = 0; r < k_runs; ++r) cursor_next[r] = cursor[r] + count[r];
        loading = load_chunk(std::move(cursor_next), count_next);
      }
      std::int64_t off = 0;
      for (std::size_t r = 0; r < k_runs; ++r) {
        at[r] = off;
        if (count[r] == 0) continue;
        for (std::int64_t q = 0; q < width; ++q) {
          const auto& [f, comp] = set[static_cast<std::size_t>(q)];
          s.read_column(sort_twin(f), comp, cursor[r], count[r], slices.data() + q * chunk + off, kReadAhead);
        }
        for (const std::string& f : fields) s.cool(sort_twin(f), cursor[r], cursor[r] + count[r]);
        off += count[r], cursor[r] += count[r];
      }
      std::swap(count, count_next);  // the next chunk's (only the loop's next turn reads it)
      for (std::int64_t k = 0; k < m; ++k) source[k] = static_cast<std::int32_t>(at[from[k0 + k]]++);
      std::int64_t* o = out[half].data();  // the write two chunks back used it, and is done
      for (std::int64_t q = 0; q < width; ++q)
        for (std::int64_t k = 0; k < m; ++k) o[q * chunk + k] = slices[static_cast<std::size_t>(q * chunk + source[k])];
      if (writing.valid()) writing.get();  // rethrows its error
      if (observing.valid()) observing.get();
      if (observe) {
        const auto col = [o, chunk, &body](int q) { return o + static_cast<std::int64_t>(body[q]) * chunk; };
        observing = std::async(std::launch::async, [&c, &frame, k0, m, x = col(0), y = col(1), z = col(2),
                                                     mass = col(3), key = keys[half].data()] {
          // the merge's keys made again from the positions, in the frame they were made in (the
          // same bits): reading the ones the merge wrote cost 8 bytes a particle of the disk's
          for (std::int64_t k = 0; k < m; ++k) {
            double p[3];
            std::memcpy(&p[0], &x[k], 8), std::memcpy(&p[1], &y[k], 8), std::memcpy(&p[2], &z[k], 8);
            key[k] = static_cast<std::int64_t>(curve_key(p[0], p[1], p[2], frame));
          }
          c.observer->permuted(k0, m, x, y, z, mass, key);
        });
      }
      std::vector<ParticleStore::ColumnIn> columns;
      for (std::int64_t q = 0; q < width; ++q) {
        const auto& [f, comp] = set[static_cast<std::size_t>(q)];
        columns.push_back({f, comp, o + q * chunk});
      }
      writing = std::async(std::launch::async, [&s, &write_io, &staging, columns = std::move(columns), k0, m] {
        s.write_through(Span<const ParticleStore::ColumnIn>(columns.data(), columns.size()), k0, m, write_io, staging);
      });
    }
    if (observing.valid()) observing.get();
    observed = observed || observe;
  }
  if (writing.valid()) writing.get();
  return observed;
}

/// Every carried field from the runs (twins) into curve order, the plan's lanes side by
/// side: `early`, if valid, lane 1 started during the merge; returns whether the observer
/// saw every particle.
bool permute_fields(ParticleStore& s, const StoreSortConfig& c, const PermutePlan& plan,
                    const std::vector<std::int64_t>& run_begin, const std::vector<std::uint16_t>& from,
                    const CurveBox& frame, std::future<bool> early) {
  std::vector<std::future<bool>> others;  // (their futures wait for them if this lane throws)
  if (early.valid()) others.push_back(std::move(early));
  for (std::size_t l = 1 + others.size(); l < plan.lanes.size(); ++l)
    others.push_back(std::async(std::launch::async, [&, l] {
      return permute_lane(s, c, plan.lanes[l], plan.sizes[l], run_begin, from, frame, nullptr);
    }));
  bool observed = permute_lane(s, c, plan.lanes[0], plan.sizes[0], run_begin, from, frame, nullptr);
  for (std::future<bool>& f : others) observed = f.get() || observed;
  return observed;
}

/// Particles of a run that fits `buffer` at `bytes` a particle: all n, or runs that start on
/// page boundaries, so that the merge reads each page of a run once.
std::int64_t run_length(const ParticleStore& s, std::uint64_t buffer, std::uint64_t bytes) {
  const std::int64_t n = s.size();
  std::int64_t run = std::min<std::int64_t>(n, static_cast<std::int64_t>(buffer / bytes));
  // the longest page of any field: the others' page lengths divide it (page_bytes / 8 / width)
  std::int64_t per_page = 1;
  for (const FieldSpec& f : s.fields()) per_page = std::max(per_page, s.particles_per_page(f.name));
  if (run < n && run > per_page) run -= run % per_page;
  return std::max<std::int64_t>(run, 1);
}

}  // namespace

std::uint64_t sort_run_bytes_per_particle(bool kick_drift, bool overlap_reads) {
  const std::uint64_t second = kick_drift ? kSecondLoadKickDriftBytes : kSecondLoadBytes;
  return (kick_drift ? kKickDriftRunBytesPerParticle : kRunBytesPerParticle) + (overlap_reads ? second : 0);
}

std::uint64_t least_sort_buffer(std::int64_t n) {
  const std::int64_t run = (n + kMaxRuns - 1) / kMaxRuns;
  // at least runs of 1024 particles: shorter ones cost more in calls than they save
  return std::max<std::uint64_t>(static_cast<std::uint64_t>(run), 1024) * kRunBytesPerParticle;
}

struct SortRunWriter::Buffers {
  LoadedRun loaded;
  RunScratch scratch;
  Reservation charge;
  std::unique_ptr<BatchedPageIo> io;  // the worker's reads and writes past the cache
  AlignedBuffer staging;              // pages read past the cache, on their way to the run
};

std::uint64_t SortRunWriter::budget_bytes(std::int64_t run) {
  // the loaded run (kick-drift) and its scratch: three int64 columns, keys and their sort's;
  // the pages of a column's run read past the cache
  return static_cast<std::uint64_t>(run) * (kKickDriftRunBytesPerParticle + 24 + 8);
}

SortRunWriter::SortRunWriter(ParticleStore& s, const StoreSortConfig& c, std::int64_t run, const CurveBox& frame)
    : s_(s), c_(c), run_(run), frame_(frame), b_(std::make_unique<Buffers>()) {
  if (!c_.kick_drift) throw InputError("sort run writer: needs the sort's kick-drift");
  if (run_ < 1 || run_ >= s_.size()) throw InputError("sort run writer: a run must be shorter than the store");
  check_fields(s_, c_, true);
  b_->charge = s_.budget().reserve(budget_bytes(run_), "the runs made during the walk");
  std::vector<std::string> twins{sort_twin("key"), sort_twin("index")};
  for (const std::string& f : c_.carried) twins.push_back(sort_twin(f));
  s_.discard_fields(twins);
  b_->loaded.size_for(run_, true);
  b_->scratch.in.resize(static_cast<std::size_t>(run_)), b_->scratch.out.resize(static_cast<std::size_t>(run_));
  b_->io = std::make_unique<BatchedPageIo>(s_.file(), kWriteThroughDepth);
  const std::size_t page = s_.page_bytes(), whole = static_cast<std::size_t>(run_) * 8 / page * page;
  if (whole > 0) b_->staging = AlignedBuffer(whole);  // else: reads through the cache
}

SortRunWriter::~SortRunWriter() = default;

std::int64_t SortRunWriter::runs() const { return (s_.size() + run_ - 1) / run_; }

void SortRunWriter::write(std::int64_t k) {
  LoadedRun& r = b_->loaded;
  r.b = k * run_, r.n = std::min(run_, s_.size() - r.b);
  // past the cache both ways: the run's reads (the walk is done with these particles) and the
  // twins' whole pages (read only by the next sort) would pass through the walk's frames,
  // evict the pages it uses and leave dirty ones for its threads to write back
  const RunReadThrough through{s_, *b_->io, b_->staging};
  load_run(s_, c_, false, r, &through);
  sort_run(s_, c_, frame_, true, r, b_->scratch, straight_to_the_file(s_, *b_->io), &through);
}

PresortedRuns SortRunWriter::result() const {
  return {run_, frame_, c_.kick_drift->h, c_.kick_drift->dt, b_->loaded.drifted};
}

StoreSortStats sort_store_by_curve(ParticleStore& s, const StoreSortConfig& c) {
  const std::int64_t n = s.size();
  StoreSortStats st;
  const std::uint64_t least = least_sort_buffer(n);
  if (c.buffer_bytes < least)
    throw BudgetError("store sort: a buffer of " + format_bytes(c.buffer_bytes) + " sorts " + std::to_string(n) +
                          " particles in more than " + std::to_string(kMaxRuns) + " runs; the least buffer is " +
                          format_bytes(least),
                      c.buffer_bytes, least);
  const bool kick_drift = c.kick_drift.has_value();
  std::int64_t run = run_length(s, c.buffer_bytes, sort_run_bytes_per_particle(kick_drift, false));
  // overlapped reads (a second buffer: shorter runs) when there are several runs, unless
  // the shorter runs would be too many
  bool overlap = false;
  if (run < n && c.overlap_reads) {
    const std::int64_t shorter = run_length(s, c.buffer_bytes, sort_run_bytes_per_particle(kick_drift, true));
    if ((n + shorter - 1) / shorter <= kMaxRuns) run = shorter, overlap = true;
  }
  // runs made ahead (during the walk) in the frame this kick-drift's prediction gives
  const bool presorted = kick_drift && c.presorted && c.presorted->h == c.kick_drift->h &&
                         c.presorted->dt == c.kick_drift->dt && c.presorted->run < n &&
                         same_frame(c.presorted->frame, frame_of(c, c.kick_drift->bounds)) &&
                         same_frame(c.presorted->frame, frame_of(c, c.presorted->drifted));
  if (presorted) run = c.presorted->run, overlap = false;
  const std::int64_t k_runs = (n + run - 1) / run;
  // a kick-drift's longer records would need too many runs: the caller's plain pass does it
  if (kick_drift && k_runs > kMaxRuns) return st;
  check_fields(s, c, k_runs > 1);
  if (k_runs > 1 && !presorted) {  // the twins are scratch: every value the runs write, none read before
    std::vector<std::string> twins{sort_twin("key"), sort_twin("index")};
    for (const std::string& f : c.carried) twins.push_back(sort_twin(f));
    s.discard_fields(twins);
  }
  Reservation buffers = s.budget().reserve(c.buffer_bytes, "the sort buffer");
  st.runs = k_runs, st.run_particles = run;

  auto t0 = Clock::now();
  StoreCounters at = s.counters();
  // the bytes a pass moved, added to (read, written)
  const auto traffic = [&](std::int64_t& read, std::int64_t& written) {
    const StoreCounters now = s.counters();
    read += now.bytes_read - at.bytes_read, written += now.bytes_written - at.bytes_written;
    at = now;
  };
  BatchedPageIo io(s.file(), kWriteThroughDepth);
  const ColumnWriter to_twins = straight_to_the_file(s, io);
  LoadedRun loaded[2];
  loaded[0].size_for(run, kick_drift);
  if (overlap) loaded[1].size_for(run, kick_drift);
  RunScratch w;
  w.in.resize(static_cast<std::size_t>(run)), w.out.resize(static_cast<std::size_t>(run));
  if (kick_drift)
    st.bounds = c.kick_drift->bounds;  // predicted; one run: replaced by the run's own below
  else
    st.bounds = store_bounds(s, run, loaded[0].pos);  // one run: leaves every position there
  st.frame = frame_of(c, st.bounds);
  st.seconds_bounds = seconds_since(t0);

  if (presorted) {  // straight to the merge
    st.frame = c.presorted->frame;
    st.bounds = c.presorted->drifted;
    st.kick_drift_applied = st.presorted_used = true;
  } else {
  t0 = Clock::now();
  const auto load = [&](std::int64_t k, LoadedRun& r) {
    r.b = k * run, r.n = std::min(run, n - r.b);
    load_run(s, c, k_runs == 1 && !kick_drift, r);
  };
  if (!overlap) {
    for (std::int64_t k = 0; k < k_runs; ++k) {
      load(k, loaded[0]);
      if (kick_drift && k_runs == 1) st.frame = frame_of(c, loaded[0].drifted);  // every position is in memory
      sort_run(s, c, st.frame, k_runs > 1, loaded[0], w, k_runs > 1 ? to_twins : through_the_cache(s));
    }
  } else {
    // the next run's reads (and kick-drift) on a loader thread while this one is sorted and
    // written: the same bytes in the same buffers, so the same bits
    std::future<void> loading = std::async(std::launch::async, load, 0, std::ref(loaded[0]));
    for (std::int64_t k = 0; k < k_runs; ++k) {
      loading.get();  // rethrows the loader's error
      if (k + 1 < k_runs) loading = std::async(std::launch::async, load, k + 1, std::ref(loaded[(k + 1) % 2]));
      sort_run(s, c, st.frame, true, loaded[k % 2], w, to_twins);
    }
  }
  AxisBounds drifted = loaded[0].drifted;
  drifted.add(loaded[1].drifted);
  // release the run's buffers before the merge: moving empty vectors in frees them
  // (assigning {} would keep the capacity: 24 bytes a particle of a run, outside the budget,
  // which is how the 1e8 demonstration's peak RSS came to exceed its budget by ~1 GB)
  loaded[0] = LoadedRun(), loaded[1] = LoadedRun();
  w = RunScratch();
  st.seconds_runs = seconds_since(t0);
  traffic(st.runs_read, st.runs_written);  // the bounds pass's reads count with the runs
  // the runs went to the twins only: a missed prediction leaves the fields as they were
  if (kick_drift && !same_frame(frame_of(c, drifted), st.frame)) return st;
  if (kick_drift) st.bounds = drifted;
  st.kick_drift_applied = kick_drift;
  if (k_runs == 1) return st;
  }

  t0 = Clock::now();
  const Reservation sources = s.budget().reserve(static_cast<std::uint64_t>(n) * sizeof(std::uint16_t),
                                                 "the sort's run sources (2 bytes a particle)");
  std::vector<std::uint16_t> from(static_cast<std::size_t>(n));
  std::vector<std::int64_t> run_begin(static_cast<std::size_t>(k_runs));
  std::vector<RunHead> heads(static_cast<std::size_t>(k_runs));
  // The permute's lanes, planned before the merge: the lane without the positions and masses
  // starts now and follows the merge chunk by chunk (MergeProgress), its buffers taken from
  // the heads' share of the sort buffer; the other lane starts when the merge is done, which
  // an observer building the tree needs (merge_done) before it is shown positions. N = 1e7
  // at 1/10 on the scratch disk, alternating steps, 10 rounds: the sort lower in 8, its
  // median 1.466 -> 1.309 and 1.489 -> 1.416 s in two sets of 5 (seconds_merge then counts
  // the lane's share of the traffic and of the disk).
  const std::vector<std::vector<CarriedColumn>> sets = columns_by_page(s, c);
  const PermutePlan plan = plan_permute(s, c, sets);
  st.permute_lanes = static_cast<int>(plan.lanes.size());
  const bool early = plan.in_merge > 0;
  st.permute_in_merge = early;
  // the heads share the rest of the buffer (two int64 a buffered particle)
  const std::uint64_t heads_bytes = c.buffer_bytes - plan.in_merge;
  const std::int64_t head_size = std::max<std::int64_t>(1, static_cast<std::int64_t>(heads_bytes / 16) / k_runs);
  for (std::int64_t r = 0; r < k_runs; ++r) {
    RunHead& h = heads[r];
    h.next = run_begin[r] = r * run;
    h.end = std::min(n, h.next + run);
    h.key.resize(static_cast<std::size_t>(head_size)), h.index.resize(static_cast<std::size_t>(head_size));
  }
  s.discard_fields(c.carried);  // the twins hold every value now
  MergeProgress progress;
  std::future<bool> early_lane;  // (declared after what it reads: on unwinding it is waited for first)
  if (early)
    early_lane = std::async(std::launch::async, [&] {
      return permute_lane(s, c, plan.lanes[1], plan.sizes[1], run_begin, from, st.frame, &progress);
    });
  try {
    merge_runs(s, heads, head_size, from, c.write_keys, io, c.observer, progress);
  } catch (...) {
    progress.fail();  // the early lane stops; the merge's error is the one raised
    throw;
  }
  std::vector<RunHead>().swap(heads);
  // the permute's buffers are a few MiB of the sort buffer: the rest goes back to the budget
  // for the observer (the tree's build riding on the permute takes its groups and pages)
  const std::uint64_t permute = std::min(c.buffer_bytes, plan.bytes);
  buffers.release();
  buffers = s.budget().reserve(permute, "the sort's permute buffers");
  if (c.observer != nullptr) c.observer->merge_done();
  st.seconds_merge = seconds_since(t0);
  traffic(st.merge_read, st.merge_written);

  t0 = Clock::now();
  if (permute_fields(s, c, plan, run_begin, from, st.frame, std::move(early_lane)) && c.observer != nullptr)
    c.observer->permute_done();
  st.seconds_permute = seconds_since(t0);
  traffic(st.permute_read, st.permute_written);
  return st;
}

}  // namespace gravpipe
