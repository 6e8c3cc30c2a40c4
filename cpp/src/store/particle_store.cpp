// The particle store: fields -> columns -> pages, range reads and writes, budget sizing.
#include "gravpipe/particle_store.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "gravpipe/error.hpp"

namespace gravpipe {

namespace {

constexpr std::int64_t kElementBytes = 8;  // float64 or int64
constexpr std::uint64_t kTableBytesPerPage = sizeof(std::uint32_t) + 1;  // CRC + written flag

int resolved_threads(const StoreConfig& c) { return c.threads > 0 ? c.threads : omp_get_max_threads(); }

std::int64_t column_count(const std::vector<FieldSpec>& fields) {
  std::int64_t c = 0;
  for (const FieldSpec& f : fields) c += f.components;
  return c;
}

std::int64_t total_pages(const StoreConfig& c) {
  const auto per_page = static_cast<std::int64_t>(c.page_bytes) / kElementBytes;
  const std::int64_t per_column = per_page > 0 ? (c.n + per_page - 1) / per_page : 0;
  return per_column * column_count(c.fields);
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
  return {{"pos", 3, FieldType::F64}, {"vel", 3, FieldType::F64}, {"mass", 1, FieldType::F64},
          {"id", 1, FieldType::I64},  {"acc", 3, FieldType::F64}, {"pot", 1, FieldType::F64}};
}

std::uint64_t ParticleStore::least_budget(const StoreConfig& c) {
  PageFile::check_page_bytes(c.page_bytes);  // before pages are counted in units of it
  return static_cast<std::uint64_t>(total_pages(c)) * kTableBytesPerPage +
         static_cast<std::uint64_t>(least_frames(c)) * c.page_bytes;
}

ParticleStore::ParticleStore(const StoreConfig& c)
    : n_(c.n), fields_(c.fields), eviction_(c.eviction), read_ahead_pages_(c.read_ahead) {
  check_config(c);
  file_ = std::make_unique<PageFile>(c.directory, c.page_bytes, c.io_mode);  // checks page_bytes
  const std::uint64_t least = least_budget(c);
  if (c.budget_bytes < least)
    throw BudgetError("store: memory budget " + format_bytes(c.budget_bytes) + " is too small for " +
                          std::to_string(n_) + " particles in pages of " + format_bytes(c.page_bytes) + " with " +
                          std::to_string(resolved_threads(c)) + " threads; the least budget that works is " +
                          format_bytes(least) + " (" + std::to_string(least) + " bytes)",
                      c.budget_bytes, least);
  per_page_ = static_cast<std::int64_t>(c.page_bytes) / kElementBytes;
  pages_per_column_ = (n_ + per_page_ - 1) / per_page_;
  for (std::size_t f = 0; f < fields_.size(); ++f) {
    first_column_.push_back(static_cast<std::int64_t>(columns_.size()));
    for (int k = 0; k < fields_[f].components; ++k) columns_.push_back({f, k});
  }
  const std::int64_t pages = pages_per_column_ * static_cast<std::int64_t>(columns_.size());
  budget_ = std::make_unique<MemoryBudget>(c.budget_bytes);
  const std::int64_t frames = cache_frames(c, static_cast<std::uint64_t>(pages) * kTableBytesPerPage);
  cache_ = std::make_unique<PageCache>(*file_, pages, frames, c.eviction, *budget_);
  cache_->set_page_namer([this](std::int64_t page) { return name_page(page); });
  read_ahead_ = std::make_unique<ReadAhead>(*cache_, static_cast<std::size_t>(c.read_ahead) * 16);
}

ParticleStore::~ParticleStore() = default;

std::string ParticleStore::name_page(std::int64_t page) const {
  const Column& col = columns_[static_cast<std::size_t>(page / pages_per_column_)];
  const std::int64_t first = (page % pages_per_column_) * per_page_;
  const std::int64_t last = std::min(first + per_page_, n_);
  return "field '" + fields_[col.field].name + "' component " + std::to_string(col.component) + ", particles " +
         std::to_string(first) + ".." + std::to_string(last - 1);
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

std::int64_t ParticleStore::page_of(const std::string& field, int component, std::int64_t index) const {
  const std::int64_t col = first_column(field) + component;
  if (component < 0 || component >= this->field(field).components)
    throw InputError("store: field '" + field + "' has no component " + std::to_string(component));
  check_range(field, index, 1);
  return col * pages_per_column_ + index / per_page_;
}

template <bool kWrite>
void ParticleStore::copy_column(std::int64_t column, std::int64_t begin, std::int64_t count, unsigned char* buf,
                                int stride, bool read_ahead) {
  const std::int64_t end = begin + count;
  std::int64_t k = begin;
  std::int64_t hinted = -1;  // the last local page handed to read-ahead
  while (k < end) {
    const std::int64_t local = k / per_page_;
    // the reader goes on along the curve: the read-ahead thread loads the pages that follow
    // while this one copies (inside a long range too, so a whole-column read streams)
    if (!kWrite && read_ahead)
      for (std::int64_t a = std::max(local, hinted) + 1; a <= local + read_ahead_pages_ && a < pages_per_column_; ++a)
        read_ahead_->hint(column * pages_per_column_ + (hinted = a));
    const std::int64_t page_first = local * per_page_;
    const std::int64_t page_last = std::min(page_first + per_page_, n_);  // one past
    const std::int64_t stop = std::min(end, page_last);
    const std::int64_t page = column * pages_per_column_ + local;
    const bool whole = k == page_first && stop == page_last;
    if (!kWrite && read_ahead) read_ahead_->cancel(page);  // reached: a late hint would only reload it
    const auto access = !kWrite ? PageCache::Access::Read : whole ? PageCache::Access::Overwrite
                                                                  : PageCache::Access::Modify;
    {
      const PageHandle h = cache_->pin(page, access);
      unsigned char* p = h.data() + (k - page_first) * kElementBytes;
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

void ParticleStore::write(const std::string& field, std::int64_t begin, std::int64_t count, const void* values) {
  const std::int64_t col = first_column(field);
  check_range(field, begin, count);
  const int comps = this->field(field).components;
  auto* bytes = static_cast<unsigned char*>(const_cast<void*>(values));  // only read from when writing
  for (int k = 0; k < comps; ++k) copy_column<true>(col + k, begin, count, bytes + k * kElementBytes, comps, false);
}

void ParticleStore::read(const std::string& field, std::int64_t begin, std::int64_t count, void* out) {
  const std::int64_t col = first_column(field);
  check_range(field, begin, count);
  const int comps = this->field(field).components;
  auto* bytes = static_cast<unsigned char*>(out);
  for (int k = 0; k < comps; ++k) copy_column<false>(col + k, begin, count, bytes + k * kElementBytes, comps, true);
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
                                void* out) {
  const std::int64_t col = first_column(field);
  if (component < 0 || component >= this->field(field).components)
    throw InputError("store: field '" + field + "' has no component " + std::to_string(component));
  check_range(field, begin, count);
  copy_column<false>(col + component, begin, count, static_cast<unsigned char*>(out), 1, true);
}

void ParticleStore::write_column(const std::string& field, int component, std::int64_t begin, std::int64_t count,
                                 const void* values) {
  const std::int64_t col = first_column(field);
  if (component < 0 || component >= this->field(field).components)
    throw InputError("store: field '" + field + "' has no component " + std::to_string(component));
  check_range(field, begin, count);
  auto* bytes = static_cast<unsigned char*>(const_cast<void*>(values));  // only read from when writing
  copy_column<true>(col + component, begin, count, bytes, 1, false);
}

void ParticleStore::discard(const std::string& field) {
  const std::int64_t col = first_column(field);
  const int comps = this->field(field).components;
  cache_->discard(col * pages_per_column_, comps * pages_per_column_);  // a field's columns are adjacent
}

void ParticleStore::cool(const std::string& field, std::int64_t begin, std::int64_t end) {
  const std::int64_t col = first_column(field);
  const int comps = this->field(field).components;
  check_range(field, begin, end - begin);
  if (end <= begin) return;
  // pages whose last particle, (p + 1) per - 1 (or the store's last), lies in [begin, end)
  const std::int64_t per = per_page_;
  const std::int64_t first = begin / per;
  const std::int64_t last = end == size() ? (end - 1) / per : end / per - 1;
  if (last < first) return;
  for (int k = 0; k < comps; ++k) cache_->cool((col + k) * pages_per_column_ + first, last - first + 1);
}

void ParticleStore::flush() { cache_->flush(); }

void ParticleStore::evict_all() {
  read_ahead_->drain();  // nothing comes back in behind our back
  cache_->evict_all();
}

}  // namespace gravpipe
