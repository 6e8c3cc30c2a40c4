// Local (Taylor) expansions of the field of distant cells about a run's centre.
//
// A cell (mass M, second moments S_ij = sum m y_i y_j about its com c) contributes
// sum m / R to the (positive, G-free) potential sums, which to the order of the tree's
// multipoles is  M D(r) + 1/2 S_ij D_ij(r),  D = 1/R, R^2 = |r|^2 + eps^2, r = c - x,
// D_... its derivatives with respect to r: exactly the softened monopole + quadrupole
// term of the list kernels (tree_eval_loops.inl). With x = g + delta about the run's
// centre g, r = r0 - delta and
//   D_a(r0 - delta) = sum_b D_(a+b)(r0) (-delta)^b / b!,
// so the potential sums are  P(delta) = sum_|b|<=3 L_b delta^b  with
//   L_b = (-1)^|b| / b! [M D_b(r0) + 1/2 sum_ij S_ij D_(b+e_i+e_j)(r0)],
// and the acceleration sums are grad P. The derivatives of f(|r|^2), f(s) = (s+eps^2)^-1/2,
// follow from a recurrence (derivatives() below).
// The truncation error of the acceleration is ~ (|delta| / |r0|)^3 of the cell's pull,
// so only cells farther than kLocalRadii run radii are expanded (tree.cpp).
#include "tree_local.hpp"

#include <cmath>
#include <vector>

namespace gravpipe {

namespace {

constexpr int kMaxOrder = kLocalOrder + 2;  // D up to the local order + 2 (quadrupole)

/// Index of the multi-index (a, b, c) in a table ordered by n = a+b+c, then by a
/// descending, then b descending: n(n+1)(n+2)/6 entries precede order n.
constexpr int multi_index(int a, int b, int c) {
  const int n = a + b + c;
  const int before = n * (n + 1) * (n + 2) / 6;
  // within order n: a from n down to 0; for each a, b from n-a down to 0
  int offset = 0;
  for (int aa = n; aa > a; --aa) offset += n - aa + 1;
  return before + offset + (n - a - b);
}
constexpr int kTerms = (kMaxOrder + 1) * (kMaxOrder + 2) * (kMaxOrder + 3) / 6;  // 56

constexpr double factorial(int n) { return n <= 1 ? 1.0 : n * factorial(n - 1); }
/// (-1)^m (2m-1)!!
constexpr double radial_coefficient(int m) {
  double c = 1;
  for (int k = 1; k <= m; ++k) c *= -(2 * k - 1);
  return c;
}

/// One step of the recurrence below, on the flat table aux[m * kTerms + index]:
/// aux[dst] = r[axis] aux[src1] + k aux[src2] (k = 0 where there is no second term).
struct Recurrence {
  int dst, axis, src1, src2;
  double k;
};

/// The steps for every D^(m)_(a,b,c) with a+b+c >= 1 and m <= kMaxOrder - (a+b+c), in an
/// order where each step's sources are done (by increasing order a+b+c).
const std::vector<Recurrence>& recurrences() {
  static const std::vector<Recurrence> table = [] {
    std::vector<Recurrence> v;
    for (int n = 1; n <= kMaxOrder; ++n)
      for (int a = n; a >= 0; --a)
        for (int b = n - a; b >= 0; --b) {
          const int c = n - a - b;
          int e[3] = {a, b, c};
          const int axis = a > 0 ? 0 : (b > 0 ? 1 : 2);
          e[axis] -= 1;
          const int m1 = multi_index(e[0], e[1], e[2]), k = e[axis];
          e[axis] -= 1;
          const int m2 = k > 0 ? multi_index(e[0], e[1], e[2]) : 0;
          for (int m = 0; m + n <= kMaxOrder; ++m)
            v.push_back({m * kTerms + multi_index(a, b, c), axis, (m + 1) * kTerms + m1,
                         (m + 1) * kTerms + m2, static_cast<double>(k)});
        }
    return v;
  }();
  return table;
}

/// All derivatives D_(a,b,c), a+b+c <= kMaxOrder, of 1/sqrt(|r|^2 + eps^2) at r, by the
/// recurrence  D^(m)_(a+1,b,c) = x D^(m+1)_(a,b,c) + a D^(m+1)_(a-1,b,c)  on the
/// auxiliary D^(m) = d^(a,b,c) [2^m f^(m)(|r|^2)], f(s) = (s + eps^2)^(-1/2), whose
/// order-0 values are (-1)^m (2m-1)!! R^-(2m+1); D = D^(0), the first kTerms entries of
/// `aux` ((kMaxOrder + 1) kTerms of them). ~3 flops per step, ~210 steps at order 6.
void derivatives(double x, double y, double z, double eps2, double* aux) {
  const double rinv = 1 / std::sqrt(x * x + y * y + z * z + eps2), rinv2 = rinv * rinv;
  const double r[3] = {x, y, z};
  double radial = rinv;  // R^-(2m+1)
  for (int m = 0; m <= kMaxOrder; ++m, radial *= rinv2) aux[m * kTerms] = radial_coefficient(m) * radial;
  for (const Recurrence& t : recurrences()) aux[t.dst] = r[t.axis] * aux[t.src1] + t.k * aux[t.src2];
}

/// For each local coefficient b (|b| <= kLocalOrder, in table order): the index of D_b,
/// of D_(b+e_i+e_j) for the 6 distinct (i <= j), and (-1)^|b| / b!.
struct LocalTerm {
  int d;
  int dij[6];  // (xx, yy, zz, xy, xz, yz)
  double scale;
};
const std::vector<LocalTerm>& local_terms() {
  static const std::vector<LocalTerm> terms = [] {
    std::vector<LocalTerm> v;
    for (int n = 0; n <= kLocalOrder; ++n)
      for (int a = n; a >= 0; --a)
        for (int b = n - a; b >= 0; --b) {
          const int c = n - a - b;
          v.push_back({multi_index(a, b, c),
                       {multi_index(a + 2, b, c), multi_index(a, b + 2, c), multi_index(a, b, c + 2),
                        multi_index(a + 1, b + 1, c), multi_index(a + 1, b, c + 1), multi_index(a, b + 1, c + 1)},
                       ((n % 2) ? -1.0 : 1.0) / (factorial(a) * factorial(b) * factorial(c))});
        }
    return v;
  }();
  return terms;
}

}  // namespace

void LocalExpansion::reset(const double centre[3]) {
  for (int a = 0; a < 3; ++a) g_[a] = centre[a];
  coeff_.fill(0.0);
}

void LocalExpansion::add_cell(const CellTerms& c, double eps2, bool quadrupole) {
  double d[(kMaxOrder + 1) * kTerms];  // D in the first kTerms
  derivatives(c.cx - g_[0], c.cy - g_[1], c.cz - g_[2], eps2, d);
  const double m = c.m;
  // 1/2 S_ij with S = (Q + T I) / 3 from the traceless Q and the trace T; the off-diagonal
  // pairs appear twice in the sum over i, j
  double h[6] = {0, 0, 0, 0, 0, 0};
  if (quadrupole) {
    const double sixth = 1.0 / 6.0, tr = c.qtr;
    h[0] = (c.qxx + tr) * sixth, h[1] = (c.qyy + tr) * sixth, h[2] = (c.qzz + tr) * sixth;
    h[3] = 2 * c.qxy * sixth, h[4] = 2 * c.qxz * sixth, h[5] = 2 * c.qyz * sixth;
  }
  const auto& terms = local_terms();
  for (std::size_t q = 0; q < terms.size(); ++q) {
    const LocalTerm& lt = terms[q];
    double term = m * d[lt.d];
    for (int k = 0; k < 6; ++k) term += h[k] * d[lt.dij[k]];
    coeff_[q] += lt.scale * term;
  }
}

void LocalExpansion::evaluate(double x, double y, double z, double& ax, double& ay, double& az,
                              double& pot) const {
  const double dx = x - g_[0], dy = y - g_[1], dz = z - g_[2];
  double px[kLocalOrder + 1], py[kLocalOrder + 1], pz[kLocalOrder + 1];
  px[0] = py[0] = pz[0] = 1;
  for (int k = 1; k <= kLocalOrder; ++k) px[k] = px[k - 1] * dx, py[k] = py[k - 1] * dy, pz[k] = pz[k - 1] * dz;
  double p = 0, gx = 0, gy = 0, gz = 0;
  int q = 0;
  for (int n = 0; n <= kLocalOrder; ++n)
    for (int a = n; a >= 0; --a)
      for (int b = n - a; b >= 0; --b, ++q) {
        const int c = n - a - b;
        const double l = coeff_[q];
        p += l * px[a] * py[b] * pz[c];
        if (a > 0) gx += l * a * px[a - 1] * py[b] * pz[c];
        if (b > 0) gy += l * b * px[a] * py[b - 1] * pz[c];
        if (c > 0) gz += l * c * px[a] * py[b] * pz[c - 1];
      }
  pot += p, ax += gx, ay += gy, az += gz;
}

}  // namespace gravpipe
