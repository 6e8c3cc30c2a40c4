// The page of a particle, i / per_page, for readers that ask it for every cell or key they
// touch (the walk prefetch's footprint, the tree build's key reader): a shift where a page
// holds a power of two of particles, as it does at the default page sizes, where two 64-bit
// divisions a cell were a visible part of the footprint's time (BENCHMARKS.md,
// "Out-of-core treecode").
#pragma once
#include <cstdint>

namespace gravpipe {

class PageDivider {
 public:
  /// Pages of `per_page` particles (> 0).
  explicit PageDivider(std::int64_t per_page) : per_page_(per_page) {
    while (per_page_ > 0 && (std::int64_t{1} << (shift_ + 1)) <= per_page_) ++shift_;
    if (shift_ >= 0 && (std::int64_t{1} << shift_) != per_page_) shift_ = -1;  // not a power of two: divide
  }
  /// The page (from 0) that holds particle i >= 0.
  std::int64_t operator()(std::int64_t i) const { return shift_ >= 0 ? i >> shift_ : i / per_page_; }
  std::int64_t per_page() const { return per_page_; }

 private:
  std::int64_t per_page_;
  int shift_ = -1;  // log2(per_page_) when it is a power of two
};

}  // namespace gravpipe
