// PagedParticles: blocks copied out of the store's pages into budget-charged memory.
#include "gravpipe/paged_particles.hpp"

#include <omp.h>

#include <utility>

#include "gravpipe/error.hpp"

namespace gravpipe {

PagedParticles::PagedParticles(ParticleStore& store, std::string pos, std::string mass)
    : store_(store), pos_(std::move(pos)), mass_(std::move(mass)) {
  if (store_.field(pos_).components != 3) throw InputError("PagedParticles: field '" + pos_ + "' is not a 3-vector");
  if (store_.field(mass_).components != 1) throw InputError("PagedParticles: field '" + mass_ + "' is not a scalar");
}

ParticleBlock PagedParticles::block(std::int64_t b, std::int64_t e) const {
  if (b < 0 || e < b || e > store_.size())
    throw InputError("PagedParticles: block [" + std::to_string(b) + ", " + std::to_string(e) + ") outside [0, " +
                     std::to_string(store_.size()) + ")");
  const std::int64_t n = e - b;
  const auto bytes = static_cast<std::uint64_t>(4 * n) * sizeof(double);
  Copy copy{std::make_unique<double[]>(static_cast<std::size_t>(4 * n)),
            store_.budget().reserve(bytes, "a particle block of " + std::to_string(n) + " particles"),
            omp_get_thread_num(), bytes};
  double* p = copy.xyzm.get();
  for (int k = 0; k < 3; ++k) store_.read_component(pos_, k, b, n, p + k * n);
  store_.read_component(mass_, 0, b, n, p + 3 * n);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    copies_.push_back(std::move(copy));
    bytes_ += bytes;
  }
  return {p, p + n, p + 2 * n, p + 3 * n, b, e};  // the heap block does not move with the vector
}

void PagedParticles::release() {
  std::lock_guard<std::mutex> lock(mutex_);
  copies_.clear();
  bytes_ = 0;
}

void PagedParticles::release_this_thread() const {
  const int me = omp_get_thread_num();
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t kept = 0;
  for (std::size_t k = 0; k < copies_.size(); ++k) {
    if (copies_[k].thread == me) {
      bytes_ -= copies_[k].bytes;
    } else {
      if (kept != k) copies_[kept] = std::move(copies_[k]);
      ++kept;
    }
  }
  copies_.resize(kept);  // the released copies' memory and budget go with them
}

std::uint64_t PagedParticles::bytes_held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

}  // namespace gravpipe
