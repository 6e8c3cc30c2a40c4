// The octree and its moments against brute force from the particles: cells hold the
// particles whose keys share their prefix, children tile their parent's range one level down,
// each child's box lies inside its parent's, and every cell's mass, centre of mass, box and
// quadrupole are the sums over its own particles (and, by the parallel-axis theorem, over its
// children's). Clustered, offset and coincident particles, through the pieces and through Tree.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gravpipe/curve_order.hpp"
#include "gravpipe/particle_view.hpp"
#include "gravpipe/tree.hpp"
#include "test_harness.hpp"
#include "test_suites.hpp"

namespace gravpipe_test {

namespace {

using gravpipe::TreeNodes;

struct Bodies {
  std::vector<double> pos, mass;  // caller order: pos 3n row-major
};

/// Two clusters of very different size (a deep tree), a few massless bodies, and 40
/// coincident ones (a cell at the deepest level that cannot split), offset from the origin.
Bodies clustered(std::size_t n, std::uint64_t seed, double offset) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.5, 1.5);
  Bodies b;
  for (std::size_t k = 0; k < n; ++k) {
    const double scale = k % 5 == 0 ? 0.01 : 1.0;
    for (int c = 0; c < 3; ++c) b.pos.push_back(offset + scale * normal(rng) + (k % 5 == 0 ? 2.0 : 0.0));
    b.mass.push_back(k % 97 == 0 ? 0.0 : uniform(rng) / static_cast<double>(n));
  }
  for (int k = 0; k < 40; ++k) {
    for (int c = 0; c < 3; ++c) b.pos.push_back(offset + 0.25);
    b.mass.push_back(1.0 / static_cast<double>(n));
  }
  return b;
}

/// The particles in curve order within `box`, as the tree holds them.
struct Sorted {
  std::vector<std::uint64_t> keys;
  std::vector<double> x, y, z, m;
};

Sorted sort_bodies(const Bodies& b, const gravpipe::CurveBox& box) {
  Sorted s;
  s.keys = gravpipe::curve_keys({b.pos.data(), b.pos.size()}, box, 2);
  const std::vector<std::int64_t> order = gravpipe::sort_keys(s.keys, 2);
  for (const std::int64_t o : order) {
    const auto i = static_cast<std::size_t>(o);
    s.x.push_back(b.pos[3 * i]), s.y.push_back(b.pos[3 * i + 1]), s.z.push_back(b.pos[3 * i + 2]);
    s.m.push_back(b.mass[i]);
  }
  return s;
}

/// A cell's moments summed straight from its particles.
struct Brute {
  double m = 0, c[3] = {0, 0, 0}, lo[3], hi[3];
  double q[6] = {0, 0, 0, 0, 0, 0};  // xx xy xz yy yz zz of sum m (3 y y^T - |y|^2 I)
  double tr = 0;                     // sum m |y|^2
};

Brute brute(const Sorted& s, std::int64_t b, std::int64_t e) {
  Brute r;
  for (int a = 0; a < 3; ++a) r.lo[a] = INFINITY, r.hi[a] = -INFINITY;
  for (auto k = static_cast<std::size_t>(b); k < static_cast<std::size_t>(e); ++k) {
    const double p[3] = {s.x[k], s.y[k], s.z[k]};
    r.m += s.m[k];
    for (int a = 0; a < 3; ++a) r.c[a] += s.m[k] * p[a], r.lo[a] = std::min(r.lo[a], p[a]), r.hi[a] = std::max(r.hi[a], p[a]);
  }
  for (int a = 0; a < 3; ++a) r.c[a] = r.m > 0 ? r.c[a] / r.m : 0.5 * (r.lo[a] + r.hi[a]);
  for (auto k = static_cast<std::size_t>(b); k < static_cast<std::size_t>(e); ++k) {
    const double y[3] = {s.x[k] - r.c[0], s.y[k] - r.c[1], s.z[k] - r.c[2]};
    const double y2 = y[0] * y[0] + y[1] * y[1] + y[2] * y[2];
    r.q[0] += s.m[k] * (3 * y[0] * y[0] - y2), r.q[1] += s.m[k] * 3 * y[0] * y[1], r.q[2] += s.m[k] * 3 * y[0] * y[2];
    r.q[3] += s.m[k] * (3 * y[1] * y[1] - y2), r.q[4] += s.m[k] * 3 * y[1] * y[2], r.q[5] += s.m[k] * (3 * y[2] * y[2] - y2);
    r.tr += s.m[k] * y2;
  }
  return r;
}

std::array<double, 6> quad_of(const TreeNodes& t, std::size_t c) {
  return {t.qxx[c], t.qxy[c], t.qxz[c], t.qyy[c], t.qyz[c], t.qzz[c]};
}

/// The octree's shape: ranges, levels, key prefixes, the splitting rule.
void check_shape(Context& t, const TreeNodes& nodes, const Sorted& s, int n_leaf) {
  const auto n = static_cast<std::int64_t>(s.keys.size());
  REQUIRE(nodes.count() >= 1);
  CHECK_EQ(nodes.begin[0], std::int64_t{0});
  CHECK_EQ(nodes.end[0], n);
  std::vector<int> in_leaves(static_cast<std::size_t>(n), 0);
  std::vector<int> parents(nodes.count(), 0);
  int wrong = 0;
  for (std::size_t c = 0; c < nodes.count(); ++c) {
    const std::int64_t b = nodes.begin[c], e = nodes.end[c];
    const int level = nodes.level[c];
    const int shift = 3 * (gravpipe::kTreeMaxLevel - level);
    // one prefix of 3 level bits: the first and last of the sorted keys share it
    wrong += s.keys[static_cast<std::size_t>(b)] >> shift != s.keys[static_cast<std::size_t>(e - 1)] >> shift;
    if (nodes.is_leaf(c)) {
      wrong += e - b > n_leaf && level < gravpipe::kTreeMaxLevel;  // would have been split
      for (std::int64_t k = b; k < e; ++k) ++in_leaves[static_cast<std::size_t>(k)];
      continue;
    }
    wrong += e - b <= n_leaf;  // split though small enough
    const auto first = static_cast<std::size_t>(nodes.first_child[c]);
    REQUIRE(first > c && first + static_cast<std::size_t>(nodes.n_children[c]) <= nodes.count());
    std::int64_t at = b;
    for (std::size_t k = first; k < first + static_cast<std::size_t>(nodes.n_children[c]); ++k) {
      ++parents[k];
      wrong += nodes.level[k] != level + 1 || nodes.begin[k] != at || nodes.end[k] <= nodes.begin[k];
      // siblings: distinct octants, in curve order
      if (k > first)
        wrong += s.keys[static_cast<std::size_t>(nodes.begin[k - 1])] >> (shift - 3) >=
                 s.keys[static_cast<std::size_t>(nodes.begin[k])] >> (shift - 3);
      at = nodes.end[k];
    }
    wrong += at != e;
  }
  CHECK_EQ(wrong, 0);
  CHECK(std::all_of(in_leaves.begin(), in_leaves.end(), [](int v) { return v == 1; }));  // a partition
  CHECK_EQ(parents[0], 0);
  CHECK(std::all_of(parents.begin() + 1, parents.end(), [](int v) { return v == 1; }));  // one parent each
}

/// How far a cell's quadrupole may stray from brute force: rounding relative to its size
/// (sum m |y|^2), the first-order effect of its children's centres of mass, each a few ulp of
/// the coordinates (`extent`) off, on the parallel-axis shifts (m size ulp), and for a cell
/// of coincident particles (size 0) the square of such an offset.
double quad_tolerance(double mass, double trace, double size, double extent) {
  return 1e-9 * trace + 1e-12 * mass * extent * size + 1e-24 * mass * extent * extent + 1e-300;
}

/// Every cell's moments against brute force, and each split cell against its children.
void check_moments(Context& t, const TreeNodes& nodes, const Sorted& s, double theta) {
  int mass_off = 0, com_off = 0, box_off = 0, quad_off = 0, shift_off = 0, outside = 0, radius_off = 0, walk_off = 0;
  double extent = 0;
  for (std::size_t c = 0; c < s.x.size(); ++c)
    extent = std::max({extent, std::abs(s.x[c]), std::abs(s.y[c]), std::abs(s.z[c])});
  for (std::size_t c = 0; c < nodes.count(); ++c) {
    const Brute r = brute(s, nodes.begin[c], nodes.end[c]);
    mass_off += std::abs(nodes.mass[c] - r.m) > 1e-12 * r.m;
    const double com[3] = {nodes.cx[c], nodes.cy[c], nodes.cz[c]};
    const double lo[3] = {nodes.lo_x[c], nodes.lo_y[c], nodes.lo_z[c]}, hi[3] = {nodes.hi_x[c], nodes.hi_y[c], nodes.hi_z[c]};
    for (int a = 0; a < 3; ++a) {
      com_off += std::abs(com[a] - r.c[a]) > 1e-11 * extent;
      box_off += lo[a] != r.lo[a] || hi[a] != r.hi[a];  // min and max are exact
    }
    const std::array<double, 6> q = quad_of(nodes, c);
    const double size = std::max({hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2]});
    const double tol = quad_tolerance(r.m, r.tr, size, extent);
    for (int k = 0; k < 6; ++k) quad_off += std::abs(q[static_cast<std::size_t>(k)] - r.q[k]) > tol;
    quad_off += std::abs(nodes.qtr[c] - r.tr) > tol;
    const double off = std::hypot(com[0] - 0.5 * (lo[0] + hi[0]), com[1] - 0.5 * (lo[1] + hi[1]), com[2] - 0.5 * (lo[2] + hi[2]));
    radius_off += nodes.size[c] != size || std::abs(nodes.r_open2[c] - std::pow(size / theta + off, 2)) >
                                               1e-12 * nodes.r_open2[c] + 1e-300;
    const gravpipe::WalkCell& w = nodes.walk[c];
    walk_off += w.cx != com[0] || w.cy != com[1] || w.cz != com[2] || w.r_open2 != nodes.r_open2[c] ||
                w.begin != nodes.begin[c] || w.end != nodes.end[c] || w.first_child != nodes.first_child[c] ||
                w.n_children != nodes.n_children[c];
    if (nodes.is_leaf(c)) continue;
    // the parent from its children: masses add, boxes nest, quadrupoles shift to its com
    double m = 0, shifted[6] = {0, 0, 0, 0, 0, 0}, tr = 0;
    const auto first = static_cast<std::size_t>(nodes.first_child[c]);
    for (std::size_t k = first; k < first + static_cast<std::size_t>(nodes.n_children[c]); ++k) {
      m += nodes.mass[k];
      outside += nodes.lo_x[k] < lo[0] || nodes.lo_y[k] < lo[1] || nodes.lo_z[k] < lo[2] || nodes.hi_x[k] > hi[0] ||
                 nodes.hi_y[k] > hi[1] || nodes.hi_z[k] > hi[2];
      const double d[3] = {nodes.cx[k] - com[0], nodes.cy[k] - com[1], nodes.cz[k] - com[2]};
      const double d2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
      const std::array<double, 6> qk = quad_of(nodes, k);
      const int ij[6][2] = {{0, 0}, {0, 1}, {0, 2}, {1, 1}, {1, 2}, {2, 2}};
      for (int e = 0; e < 6; ++e) {
        const int i = ij[e][0], j = ij[e][1];
        shifted[e] += qk[static_cast<std::size_t>(e)] + nodes.mass[k] * (3 * d[i] * d[j] - (i == j ? d2 : 0.0));
      }
      tr += nodes.qtr[k] + nodes.mass[k] * d2;
    }
    mass_off += std::abs(m - nodes.mass[c]) > 1e-12 * nodes.mass[c];
    for (int e = 0; e < 6; ++e) shift_off += std::abs(shifted[e] - q[static_cast<std::size_t>(e)]) > tol;
    shift_off += std::abs(tr - nodes.qtr[c]) > tol;
  }
  CHECK_EQ(mass_off, 0);
  CHECK_EQ(com_off, 0);
  CHECK_EQ(box_off, 0);
  CHECK_EQ(quad_off, 0);
  CHECK_EQ(shift_off, 0);
  CHECK_EQ(outside, 0);
  CHECK_EQ(radius_off, 0);
  CHECK_EQ(walk_off, 0);
}

/// Groups: cells of at most n_crit particles (or leaves) that partition the particles in order.
void check_groups(Context& t, const TreeNodes& nodes, int n_crit) {
  const std::vector<std::int32_t> groups = gravpipe::group_cells(nodes, n_crit);
  std::int64_t at = 0;
  int wrong = 0;
  for (const std::int32_t g : groups) {
    const auto c = static_cast<std::size_t>(g);
    wrong += nodes.begin[c] != at || (nodes.end[c] - nodes.begin[c] > n_crit && !nodes.is_leaf(c));
    at = nodes.end[c];
  }
  CHECK_EQ(wrong, 0);
  CHECK_EQ(at, nodes.end[0]);
}

void pieces(Context& t, double offset, int n_leaf) {
  const Bodies b = clustered(6000, 11, offset);
  const gravpipe::CurveBox box = gravpipe::bounding_cube({b.pos.data(), b.pos.size()}, 2);
  const Sorted s = sort_bodies(b, box);
  TreeNodes nodes = gravpipe::build_octree({s.keys.data(), s.keys.size()}, n_leaf);
  const gravpipe::InCoreParticles p({s.x.data(), s.x.size()}, {s.y.data(), s.y.size()}, {s.z.data(), s.z.size()},
                                    {s.m.data(), s.m.size()});
  const double theta = 0.6;
  gravpipe::compute_moments(nodes, p, theta, 0.0, 2);
  check_shape(t, nodes, s, n_leaf);
  check_moments(t, nodes, s, theta);
  check_groups(t, nodes, 64);
  // the coincident bodies: a leaf at the deepest level holding more than n_leaf
  bool deep = false;
  for (std::size_t c = 0; c < nodes.count(); ++c)
    deep = deep || (nodes.is_leaf(c) && nodes.level[c] == gravpipe::kTreeMaxLevel && nodes.end[c] - nodes.begin[c] > n_leaf);
  CHECK(deep);
}

void through_tree(Context& t) {
  const Bodies b = clustered(5000, 23, -3.0);
  gravpipe::TreeParams params;
  params.n_leaf = 8;
  params.n_crit = 128;
  params.threads = 2;
  params.theta = 0.5;
  const gravpipe::Tree tree({b.pos.data(), b.pos.size()}, {b.mass.data(), b.mass.size()}, params);
  const Sorted s = sort_bodies(b, tree.frame());  // the tree's own frame gives its order again
  check_shape(t, tree.nodes(), s, params.n_leaf);
  check_moments(t, tree.nodes(), s, params.theta);
  CHECK_EQ(tree.stats().nodes, static_cast<std::uint64_t>(tree.nodes().count()));
}

void single_particle(Context& t) {
  const double pos[3] = {1, 2, 3}, mass[1] = {2};
  std::vector<std::uint64_t> keys{0};
  TreeNodes nodes = gravpipe::build_octree({keys.data(), 1}, 16);
  REQUIRE_EQ(nodes.count(), std::size_t{1});
  const gravpipe::InCoreParticles p({&pos[0], 1}, {&pos[1], 1}, {&pos[2], 1}, {mass, 1});
  gravpipe::compute_moments(nodes, p, 0.6, 0.0, 1);
  CHECK_EQ(nodes.mass[0], 2.0);
  CHECK_EQ(nodes.cx[0], 1.0);
  CHECK_EQ(nodes.size[0], 0.0);
  CHECK_EQ(nodes.qtr[0], 0.0);
}

}  // namespace

Suite tree_invariants_suite() {
  Suite s("tree_invariants");
  s.add("pieces_at_the_origin_n_leaf_16", [](Context& t) { pieces(t, 0.0, 16); });
  s.add("pieces_far_from_the_origin_n_leaf_1", [](Context& t) { pieces(t, 1e3, 1); });
  s.add("through_tree", through_tree);
  s.add("single_particle", single_particle);
  return s;
}

}  // namespace gravpipe_test
