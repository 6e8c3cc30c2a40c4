// The list loops of the tree evaluation, one template compiled once per instruction set.
// Included inside namespace gravpipe::tree_kernel::<isa> after gravpipe::kernel::<isa>'s
// lane types are visible as VD / ExclD.
//
// As in the direct kernels: W i-particles of the group sit in the W lanes of a vector and
// each list entry (particle or cell) is broadcast to all lanes. Particle-particle terms are
// add_pair (pair_interaction.hpp), the very function of direct summation, in float64.
//
// Particle-cell terms: the monopole is add_pair with the cell's mass at its com (softened
// like a particle). The quadrupole is the second-order Taylor term of the *softened*
// potential sum_k -G m_k / sqrt(|s - y_k|^2 + eps^2) about the com, which is
//   Phi_2 = -G (d.Q.d - eps^2 T) / (2 R^5),  R^2 = |d|^2 + eps^2,  d = com - x_i,
// with Q = sum m (3 y y^T - |y|^2 I) (traceless) and T = sum m |y|^2; its acceleration is
//   a_2 = G [ -Q.d / R^5 + (5/2) (d.Q.d - eps^2 T) d / R^7 ].
// So the cell term converges to the softened particle sum as the cell shrinks, for any eps
// (with eps = 0 it is the usual traceless quadrupole).

using kernel_lanes::VD;
using kernel_lanes::ExclD;

template <bool kMasked>
inline void pp_loop(std::size_t j0, std::size_t j1, const GatheredList& l, VD xi, VD yi, VD zi,
                    ExclD ex, VD eps2, PairSums<VD>& s) {
  using namespace kernel_lanes;
  const VD zero_v = zero<VD>(), three = splat(3.0);
  for (std::size_t j = j0; j < j1; ++j) {
    const VD dx = broadcast(&l.px[j]) - xi, dy = broadcast(&l.py[j]) - yi,
             dz = broadcast(&l.pz[j]) - zi;
    VD rinv = rsqrt_scaled(softened_r2(dx, dy, dz, eps2));
    if constexpr (kMasked) rinv = zero_where_excluded(rinv, ex, l.pidx[j]);
    add_pair<false>(s, dx, dy, dz, zero_v, zero_v, zero_v, broadcast(&l.pm[j]), rinv, three);
  }
}

template <bool kQuad>
inline void pc_loop(const GatheredList& l, VD xi, VD yi, VD zi, VD eps2, PairSums<VD>& s) {
  using namespace kernel_lanes;
  const VD zero_v = zero<VD>(), three = splat(3.0), half = splat(0.5), five_half = splat(2.5);
  const std::size_t nc = l.cm.size();
  for (std::size_t c = 0; c < nc; ++c) {
    const VD dx = broadcast(&l.cx[c]) - xi, dy = broadcast(&l.cy[c]) - yi,
             dz = broadcast(&l.cz[c]) - zi;
    const VD rinv = rsqrt_scaled(softened_r2(dx, dy, dz, eps2));
    add_pair<false>(s, dx, dy, dz, zero_v, zero_v, zero_v, broadcast(&l.cm[c]), rinv, three);
    if constexpr (kQuad) {
      const VD qxx = broadcast(&l.qxx[c]), qxy = broadcast(&l.qxy[c]), qxz = broadcast(&l.qxz[c]);
      const VD qyy = broadcast(&l.qyy[c]), qyz = broadcast(&l.qyz[c]), qzz = broadcast(&l.qzz[c]);
      const VD qdx = fmadd(qxz, dz, fmadd(qxy, dy, qxx * dx));
      const VD qdy = fmadd(qyz, dz, fmadd(qyy, dy, qxy * dx));
      const VD qdz = fmadd(qzz, dz, fmadd(qyz, dy, qxz * dx));
      const VD dqd = fnmadd(eps2, broadcast(&l.qtr[c]), fmadd(dz, qdz, fmadd(dy, qdy, dx * qdx)));
      const VD rinv2 = rinv * rinv;
      const VD rinv5 = rinv2 * rinv2 * rinv;
      const VD k = five_half * dqd * rinv5 * rinv2;
      s.pot = fmadd(half * dqd, rinv5, s.pot);
      s.ax = fmadd(k, dx, fnmadd(rinv5, qdx, s.ax));
      s.ay = fmadd(k, dy, fnmadd(rinv5, qdy, s.ay));
      s.az = fmadd(k, dz, fnmadd(rinv5, qdz, s.az));
    }
  }
}

inline void store(const PairSums<VD>& s, GroupSinks& out, std::size_t i) {
  using namespace kernel_lanes;
  // the outputs are zeroed by the caller: adding 1 x sum stores the sum exactly
  add_to(&out.ax[i], s.ax, 1.0), add_to(&out.ay[i], s.ay, 1.0), add_to(&out.az[i], s.az, 1.0);
  add_to(&out.pot[i], s.pot, 1.0);
}

void evaluate(const EvalArgs& a) {
  using namespace kernel_lanes;
  const GatheredList& l = *a.list;
  GroupSinks& g = *a.sinks;
  const VD eps2 = splat(a.eps2);
  const std::size_t np = l.pm.size(), nm = l.n_masked;
  for (std::size_t i = 0; i < a.n_i; i += VD::W) {
    const VD xi = load(&g.x[i]), yi = load(&g.y[i]), zi = load(&g.z[i]);
    const ExclD ex = load_exclude_d(&g.exclude[i]);
    PairSums<VD> s{zero<VD>(), zero<VD>(), zero<VD>(), zero<VD>(), zero<VD>(), zero<VD>(), zero<VD>()};
    pp_loop<true>(0, nm, l, xi, yi, zi, ex, eps2, s);
    pp_loop<false>(nm, np, l, xi, yi, zi, ex, eps2, s);
    if (a.quadrupole)
      pc_loop<true>(l, xi, yi, zi, eps2, s);
    else
      pc_loop<false>(l, xi, yi, zi, eps2, s);
    store(s, g, i);
  }
}
