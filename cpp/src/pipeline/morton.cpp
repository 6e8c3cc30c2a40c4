#include "gravpipe/morton.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

namespace gravpipe {

std::vector<std::int64_t> morton_order(Span<const double> pos) {
  const std::size_t n = pos.size() / 3;
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (std::size_t k = 0; k < n; ++k)
    for (int c = 0; c < 3; ++c) {
      lo[c] = std::min(lo[c], pos[3 * k + c]);
      hi[c] = std::max(hi[c], pos[3 * k + c]);
    }
  double side = 0;
  for (int c = 0; c < 3; ++c) side = std::max(side, hi[c] - lo[c]);
  const double cells = static_cast<double>(1u << kMortonBitsPerAxis);
  const double scale = side > 0 ? (cells - 1) / side : 0.0;
  std::vector<std::pair<std::uint64_t, std::int64_t>> keyed(n);
  for (std::size_t k = 0; k < n; ++k) {
    std::uint32_t q[3];
    for (int c = 0; c < 3; ++c) q[c] = static_cast<std::uint32_t>((pos[3 * k + c] - lo[c]) * scale);
    keyed[k] = {morton_key(q[0], q[1], q[2]), static_cast<std::int64_t>(k)};
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<std::int64_t> order(n);
  for (std::size_t k = 0; k < n; ++k) order[k] = keyed[k].second;
  return order;
}

}  // namespace gravpipe
