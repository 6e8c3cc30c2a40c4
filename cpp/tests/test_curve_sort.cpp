// The curve sort against std::stable_sort: the same permutation on random keys of every
// shape (ties, constant high digits, full 64-bit), whichever of the comparison and radix
// paths and however many threads; and the Hilbert keys against the curve's defining property,
// that consecutive cells along it are face neighbours.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "gravpipe/curve_order.hpp"
#include "gravpipe/error.hpp"
#include "test_harness.hpp"
#include "test_suites.hpp"

namespace gravpipe_test {

namespace {

using Keys = std::vector<std::uint64_t>;

/// The reference: input positions ordered by key, ties by position (std::stable_sort).
std::vector<std::int64_t> stable_order(const Keys& keys) {
  std::vector<std::int64_t> order(keys.size());
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return keys[static_cast<std::size_t>(a)] < keys[static_cast<std::size_t>(b)];
  });
  return order;
}

enum class Shape { Full, FewDistinct, LowBits, Sorted, Reversed };

Keys make_keys(std::size_t n, Shape shape, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Keys keys(n);
  for (std::size_t k = 0; k < n; ++k) {
    switch (shape) {
      case Shape::Full: keys[k] = rng(); break;
      case Shape::FewDistinct: keys[k] = (rng() % 7) << 40; break;  // long runs of ties
      case Shape::LowBits: keys[k] = rng() & 0xFFFFF; break;       // high radix digits constant
      case Shape::Sorted: keys[k] = k / 3; break;
      case Shape::Reversed: keys[k] = (n - k) / 2; break;
    }
  }
  return keys;
}

void check_sort(Context& t, std::size_t n, Shape shape, int threads) {
  const Keys input = make_keys(n, shape, 1000 + n + static_cast<std::uint64_t>(shape));
  Keys keys = input;
  const std::vector<std::int64_t> order = gravpipe::sort_keys(keys, threads);
  REQUIRE_EQ(order.size(), n);
  const std::vector<std::int64_t> want = stable_order(input);
  CHECK(order == want);
  CHECK(std::is_sorted(keys.begin(), keys.end()));
  for (std::size_t k = 0; k < n; ++k) {
    // the keys left behind are the input's, permuted by the order
    if (keys[k] != input[static_cast<std::size_t>(order[k])]) {
      t.fail(__FILE__, __LINE__, "key " + std::to_string(k) + " is not the input's key at order[k]");
      break;
    }
  }
  std::vector<std::int64_t> seen(order);
  std::sort(seen.begin(), seen.end());
  std::vector<std::int64_t> all(n);
  std::iota(all.begin(), all.end(), std::int64_t{0});
  CHECK(seen == all);  // a permutation
}

void sorts_like_stable_sort(Context& t) {
  // 3071 / 3072 and 65535 / 65536: where the comparison sort hands over to the radix sort,
  // and the radix sort to its parallel chunks
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{100}, std::size_t{3071},
                              std::size_t{3072}, std::size_t{5000}, std::size_t{65535}, std::size_t{65536},
                              std::size_t{200003}})
    for (const Shape shape : {Shape::Full, Shape::FewDistinct, Shape::LowBits, Shape::Sorted, Shape::Reversed})
      for (const int threads : {1, 3}) check_sort(t, n, shape, threads);
}

void values_follow_their_keys(Context& t) {
  for (const std::size_t n : {std::size_t{1000}, std::size_t{100000}}) {
    const Keys input = make_keys(n, Shape::FewDistinct, 7);
    Keys keys = input;
    std::vector<std::int64_t> values(n);
    for (std::size_t k = 0; k < n; ++k) values[k] = static_cast<std::int64_t>(3 * k + 1);
    gravpipe::SortScratch scratch;
    gravpipe::sort_by_key(keys, values, 2, &scratch);
    const std::vector<std::int64_t> want = stable_order(input);
    bool same = true;
    for (std::size_t k = 0; k < n; ++k) same = same && values[k] == 3 * want[k] + 1;
    CHECK(same);
    // the scratch's buffers reused: the same answer again
    Keys again = input;
    std::vector<std::int64_t> order;
    gravpipe::sort_keys_into(again, order, 2, &scratch);
    CHECK(order == want);
  }
  Keys keys(3);
  std::vector<std::int64_t> values(2);
  CHECK_THROWS_AS(gravpipe::sort_by_key(keys, values, 1), gravpipe::InputError);
}

void thread_count_changes_nothing(Context& t) {
  const Keys input = make_keys(300000, Shape::FewDistinct, 99);
  Keys one = input, four = input;
  CHECK(gravpipe::sort_keys(one, 1) == gravpipe::sort_keys(four, 4));
  CHECK(one == four);
}

/// An 8^3 grid of cell centres in the unit cube: sorted by key, the Hilbert curve of level 3
/// (the keys' top 9 bits), along which each cell is a face neighbour of the one before.
void hilbert_steps_to_face_neighbours(Context& t) {
  const double lo[3] = {0, 0, 0}, hi[3] = {1, 1, 1};
  const gravpipe::CurveBox box = gravpipe::curve_box(lo, hi);
  const int side = 8;
  std::vector<double> pos;
  for (int i = 0; i < side; ++i)
    for (int j = 0; j < side; ++j)
      for (int k = 0; k < side; ++k)
        for (const int c : {i, j, k}) pos.push_back((c + 0.5) / side);
  Keys keys = gravpipe::curve_keys({pos.data(), pos.size()}, box, 2);
  const Keys unsorted = keys;
  const std::vector<std::int64_t> order = gravpipe::sort_keys(keys, 1);
  // distinct cells, distinct keys
  CHECK(std::adjacent_find(keys.begin(), keys.end()) == keys.end());
  int bad_steps = 0;
  for (std::size_t s = 1; s < order.size(); ++s) {
    const auto a = static_cast<std::size_t>(order[s - 1]), b = static_cast<std::size_t>(order[s]);
    double manhattan = 0;
    for (int c = 0; c < 3; ++c) manhattan += std::abs(pos[3 * a + c] - pos[3 * b + c]) * side;
    bad_steps += std::abs(manhattan - 1.0) > 1e-9;
  }
  CHECK_EQ(bad_steps, 0);
  // one key per point, the same as the single-point function gives
  for (std::size_t k = 0; k < unsorted.size(); ++k)
    if (unsorted[k] != gravpipe::curve_key(pos[3 * k], pos[3 * k + 1], pos[3 * k + 2], box)) {
      t.fail(__FILE__, __LINE__, "curve_keys and curve_key disagree at point " + std::to_string(k));
      break;
    }
}

void curve_order_is_the_sorted_keys(Context& t) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> pos(3 * 20000);
  for (double& x : pos) x = normal(rng);
  const gravpipe::CurveBox box = gravpipe::bounding_cube({pos.data(), pos.size()}, 2);
  const Keys keys = gravpipe::curve_keys({pos.data(), pos.size()}, box, 2);
  CHECK(gravpipe::curve_order({pos.data(), pos.size()}, 2) == stable_order(keys));
  // points outside the box clamp to its faces, still valid keys
  const std::uint64_t far = gravpipe::curve_key(1e6, -1e6, 0.0, box);
  CHECK(far == gravpipe::curve_key(1e7, -1e7, 0.0, box));
}

}  // namespace

Suite curve_sort_suite() {
  Suite s("curve_sort");
  s.add("sorts_like_stable_sort", sorts_like_stable_sort);
  s.add("values_follow_their_keys", values_follow_their_keys);
  s.add("thread_count_changes_nothing", thread_count_changes_nothing);
  s.add("hilbert_steps_to_face_neighbours", hilbert_steps_to_face_neighbours);
  s.add("curve_order_is_the_sorted_keys", curve_order_is_the_sorted_keys);
  return s;
}

}  // namespace gravpipe_test
