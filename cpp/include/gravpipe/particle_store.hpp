// The out-of-core particle store (DESIGN.md, "What comes after"; Salmon & Warren, seed 004):
// per-particle fields as structure-of-arrays columns, each column cut into fixed-size pages
// of one scratch file, particles in the order they are written (curve order: the caller
// sorts, gravpipe.store does it for Particles), served through a page cache of a fixed byte
// budget with read-ahead along the curve. Every element is 8 bytes (float64 or int64), so a
// page holds page_bytes / 8 particles of one column, or, for the w columns of a page group
// (FieldSpec::page_group: pos and mass by default), page_bytes / 8 / w particles of each,
// one column after the other.
//
// Typical use:
//   StoreConfig c; c.directory = "/scratch"; c.n = n; c.budget_bytes = parse_byte_size("4GiB");
//   ParticleStore s(c);
//   s.write("pos", 0, n, pos_bytes);  ...  s.read("pos", b, count, out);
//   s.counters().bytes_swapped();
// Reads may run from many threads at once; a write must not overlap a concurrent read or
// write of the same particles.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gravpipe/aio_context_pool.hpp"
#include "gravpipe/batched_page_io.hpp"
#include "gravpipe/curve_order.hpp"
#include "gravpipe/memory_budget.hpp"
#include "gravpipe/page_cache.hpp"
#include "gravpipe/page_file.hpp"
#include "gravpipe/read_ahead.hpp"
#include "gravpipe/scratch_file_shelf.hpp"
#include "gravpipe/store_counters.hpp"

namespace gravpipe {

enum class FieldType { F64, I64 };

struct FieldSpec {
  std::string name;
  int components = 1;  // 3 for vectors: (n, 3) row-major in, three columns inside
  FieldType type = FieldType::F64;
  /// Fields with the same non-empty page group share their pages: a page holds the same
  /// particles of each of their columns, one column after the other (x[P], y[P], z[P], m[P]),
  /// so that a reader of all of them (the tree's walk) pins and loads one page where separate
  /// columns would take one each, and a page spans 1/width of the particles, so that the
  /// walk's scattered neighbour leaves cost smaller pages (N = 1e7 at 1/10: BENCHMARKS.md).
  std::string page_group;
};

/// pos(3), vel(3), mass, id (int64), acc(3), pot: what every integrator keeps, pos and mass
/// in the page group "body" (the x, y, z, m the tree reads). Hermite adds e.g. jerk(3), t, dt
/// through StoreConfig::fields.
std::vector<FieldSpec> default_fields();

struct StoreConfig {
  std::string directory;                          // where the scratch file goes
  std::int64_t n = 0;                             // particles
  std::vector<FieldSpec> fields = default_fields();
  std::size_t page_bytes = std::size_t{1} << 20;  // a multiple of 4096
  std::uint64_t budget_bytes = std::uint64_t{4} << 30;
  std::uint64_t cache_bytes = 0;  // 0: half of what the budget has left after the tables, the
                                  // other half staying for tree cells, lists and blocks
  Eviction eviction = Eviction::Clock;
  IoMode io_mode = IoMode::Auto;
  int read_ahead = 4;  // pages ahead along a column (0: no read-ahead thread)
  int threads = 0;     // threads that may pin at once (0: OpenMP's maximum)
};

class ParticleStore {
 public:
  /// Throws BudgetError (naming the least budget that works) when the budget cannot hold the
  /// page tables and the fewest frames the threads need; StoreError when the scratch
  /// directory cannot take the file; InputError for a bad configuration. First removes the
  /// page files of the directory that no running process holds (remove_stale_page_files:
  /// a run killed by SIGKILL leaves its files): stale_files_removed() lists them.
  explicit ParticleStore(const StoreConfig& config);
  ~ParticleStore();  // the scratch file is removed
  ParticleStore(const ParticleStore&) = delete;
  ParticleStore& operator=(const ParticleStore&) = delete;

  /// The least budget_bytes that config can run with: the page tables plus threads + 2 frames
  /// (+1 for read-ahead) of page_bytes.
  static std::uint64_t least_budget(const StoreConfig& config);
  /// Pages of the scratch file for config: ceil(n / (page_bytes / 8)) a column of its own,
  /// ceil(n / (page_bytes / 8 / w)) a page group of w columns.
  static std::int64_t page_count(const StoreConfig& config);

  /// Particles [begin, begin + count) of `field` from `values`: count x components 8-byte
  /// elements, row-major (the numpy (count, 3) layout).
  void write(const std::string& field, std::int64_t begin, std::int64_t count, const void* values);
  /// The same range into `out` (same layout). `read_ahead`: hint the pages that follow to
  /// the read-ahead thread (right for one sweep along the curve; not for readers that take
  /// slices of many ranges in turn, as the external sort does: their hints load pages that
  /// the other ranges' evict before use).
  void read(const std::string& field, std::int64_t begin, std::int64_t count, void* out, bool read_ahead = true);
  /// One component of a field as doubles (PagedParticles: x, y, z, m); `read_ahead`: hint
  /// the pages that follow, for a reader that sweeps the curve (not the tree walk, which
  /// jumps about it and prefetches what its lists will read instead).
  void read_component(const std::string& field, int component, std::int64_t begin, std::int64_t count,
                      double* out, bool read_ahead = true);

  /// One component of a field as raw 8-byte elements (float64 or int64), contiguous: the
  /// external sort permutes columns one at a time (store_sort.hpp). `read_ahead` as for read().
  void read_column(const std::string& field, int component, std::int64_t begin, std::int64_t count, void* out,
                   bool read_ahead = true);
  void write_column(const std::string& field, int component, std::int64_t begin, std::int64_t count,
                    const void* values);
  /// write_column() for a stream written once and read much later: the pages the range
  /// covers whole go straight to the file through `io` from where they lie in `values`
  /// (PageCache::write_through: no frame taken, none left dirty), when they lie at
  /// AlignedBuffer::kAlignment boundaries there (PageAlignedAllocator); the partial pages at
  /// the range's ends, a column that shares its pages with others (a page group), and values
  /// not so aligned go through the cache as write_column() does.
  void write_column_through(const std::string& field, int component, std::int64_t begin, std::int64_t count,
                            const void* values, BatchedPageIo& io);
  /// One column of a write_through(): component `component` of `field`, element k (8 bytes)
  /// from values + k * 8.
  struct ColumnIn {
    std::string field;
    int component;
    const void* values;
  };
  /// Particles [begin, begin + count) of `columns`, written once for a reader that comes
  /// much later (the sort's permute). Where the columns fill every slot of their pages (an
  /// ungrouped column, or every column of a page group), the pages the range covers whole are
  /// laid out in `staging` (aligned, whole pages; its size sets how many at once) and go
  /// straight to the file through `io` (PageCache::write_through: no frame taken, none left
  /// dirty); the partial pages at the ends, and columns that leave slots of their pages to
  /// others, go through the cache as write_column() does.
  void write_through(Span<const ColumnIn> columns, std::int64_t begin, std::int64_t count, BatchedPageIo& io,
                     AlignedBuffer& staging);
  /// One column of a read_through(): component `component` of `field`, element k (8 bytes)
  /// to out + k * stride elements.
  struct ColumnOut {
    std::string field;
    int component;
    void* out;
    int stride;
  };
  /// Particles [begin, begin + count) of `columns`, for a reader that will not come back to
  /// them (the walk's worker making the next sort's runs): pages in a frame are copied from
  /// it; the others come straight from the file through `io` into `staging` (aligned, whole
  /// pages; its size sets how many at once), checked against their CRC32C, and never take a
  /// frame (PageCache::read_past), so that they do not evict the pages the walk uses. No one
  /// may write these particles meanwhile. A staging of less than a page reads through the cache.
  void read_through(Span<const ColumnOut> columns, std::int64_t begin, std::int64_t count, BatchedPageIo& io,
                    AlignedBuffer& staging);
  /// Pin a page for reading, as the cache does for read(): PagedParticles serves blocks
  /// that lie inside one page straight from its frame while the handle lives.
  PageHandle pin(std::int64_t page) { return cache_->pin(page, PageCache::Access::Read); }
  /// The page cache itself, for readers that keep their own pins (PinnedSlots: the
  /// out-of-core tree's build reads the sorted keys through it).
  PageCache& cache() { return *cache_; }

  /// Every value of `field` is dead: the caller writes all of them before it reads any
  /// (PageCache::discard). Partial-page writes that follow then fill zeroed frames instead
  /// of reading the old pages from the file; until written, values read back unspecified.
  void discard(const std::string& field) { discard_fields({field}); }
  /// The same for several fields at once: pages shared by fields of a page group are
  /// discarded only when every field that shares them is listed (the external sort's permute
  /// discards pos and mass together before it writes them).
  void discard_fields(const std::vector<std::string>& fields);
  /// Whether `field`'s pages lag behind its values: a sort that leaves the keys out
  /// (StoreSortConfig::write_keys) marks "key" stale, and its owner marks it current once it
  /// has written every value (gravpipe.store's materialize). Readers of the pages that need
  /// every value (the out-of-core tree's build, of the keys) refuse a stale field.
  void set_stale(const std::string& field, bool stale);
  bool stale(const std::string& field) const;

  /// Derived fields (derived_fields.cpp): an int64 field read through read_values as what
  /// another field makes it, its own pages left as they are and no longer written: ids that
  /// are the caller's index plus a constant (the sort then neither carries nor writes them;
  /// N = 1e7, 80 MB less to the disk a step), or the curve keys of the positions in a sort's
  /// frame (a sort that gave them to a tree build instead of the disk). write_values to the
  /// field or to its source first writes the derived values into the field's pages and ends
  /// the derivation, as does materialize() (for readers of the pages: the tree's build).
  /// read() and write() see the pages only: the owner of a derivation keeps it true.
  void derive_from(const std::string& field, const std::string& source, std::int64_t offset);
  void derive_curve_keys(const std::string& field, const std::string& pos, const CurveBox& frame, int threads);
  /// End a derivation without writing anything (its owner has written the pages).
  void forget_derivation(const std::string& field);
  void materialize(const std::string& field);
  /// What a derived field reads as ("index + 5"), "" for a field that is not derived.
  std::string derivation(const std::string& field) const;
  /// The derived fields, with what each reads as.
  std::vector<std::pair<std::string, std::string>> derivations() const;
  /// A user's read: a derived field's values, any other field's pages.
  void read_values(const std::string& field, std::int64_t begin, std::int64_t count, void* out);
  /// A user's write: derived fields that depend on `field` (or are it) materialized first;
  /// counted in user_writes().
  void write_values(const std::string& field, std::int64_t begin, std::int64_t count, const void* values);
  /// Writes that came from outside the core (write_values, and a user's write_through:
  /// count_user_write), so that an owner of state about the values (the paged leapfrog's
  /// prepared runs and cells) notices a change made behind its back.
  std::uint64_t user_writes() const { return user_writes_; }
  void count_user_write() { ++user_writes_; }
  /// A sweep in particle order is done with particles [begin, end) of `field`: the pages of
  /// its columns whose last particle lies there go first when a frame is needed
  /// (PageCache::cool; a hint). The tree's results and the closing kick call it run by run.
  void cool(const std::string& field, std::int64_t begin, std::int64_t end);
  /// Load `page` ahead of its use if it is absent and a frame is free (PageCache::prefetch):
  /// for a reader that knows its next pages (the tree's walk prefetch). Returns whether it
  /// loaded; I/O errors propagate.
  bool prefetch(std::int64_t page) { return cache_->prefetch(page); }
  /// prefetch() of many pages, their reads in flight together (PageCache::prefetch_many
  /// through a BatchedPageIo of this call). Returns the loads that failed (the reader's
  /// own pin of such a page reports why).
  std::int64_t prefetch_pages(Span<const std::int64_t> pages);  // InputError for a page outside the file
  /// The same through the caller's `io`, for a pass that prefetches often (the sort's merge).
  std::int64_t prefetch_pages(Span<const std::int64_t> pages, BatchedPageIo& io);
  /// How batched loads reach the file: "Linux AIO, N deep", or "one page at a time (why)".
  std::string batched_reads() const;
  /// Hand `page` to the read-ahead thread (never blocks; dropped when its queue is full).
  void hint(std::int64_t page) { read_ahead_->hint(page); }
  void hint(Span<const std::int64_t> pages) { read_ahead_->hint(pages); }
  /// Pages the read-ahead thread looks ahead along a column.
  int read_ahead_pages() const { return read_ahead_pages_; }

  void flush();      // every dirty page to the file
  void evict_all();  // flush, then empty the cache: the next reads come from the file

  /// The scratch-file page that holds element `index` of component `component` of `field`.
  std::int64_t page_of(const std::string& field, int component, std::int64_t index) const;
  /// Where element `index` of that column lies inside its page (bytes from the page's start).
  std::size_t offset_in_page(const std::string& field, int component, std::int64_t index) const;

  std::int64_t size() const { return n_; }
  const std::vector<FieldSpec>& fields() const { return fields_; }
  const FieldSpec& field(const std::string& name) const;
  /// Particles a page of `field` holds: page_bytes / 8 / (the columns sharing its pages).
  std::int64_t particles_per_page(const std::string& field) const;
  std::int64_t pages() const { return cache_->pages(); }
  std::int64_t frames() const { return cache_->frames(); }
  std::size_t page_bytes() const { return file_->page_bytes(); }
  const PageFile& file() const { return *file_; }
  MemoryBudget& budget() { return *budget_; }
  /// The AIO contexts this store's batches borrow (and the cells' files of its trees).
  AioContextPool& aio_pool() { return *aio_pool_; }
  /// Where the trees over this store keep their cell files from one tree to the next.
  ScratchFileShelf& scratch_shelf() { return *shelf_; }
  const MemoryBudget& budget() const { return *budget_; }
  Eviction eviction() const { return eviction_; }
  StoreCounters counters() const { return cache_->counters(); }
  void reset_counters() { cache_->reset_counters(); }
  std::int64_t read_ahead_failures() const { return read_ahead_->failures(); }
  /// The stale page files the constructor removed from the directory (their owners report them).
  const std::vector<StalePageFile>& stale_files_removed() const { return stale_files_removed_; }

 private:
  /// Pages shared by `width` columns, each page holding `per_page` particles of each.
  struct Stripe {
    std::int64_t base;      // its first page
    std::int64_t pages;
    std::int64_t per_page;
    int width;
  };
  struct Column {
    std::size_t field;
    int component;
    std::size_t stripe;
    std::size_t offset;  // bytes from a page's start to the column's first element
  };
  /// The columns of cols[k]'s stripe among cols[k..] not yet taken (their indices in cols),
  /// flagged taken; `fills`: they take each slot of the stripe's pages once.
  std::vector<std::size_t> stripe_mates(const std::vector<const Column*>& cols, std::size_t k,
                                        std::vector<std::uint8_t>& taken, bool& fills) const;
  /// Copy particles [begin, begin+count) of one column between the pages and a strided
  /// buffer (element k at buf + ((k - begin) * stride) * 8); a read with `read_ahead` hints
  /// the pages ahead of each page it reaches.
  template <bool kWrite>
  void copy_column(std::int64_t column, std::int64_t begin, std::int64_t count, unsigned char* buf, int stride,
                   bool read_ahead);
  /// Every component of a field, row-major in `bytes`, through copy_column.
  template <bool kWrite>
  void copy_field(std::int64_t column, int components, std::int64_t begin, std::int64_t count, unsigned char* bytes,
                  bool read_ahead);
  std::int64_t first_column(const std::string& field) const;
  /// The column of `component` of `field`, after checking the component and [begin, begin + count).
  std::int64_t checked_column(const std::string& field, int component, std::int64_t begin, std::int64_t count) const;
  void check_range(const std::string& field, std::int64_t begin, std::int64_t count) const;
  std::string name_page(std::int64_t page) const;

  std::int64_t n_;
  std::vector<FieldSpec> fields_;
  std::vector<std::int64_t> first_column_;  // per field
  std::vector<Column> columns_;
  std::vector<Stripe> stripes_;
  Eviction eviction_;
  int read_ahead_pages_;
  std::unique_ptr<MemoryBudget> budget_;    // outlives everything charged to it
  // lends AIO contexts to every BatchedPageIo of this store's file and of the trees' cell
  // files (PagedCells), and outlives them all
  std::unique_ptr<AioContextPool> aio_pool_ = std::make_unique<AioContextPool>();
  std::unique_ptr<ScratchFileShelf> shelf_;  // the trees' cell files, kept from one tree to the next
  std::unique_ptr<PageFile> file_;
  std::unique_ptr<PageCache> cache_;
  std::unique_ptr<ReadAhead> read_ahead_;   // stops first
  std::string batched_reads_;
  std::vector<std::string> stale_;  // fields whose pages lag behind their values (set_stale)
  std::vector<StalePageFile> stale_files_removed_;
  struct Derivation {
    std::string field, source;
    bool curve_keys = false;  // else source + offset
    std::int64_t offset = 0;
    CurveBox frame;
    int threads = 1;
  };
  const Derivation* find_derivation(const std::string& field) const;
  void derived_values(const Derivation& d, std::int64_t begin, std::int64_t count, std::int64_t* out);
  std::vector<Derivation> derived_;
  std::uint64_t user_writes_ = 0;
};

}  // namespace gravpipe
