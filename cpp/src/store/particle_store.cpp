// The particle store: fields -> columns -> pages, range reads and writes, budget sizing.
#include "gravpipe/particle_store.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>

#include "gravpipe/debug_checks.hpp"
#include "gravpipe/error.hpp"

namespace gravpipe {

namespace {

constexpr std::int64_t kElementBytes = 8;  // float64 or int64
constexpr std::uint64_t kTableBytesPerPage = PageCache::kTableBytesPerPage;
/// Workers of the read-ahead: loads in flight at once. A virtual disk serves several reads
/// far faster than one at a time (64 KiB O_DIRECT random reads, fio: 0.42 GB/s at depth 1,
/// 0.79 at 4, 0.93 at 8), and the permute's hinted pages load side by side (N = 1e7, 1/10
/// budget: permute 1.7 -> 1.15 s, median of 4-6 runs; 8 workers gained no more).
constexpr int kReadAheadWorkers = 4;
/// Reads prefetch_pages() keeps in flight at once: as the walk's prefetch does.
constexpr int kBatchedReadDepth = 16;

int resolved_threads(const StoreConfig& c) { return c.threads > 0 ? c.threads : omp_get_max_threads(); }

/// Which pages each column lies in: a stripe of pages per ungrouped column, one per page
/// group (its fields' columns side by side in each page, in field order).
struct PageLayout {
  std::vector<int> widths;                             // columns per stripe
  std::vector<std::pair<std::size_t, int>> placement;  // per column: stripe, slot in the page
};

PageLayout page_layout(const std::vector<FieldSpec>& fields) {
  PageLayout l;
  std::map<std::string, std::size_t> group_stripe;
  for (const FieldSpec& f : fields)
    for (int k = 0; k < f.components; ++k) {
      if (f.page_group.empty()) {
        l.placement.emplace_back(l.widths.size(), 0);
        l.widths.push_back(1);
        continue;
      }
      const auto [it, added] = group_stripe.emplace(f.page_group, l.widths.size());
      if (added) l.widths.push_back(0);
      l.placement.emplace_back(it->second, l.widths[it->second]++);
    }
  return l;
}

std::int64_t per_page_of(std::size_t page_bytes, int width) {
  return static_cast<std::int64_t>(page_bytes) / kElementBytes / width;
}

std::int64_t total_pages(const StoreConfig& c) {
  std::int64_t pages = 0;
  for (const int w : page_layout(c.fields).widths) {
    const std::int64_t per = per_page_of(c.page_bytes, w);
    pages += per > 0 ? (c.n + per - 1) / per : 0;
  }
  return pages;
}

/// The fewest frames that never leave a pinning thread without one: each thread pins one
/// page at a time, read-ahead one more, and one spare keeps eviction from thrashing.
std::int64_t least_frames(const StoreConfig& c) { return resolved_threads(c) + 2 + (c.read_ahead > 0 ? 1 : 0); }

void check_config(const StoreConfig& c) {
  if (c.n < 1) throw InputError("store: n must be >= 1, got " + std::to_string(c.n));
  if (c.fields.empty()) throw InputError("store: no fields");
  for (std::size_t i = 0; i < c.fields.size(); ++i) {
    const FieldSpec& f = c.fields[i];
    if (f.name.empty() || f.components < 1)
      throw InputError("store: field '" + f.name + "' needs a name and >= 1 components");
    for (std::size_t j = 0; j < i; ++j)
      if (c.fields[j].name == f.name) throw InputError("store: field '" + f.name + "' named twice");
  }
  if (c.read_ahead < 0) throw InputError("store: read_ahead must be >= 0");
  for (const int w : page_layout(c.fields).widths)
    if (per_page_of(c.page_bytes, w) < 1)
      throw InputError("store: a page group of " + std::to_string(w) + " columns does not fit a page of " +
                       std::to_string(c.page_bytes) + " bytes");
}

/// The frames the cache gets: what the caller asked (cache_bytes), else half of what the
/// budget has left after the page tables, within [least frames, every page].
std::int64_t cache_frames(const StoreConfig& c, std::uint64_t tables) {
  const std::int64_t least = least_frames(c);
  const auto page = static_cast<std::uint64_t>(c.page_bytes);
  if (c.cache_bytes > 0) {
    const auto frames = static_cast<std::int64_t>(c.cache_bytes / page);
    if (frames < least)
      throw BudgetError("store: cache_bytes " + format_bytes(c.cache_bytes) + " holds " + std::to_string(frames) +
                            " pages of " + format_bytes(page) + ", fewer than the " + std::to_string(least) +
                            " that " + std::to_string(resolved_threads(c)) +
                            " threads need; the least cache that works is " + format_bytes(least * page),
                        c.cache_bytes, static_cast<std::uint64_t>(least) * page);
    return frames;
  }
  const std::uint64_t left = c.budget_bytes - tables;
  const auto half = static_cast<std::int64_t>(left / 2 / page);
  return std::min(std::max(half, least), std::max(total_pages(c), least));
}

}  // namespace

std::vector<FieldSpec> default_fields() {
  return {{"pos", 3, FieldType::F64, "body"}, {"vel", 3, FieldType::F64, ""}, {"mass", 1, FieldType::F64, "body"},
          {"id", 1, FieldType::I64, ""},      {"acc", 3, FieldType::F64, ""}, {"pot", 1, FieldType::F64, ""}};
}

std::int64_t ParticleStore::page_count(const StoreConfig& c) {
  check_config(c);
  PageFile::check_page_bytes(c.page_bytes);
  return total_pages(c);
}

std::uint64_t ParticleStore::least_budget(const StoreConfig& c) {
  PageFile::check_page_bytes(c.page_bytes);  // before pages are counted in units of it
  return static_cast<std::uint64_t>(total_pages(c)) * kTableBytesPerPage +
         static_cast<std::uint64_t>(least_frames(c)) * c.page_bytes;
}

ParticleStore::ParticleStore(const StoreConfig& c)
    : n_(c.n), fields_(c.fields), eviction_(c.eviction), read_ahead_pages_(c.read_ahead) {
  check_config(c);
  PageFile::check_page_bytes(c.page_bytes);
  stale_files_removed_ = remove_stale_page_files(c.directory);  // what killed runs left there
  file_ = std::make_unique<PageFile>(c.directory, c.page_bytes, c.io_mode, aio_pool_.get());
  shelf_ = std::make_unique<ScratchFileShelf>(c.directory, aio_pool_.get());
  const std::uint64_t least = least_budget(c);
  if (c.budget_bytes < least)
    throw BudgetError("store: memory budget " + format_bytes(c.budget_bytes) + " is too small for " +
                          std::to_string(n_) + " particles in pages of " + format_bytes(c.page_bytes) + " with " +
                          std::to_string(resolved_threads(c)) + " threads; the least budget that works is " +
                          format_bytes(least) + " (" + std::to_string(least) + " bytes)",
                      c.budget_bytes, least);
  const PageLayout layout = page_layout(fields_);
  std::int64_t pages = 0;
  for (const int w : layout.widths) {
    const std::int64_t per = per_page_of(c.page_bytes, w);
    stripes_.push_back({pages, (n_ + per - 1) / per, per, w});
    pages += stripes_.back().pages;
  }
  for (std::size_t f = 0; f < fields_.size(); ++f) {
    first_column_.push_back(static_cast<std::int64_t>(columns_.size()));
    for (int k = 0; k < fields_[f].components; ++k) {
      const auto [stripe, slot] = layout.placement[columns_.size()];
      const auto offset = static_cast<std::size_t>(slot * stripes_[stripe].per_page * kElementBytes);
      columns_.push_back({f, k, stripe, offset});
    }
  }
  budget_ = std::make_unique<MemoryBudget>(c.budget_bytes);
  const std::int64_t frames = cache_frames(c, static_cast<std::uint64_t>(pages) * kTableBytesPerPage);
  cache_ = std::make_unique<PageCache>(*file_, pages, frames, c.eviction, *budget_);
  cache_->set_page_namer([this](std::int64_t page) { return name_page(page); });
  read_ahead_ = std::make_unique<ReadAhead>(*cache_, static_cast<std::size_t>(c.read_ahead) * 16, kReadAheadWorkers);
  batched_reads_ = BatchedPageIo(*file_, kBatchedReadDepth).how();  // stats() tells it at every call
}

ParticleStore::~ParticleStore() = default;

std::string ParticleStore::name_page(std::int64_t page) const {
  std::size_t st = 0;
  while (st + 1 < stripes_.size() && page >= stripes_[st + 1].base) ++st;
  const Stripe& stripe = stripes_[st];
  const std::int64_t first = (page - stripe.base) * stripe.per_page;
  const std::int64_t last = std::min(first + stripe.per_page, n_);
  const std::string particles = ", particles " + std::to_string(first) + ".." + std::to_string(last - 1);
  if (stripe.width == 1)
    for (const Column& col : columns_)
      if (col.stripe == st)
        return "field '" + fields_[col.field].name + "' component " + std::to_string(col.component) + particles;
  std::string names;
  for (const Column& col : columns_)
    if (col.stripe == st && col.component == 0) names += (names.empty() ? "'" : ", '") + fields_[col.field].name + "'";
  return "fields " + names + " (one page)" + particles;
}

const FieldSpec& ParticleStore::field(const std::string& name) const {
  const std::int64_t col = first_column(name);  // throws naming the known fields
  return fields_[columns_[static_cast<std::size_t>(col)].field];
}

std::int64_t ParticleStore::first_column(const std::string& name) const {
  for (std::size_t f = 0; f < fields_.size(); ++f)
    if (fields_[f].name == name) return first_column_[f];
  std::string known;
  for (const FieldSpec& f : fields_) known += (known.empty() ? "" : ", ") + f.name;
  throw InputError("store: no field '" + name + "' (fields: " + known + ")");
}

void ParticleStore::check_range(const std::string& field, std::int64_t begin, std::int64_t count) const {
  if (begin < 0 || count < 0 || begin > n_ - count)
    throw InputError("store: particles [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                     ") of field '" + field + "' outside [0, " + std::to_string(n_) + ")");
}

std::int64_t ParticleStore::checked_column(const std::string& field, int component, std::int64_t begin,
                                          std::int64_t count) const {
  if (component < 0 || component >= this->field(field).components)
    throw InputError("store: field '" + field + "' has no component " + std::to_string(component));
  check_range(field, begin, count);
  return first_column(field) + component;
}

std::int64_t ParticleStore::page_of(const std::string& field, int component, std::int64_t index) const {
  const std::int64_t col = checked_column(field, component, index, 1);
  const Stripe& stripe = stripes_[columns_[static_cast<std::size_t>(col)].stripe];
  GRAVPIPE_DEBUG_ASSERT(index / stripe.per_page < stripe.pages && stripe.base + stripe.pages <= pages(),
                        "particle " + std::to_string(index) + " of '" + field + "'");
  return stripe.base + index / stripe.per_page;
}

std::size_t ParticleStore::offset_in_page(const std::string& field, int component, std::int64_t index) const {
  const std::int64_t page = page_of(field, component, index);  // checks the arguments
  const Column& col = columns_[static_cast<std::size_t>(first_column(field) + component)];
  const Stripe& stripe = stripes_[col.stripe];
  return col.offset + static_cast<std::size_t>((index - (page - stripe.base) * stripe.per_page) * kElementBytes);
}

std::int64_t ParticleStore::particles_per_page(const std::string& field) const {
  return stripes_[columns_[static_cast<std::size_t>(first_column(field))].stripe].per_page;
}

template <bool kWrite>
void ParticleStore::copy_column(std::int64_t column, std::int64_t begin, std::int64_t count, unsigned char* buf,
                                int stride, bool read_ahead) {
  const Column& col = columns_[static_cast<std::size_t>(column)];
  const Stripe& stripe = stripes_[col.stripe];
  const std::int64_t per_page = stripe.per_page;
  const std::int64_t end = begin + count;
  GRAVPIPE_DEBUG_ASSERT(begin >= 0 && count >= 0 && end <= n_,
                        "particles [" + std::to_string(begin) + ", " + std::to_string(end) + ") of " +
                            std::to_string(n_));
  GRAVPIPE_DEBUG_ASSERT(col.offset + static_cast<std::size_t>(per_page * kElementBytes) <= page_bytes(),
                        "column at byte " + std::to_string(col.offset) + " of a page of " + std::to_string(page_bytes()));
  std::int64_t k = begin;
  std::int64_t hinted = -1;  // the last local page handed to read-ahead
  while (k < end) {
    const std::int64_t local = k / per_page;
    // the reader goes on along the curve: the read-ahead threads load the pages that follow
    // while this one copies (inside a long range too, so a whole-column read streams), topped
    // up to read_ahead_pages_ ahead once half of them are reached, so that a worker wakes
    // for several pages and loads them in one request
    if (!kWrite && read_ahead && hinted <= local + read_ahead_pages_ / 2) {
      std::array<std::int64_t, 16> ahead;
      std::size_t n = 0;
      for (std::int64_t a = std::max(local, hinted) + 1; a <= local + read_ahead_pages_ && a < stripe.pages; ++a) {
        ahead[n++] = stripe.base + (hinted = a);
        if (n == ahead.size()) read_ahead_->hint(Span<const std::int64_t>(ahead.data(), n)), n = 0;
      }
      if (n > 0) read_ahead_->hint(Span<const std::int64_t>(ahead.data(), n));
    }
    const std::int64_t page_first = local * per_page;
    const std::int64_t page_last = std::min(page_first + per_page, n_);  // one past
    const std::int64_t stop = std::min(end, page_last);
    const std::int64_t page = stripe.base + local;
    GRAVPIPE_DEBUG_ASSERT(local < stripe.pages && page < pages() && stop > k,
                          "particle " + std::to_string(k) + " on page " + std::to_string(local) + " of a stripe of " +
                              std::to_string(stripe.pages));
    // a page shared with other columns is never wholly this column's to overwrite
    const bool whole = stripe.width == 1 && k == page_first && stop == page_last;
    if (!kWrite && read_ahead) read_ahead_->cancel(page);  // reached: a late hint would only reload it
    const auto access = !kWrite ? PageCache::Access::Read : whole ? PageCache::Access::Overwrite
                                                                  : PageCache::Access::Modify;
    {
      const PageHandle h = cache_->pin(page, access);
      unsigned char* p = h.data() + col.offset + (k - page_first) * kElementBytes;
      unsigned char* b = buf + (k - begin) * stride * kElementBytes;
      if (stride == 1) {
        const auto bytes = static_cast<std::size_t>((stop - k) * kElementBytes);
        kWrite ? std::memcpy(p, b, bytes) : std::memcpy(b, p, bytes);
      } else {
        for (std::int64_t i = 0; i < stop - k; ++i, p += kElementBytes, b += stride * kElementBytes)
          kWrite ? std::memcpy(p, b, kElementBytes) : std::memcpy(b, p, kElementBytes);
      }
    }
    k = stop;
  }
}

template <bool kWrite>
void ParticleStore::copy_field(std::int64_t col, int comps, std::int64_t begin, std::int64_t count,
                               unsigned char* bytes, bool read_ahead) {
  const Stripe& stripe = stripes_[columns_[static_cast<std::size_t>(col)].stripe];
  if (stripe.width == 1) {  // each component a column of its own: one sweep each
    for (int k = 0; k < comps; ++k) copy_column<kWrite>(col + k, begin, count, bytes + k * kElementBytes, comps, read_ahead);
    return;
  }
  // components sharing pages: page by page, every component, so that a range larger than
  // the cache does not read (and write back) each page once per component
  const std::int64_t end = begin + count;
  for (std::int64_t k0 = begin; k0 < end;) {
    const std::int64_t stop = std::min(end, (k0 / stripe.per_page + 1) * stripe.per_page);
    for (int k = 0; k < comps; ++k)
      copy_column<kWrite>(col + k, k0, stop - k0, bytes + ((k0 - begin) * comps + k) * kElementBytes, comps, read_ahead);
    k0 = stop;
  }
}

void ParticleStore::write(const std::string& field, std::int64_t begin, std::int64_t count, const void* values) {
  const std::int64_t col = first_column(field);
  check_range(field, begin, count);
  auto* bytes = static_cast<unsigned char*>(const_cast<void*>(values));  // only read from when writing
  copy_field<true>(col, this->field(field).components, begin, count, bytes, false);
}

void ParticleStore::read(const std::string& field, std::int64_t begin, std::int64_t count, void* out,
                         bool read_ahead) {
  const std::int64_t col = first_column(field);
  check_range(field, begin, count);
  copy_field<false>(col, this->field(field).components, begin, count, static_cast<unsigned char*>(out), read_ahead);
}

void ParticleStore::read_component(const std::string& field, int component, std::int64_t begin, std::int64_t count,
                                   double* out, bool read_ahead) {
  const std::int64_t col = first_column(field);
  const FieldSpec& f = this->field(field);
  if (f.type != FieldType::F64) throw InputError("store: field '" + field + "' is not float64");
  if (component < 0 || component >= f.components)
    throw InputError("store: field '" + field + "' has no component " + std::to_string(component));
  check_range(field, begin, count);
  copy_column<false>(col + component, begin, count, reinterpret_cast<unsigned char*>(out), 1, read_ahead);
}

void ParticleStore::read_column(const std::string& field, int component, std::int64_t begin, std::int64_t count,
                                void* out, bool read_ahead) {
  copy_column<false>(checked_column(field, component, begin, count), begin, count, static_cast<unsigned char*>(out),
                     1, read_ahead);
}

void ParticleStore::set_stale(const std::string& field, bool stale) {
  (void)this->field(field);  // InputError naming an unknown field
  const auto at = std::find(stale_.begin(), stale_.end(), field);
  if (stale && at == stale_.end()) stale_.push_back(field);
  if (!stale && at != stale_.end()) stale_.erase(at);
}

bool ParticleStore::stale(const std::string& field) const {
  return std::find(stale_.begin(), stale_.end(), field) != stale_.end();
}

void ParticleStore::write_column(const std::string& field, int component, std::int64_t begin, std::int64_t count,
                                 const void* values) {
  const std::int64_t col = checked_column(field, component, begin, count);
  auto* bytes = static_cast<unsigned char*>(const_cast<void*>(values));  // only read from when writing
  copy_column<true>(col, begin, count, bytes, 1, false);
}

void ParticleStore::read_through(Span<const ColumnOut> columns, std::int64_t begin, std::int64_t count,
                                 BatchedPageIo& io, AlignedBuffer& staging) {
  struct Resolved {
    const Column* col;
    const Stripe* stripe;
    unsigned char* out;
    int stride;
  };
  std::vector<Resolved> cols;
  for (const ColumnOut& c : columns) {
    const Column& column = columns_[static_cast<std::size_t>(checked_column(c.field, c.component, begin, count))];
    cols.push_back({&column, &stripes_[column.stripe], static_cast<unsigned char*>(c.out), c.stride});
  }
  if (count <= 0) return;
  const auto room = static_cast<std::size_t>(staging.size() / page_bytes());
  if (room == 0) {
    for (const Resolved& r : cols)
      copy_column<false>(r.col - columns_.data(), begin, count, r.out, r.stride, false);
    return;
  }
  const std::int64_t end = begin + count;
  // every column's share of page `page` (of the stripe it belongs to) from its bytes
  const auto copy_out = [&](std::int64_t page, const unsigned char* data) {
    for (const Resolved& r : cols) {
      const Stripe& st = *r.stripe;
      if (page < st.base || page >= st.base + st.pages) continue;
      const std::int64_t first = (page - st.base) * st.per_page;
      const std::int64_t k0 = std::max(begin, first), k1 = std::min(end, first + st.per_page);
      GRAVPIPE_DEBUG_ASSERT(k1 <= n_ && r.col->offset + static_cast<std::size_t>((k1 - first) * kElementBytes) <= page_bytes(),
                            "particles up to " + std::to_string(k1) + " of page " + std::to_string(page));
      const unsigned char* p = data + r.col->offset + (k0 - first) * kElementBytes;
      unsigned char* b = r.out + (k0 - begin) * r.stride * kElementBytes;
      for (std::int64_t k = k0; k < k1; ++k, p += kElementBytes, b += r.stride * kElementBytes)
        std::memcpy(b, p, kElementBytes);
    }
  };
  std::vector<std::int64_t> pages;
  for (const Resolved& r : cols)
    for (std::int64_t p = begin / r.stripe->per_page; p <= (end - 1) / r.stripe->per_page; ++p)
      pages.push_back(r.stripe->base + p);
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
  std::vector<BatchedPageIo::Page> absent;
  const auto read_absent = [&] {
    cache_->read_past(Span<const BatchedPageIo::Page>(absent.data(), absent.size()), io);
    for (const BatchedPageIo::Page& a : absent) copy_out(a.page, a.data);
    absent.clear();
  };
  for (const std::int64_t page : pages) {
    if (const std::optional<PageHandle> h = cache_->pin_if_resident(page)) {
      copy_out(page, h->data());
      continue;
    }
    absent.push_back({page, staging.data() + absent.size() * page_bytes()});
    if (absent.size() == room) read_absent();
  }
  if (!absent.empty()) read_absent();
}

namespace {

/// Elements [begin, end) of a stripe whose every slot the caller fills (file pages base + p,
/// `per` elements each): the pages the range covers whole go straight to the file through
/// `io`, `room` at a time, page p's bytes from image(p, k) (k: its place in its batch); the
/// partial pages at the ends, or the whole range when it covers no page whole, go to
/// partial(b, n), through the cache.
template <class Image, class Partial>
void write_whole_pages(PageCache& cache, std::int64_t base, std::int64_t per, std::int64_t begin, std::int64_t end,
                       std::int64_t room, BatchedPageIo& io, const Image& image, const Partial& partial) {
  const std::int64_t first = (begin + per - 1) / per, stop = end / per;  // whole pages [first, stop)
  if (first >= stop || room <= 0) {
    partial(begin, end - begin);
    return;
  }
  if (first * per > begin) partial(begin, first * per - begin);
  std::vector<BatchedPageIo::Page> pages;
  for (std::int64_t p0 = first; p0 < stop; p0 += room) {
    const std::int64_t p1 = std::min(stop, p0 + room);
    pages.clear();
    for (std::int64_t p = p0; p < p1; ++p) pages.push_back({base + p, image(p, p - p0)});
    cache.write_through(Span<const BatchedPageIo::Page>(pages.data(), pages.size()), io);
  }
  if (stop * per < end) partial(stop * per, end - stop * per);
}

}  // namespace

void ParticleStore::write_column_through(const std::string& field, int component, std::int64_t begin,
                                         std::int64_t count, const void* values, BatchedPageIo& io) {
  const std::int64_t col = checked_column(field, component, begin, count);
  const Stripe& stripe = stripes_[columns_[static_cast<std::size_t>(col)].stripe];
  const std::int64_t per = stripe.per_page, first = (begin + per - 1) / per;
  auto* bytes = static_cast<unsigned char*>(const_cast<void*>(values));  // only read from
  // the whole pages go from where they lie, so the first must start at an aligned address
  const auto whole_at = static_cast<std::size_t>(first * per - begin) * kElementBytes;
  const bool aligned = (reinterpret_cast<std::uintptr_t>(bytes) + whole_at) % AlignedBuffer::kAlignment == 0;
  const auto partial = [&](std::int64_t b, std::int64_t n) {
    write_column(field, component, b, n, bytes + (b - begin) * kElementBytes);
  };
  if (stripe.width > 1 || !aligned) {
    partial(begin, count);
    return;
  }
  write_whole_pages(
      *cache_, stripe.base, per, begin, begin + count, std::max<std::int64_t>(1, stripe.pages), io,
      [&](std::int64_t p, std::int64_t) { return bytes + whole_at + static_cast<std::size_t>(p - first) * page_bytes(); },
      partial);
}

std::vector<std::size_t> ParticleStore::stripe_mates(const std::vector<const Column*>& cols, std::size_t k,
                                                     std::vector<std::uint8_t>& taken, bool& fills) const {
  const Stripe& stripe = stripes_[cols[k]->stripe];
  std::vector<std::size_t> mates;
  std::vector<std::uint8_t> slot_taken(static_cast<std::size_t>(stripe.width), 0);
  fills = true;
  for (std::size_t j = k; j < cols.size(); ++j) {
    if (taken[j] || cols[j]->stripe != cols[k]->stripe) continue;
    taken[j] = 1, mates.push_back(j);
    const auto slot = cols[j]->offset / (static_cast<std::size_t>(stripe.per_page) * kElementBytes);
    fills = fills && !slot_taken[slot];
    slot_taken[slot] = 1;
  }
  fills = fills && static_cast<int>(mates.size()) == stripe.width;
  return mates;
}

void ParticleStore::write_through(Span<const ColumnIn> columns, std::int64_t begin, std::int64_t count,
                                  BatchedPageIo& io, AlignedBuffer& staging) {
  std::vector<const Column*> cols;
  for (const ColumnIn& c : columns)
    cols.push_back(&columns_[static_cast<std::size_t>(checked_column(c.field, c.component, begin, count))]);
  if (count <= 0) return;
  const auto room = static_cast<std::int64_t>(staging.size() / page_bytes());
  std::vector<std::uint8_t> taken(cols.size(), 0);
  for (std::size_t k = 0; k < cols.size(); ++k) {
    if (taken[k]) continue;
    bool fills = false;
    const std::vector<std::size_t> mates = stripe_mates(cols, k, taken, fills);
    const Stripe& stripe = stripes_[cols[k]->stripe];
    const std::int64_t per = stripe.per_page;
    const auto values_of = [&](std::size_t j, std::int64_t b) {
      return static_cast<const unsigned char*>(columns[j].values) + (b - begin) * kElementBytes;
    };
    const auto partial = [&](std::int64_t b, std::int64_t n) {
      for (const std::size_t j : mates) write_column(columns[j].field, columns[j].component, b, n, values_of(j, b));
    };
    // a page image in staging, every mate's values at its slot
    const auto image = [&](std::int64_t p, std::int64_t at) {
      unsigned char* page = staging.data() + static_cast<std::size_t>(at) * page_bytes();
      for (const std::size_t j : mates)
        std::memcpy(page + cols[j]->offset, values_of(j, p * per), static_cast<std::size_t>(per) * kElementBytes);
      return page;
    };
    if (fills)
      write_whole_pages(*cache_, stripe.base, per, begin, begin + count, room, io, image, partial);
    else
      partial(begin, count);
  }
}

void ParticleStore::discard_fields(const std::vector<std::string>& fields) {
  std::vector<std::uint8_t> listed(columns_.size(), 0);
  for (const std::string& f : fields) {
    const std::int64_t col = first_column(f);
    for (int k = 0; k < this->field(f).components; ++k) listed[static_cast<std::size_t>(col + k)] = 1;
  }
  std::vector<int> dead(stripes_.size(), 0);  // listed columns per stripe
  for (std::size_t k = 0; k < columns_.size(); ++k) dead[columns_[k].stripe] += listed[k];
  // a stripe with a column not listed keeps its pages: only a hint is dropped
  for (std::size_t st = 0; st < stripes_.size(); ++st)
    if (dead[st] == stripes_[st].width) cache_->discard(stripes_[st].base, stripes_[st].pages);
}

void ParticleStore::cool(const std::string& field, std::int64_t begin, std::int64_t end) {
  const std::int64_t col = first_column(field);
  const int comps = this->field(field).components;
  check_range(field, begin, end - begin);
  if (end <= begin) return;
  std::size_t done = stripes_.size();  // a field's columns in one stripe are cooled once
  for (int k = 0; k < comps; ++k) {
    const std::size_t st = columns_[static_cast<std::size_t>(col + k)].stripe;
    if (st == done) continue;
    done = st;
    // pages whose last particle, (p + 1) per - 1 (or the store's last), lies in [begin, end)
    const std::int64_t per = stripes_[st].per_page;
    const std::int64_t first = begin / per;
    const std::int64_t last = end == size() ? (end - 1) / per : end / per - 1;
    if (last >= first) cache_->cool(stripes_[st].base + first, last - first + 1);
  }
}

std::int64_t ParticleStore::prefetch_pages(Span<const std::int64_t> pages) {
  BatchedPageIo reads(*file_, kBatchedReadDepth);
  return prefetch_pages(pages, reads);
}

std::int64_t ParticleStore::prefetch_pages(Span<const std::int64_t> pages, BatchedPageIo& io) {
  for (const std::int64_t p : pages)
    if (p < 0 || p >= this->pages())
      throw InputError("store: prefetch of page " + std::to_string(p) + " outside the scratch file's pages [0, " +
                       std::to_string(this->pages()) + ")");
  return cache_->prefetch_many(pages, io);
}

std::string ParticleStore::batched_reads() const { return batched_reads_; }

void ParticleStore::flush() { cache_->flush(); }

void ParticleStore::evict_all() {
  read_ahead_->drain();  // nothing comes back in behind our back
  cache_->evict_all();
}

}  // namespace gravpipe
