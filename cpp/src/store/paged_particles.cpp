// PagedParticles: blocks served from pinned frames or copied, leased per thread.
#include "gravpipe/paged_particles.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <utility>

#include "gravpipe/error.hpp"

namespace gravpipe {

/// One thread's blocks: the pages it holds pinned (by local page index, the same in every
/// column) and its copies.
struct PagedParticles::Lease {
  struct Pinned {
    std::int64_t local;
    std::vector<PageHandle> pages;  // one per distinct page of x, y, z, m (bases_)
  };
  struct Copy {
    std::unique_ptr<double[]> xyzm;  // x, y, z, m of e - b particles, one after the other
    Reservation charge;
  };
  std::vector<Pinned> pinned;
  std::vector<Copy> copies;
  std::uint64_t bytes = 0, n_pinned = 0, n_copied = 0, peak_bytes = 0;
  void clear() {
    pinned.clear();
    copies.clear();
    bytes = 0;
  }
};

PagedParticles::PagedParticles(ParticleStore& store, std::string pos, std::string mass, int threads, bool read_ahead,
                               int other_pins)
    : store_(store),
      pos_(std::move(pos)),
      mass_(std::move(mass)),
      per_page_(store.particles_per_page(pos_)),
      read_ahead_(read_ahead) {
  if (store_.field(pos_).components != 3 || store_.field(pos_).type != FieldType::F64)
    throw InputError("PagedParticles: field '" + pos_ + "' is not a float64 3-vector");
  if (store_.field(mass_).components != 1 || store_.field(mass_).type != FieldType::F64)
    throw InputError("PagedParticles: field '" + mass_ + "' is not a float64 scalar");
  if (store_.particles_per_page(mass_) != per_page_)
    throw InputError("PagedParticles: a page of '" + mass_ + "' holds " + std::to_string(store_.particles_per_page(mass_)) +
                     " particles and one of '" + pos_ + "' " + std::to_string(per_page_) +
                     ": put both in one page group or neither");
  for (int c = 0; c < 4; ++c) {
    const std::string& f = c < 3 ? pos_ : mass_;
    const int comp = c < 3 ? c : 0;
    const std::int64_t base = store_.page_of(f, comp, 0);
    const auto it = std::find(bases_.begin(), bases_.end(), base);
    column_page_[c] = static_cast<int>(it - bases_.begin());
    if (it == bases_.end()) bases_.push_back(base);
    column_offset_[c] = store_.offset_in_page(f, comp, 0);
  }
  const int t = std::max({threads, omp_get_max_threads(), 1});
  // frames a lease may pin: every lease at its limit still leaves one frame per thread for
  // the transient pins of copies and writes, and two for read-ahead and eviction
  const std::int64_t spare = store_.frames() - 2 - t - std::max(other_pins, 0);
  const auto width = static_cast<std::int64_t>(bases_.size());
  max_pinned_pages_ = spare > 0 ? static_cast<std::size_t>(spare / t / width) : 0;
  for (int k = 0; k < t; ++k) leases_.push_back(std::make_unique<Lease>());
}

PagedParticles::~PagedParticles() = default;

PagedParticles::Lease& PagedParticles::lease() const {
  const auto t = static_cast<std::size_t>(omp_get_thread_num());
  if (t >= leases_.size())
    throw InputError("PagedParticles: thread " + std::to_string(t) + " asks for a block, but the accessor was made for " +
                     std::to_string(leases_.size()) + " threads");
  return *leases_[t];
}

ParticleBlock PagedParticles::copy_block(Lease& l, std::int64_t b, std::int64_t e) const {
  const std::int64_t n = e - b;
  const auto bytes = static_cast<std::uint64_t>(4 * n) * sizeof(double);
  Lease::Copy copy{std::make_unique<double[]>(static_cast<std::size_t>(4 * n)),
                   store_.budget().reserve(bytes, "a particle block of " + std::to_string(n) + " particles")};
  double* p = copy.xyzm.get();
  for (int k = 0; k < 3; ++k) store_.read_component(pos_, k, b, n, p + k * n, read_ahead_);
  store_.read_component(mass_, 0, b, n, p + 3 * n, read_ahead_);
  l.copies.push_back(std::move(copy));
  l.bytes += bytes;
  l.peak_bytes = std::max(l.peak_bytes, l.bytes);
  ++l.n_copied;
  return {p, p + n, p + 2 * n, p + 3 * n, b, e};  // the heap block does not move with the vector
}

ParticleBlock PagedParticles::block(std::int64_t b, std::int64_t e) const {
  if (b < 0 || e < b || e > store_.size())
    throw InputError("PagedParticles: block [" + std::to_string(b) + ", " + std::to_string(e) + ") outside [0, " +
                     std::to_string(store_.size()) + ")");
  Lease& l = lease();
  const std::int64_t local = b / per_page_;
  if (e == b || (e - 1) / per_page_ != local) return copy_block(l, b, e);
  const Lease::Pinned* held = nullptr;
  for (const Lease::Pinned& p : l.pinned)
    if (p.local == local) {
      held = &p;
      break;
    }
  if (!held) {
    if (l.pinned.size() >= max_pinned_pages_) return copy_block(l, b, e);
    Lease::Pinned p{local, {}};
    p.pages.reserve(bases_.size());
    for (const std::int64_t base : bases_) p.pages.push_back(store_.pin(base + local));
    l.pinned.push_back(std::move(p));
    // a sweep along the curve (the moments) reads the following pages next
    if (read_ahead_) {
      std::vector<std::int64_t> ahead;  // hinted together: one wake of a read-ahead worker
      for (std::int64_t a = 1; a <= store_.read_ahead_pages() && (local + a) * per_page_ < store_.size(); ++a)
        for (const std::int64_t base : bases_) ahead.push_back(base + local + a);
      store_.hint(Span<const std::int64_t>(ahead.data(), ahead.size()));
    }
    held = &l.pinned.back();
  }
  ++l.n_pinned;
  const std::int64_t at = b - local * per_page_;
  const auto ptr = [&](int c) {
    return reinterpret_cast<const double*>(held->pages[static_cast<std::size_t>(column_page_[c])].data() +
                                           column_offset_[c]) + at;
  };
  return {ptr(0), ptr(1), ptr(2), ptr(3), b, e};
}

void PagedParticles::release_thread() const { lease().clear(); }

void PagedParticles::done_with(const ParticleBlock& block) const {
  Lease& l = lease();
  if (l.copies.empty() || block.begin() == block.end()) return;
  Lease::Copy& last = l.copies.back();
  if (block.x_data() != last.xyzm.get()) return;  // pinned, or not the latest copy
  l.bytes -= static_cast<std::uint64_t>(4 * (block.end() - block.begin())) * sizeof(double);
  l.copies.pop_back();  // frees the copy and gives its charge back
}

std::uint64_t PagedParticles::peak_bytes_held() const {
  std::uint64_t most = 0;
  for (const auto& l : leases_) most = std::max(most, l->peak_bytes);
  return most;
}

void PagedParticles::release() {
  for (auto& l : leases_) l->clear();
}

std::uint64_t PagedParticles::bytes_held() const {
  std::uint64_t s = 0;
  for (const auto& l : leases_) s += l->bytes;
  return s;
}

std::uint64_t PagedParticles::blocks_pinned() const {
  std::uint64_t s = 0;
  for (const auto& l : leases_) s += l->n_pinned;
  return s;
}

std::uint64_t PagedParticles::blocks_copied() const {
  std::uint64_t s = 0;
  for (const auto& l : leases_) s += l->n_copied;
  return s;
}

}  // namespace gravpipe
