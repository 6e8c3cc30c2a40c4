// The list loops of the tree evaluation, one template compiled once per instruction set.
// Included inside namespace gravpipe::tree_kernel::<isa>, with kernel_lanes naming
// gravpipe::kernel::<isa> (the lane types of the direct kernels).
//
// As in the direct kernels: W i-particles of the group sit in the W lanes of a vector and
// each list entry (particle or cell) is broadcast to all lanes. Particle-particle terms are
// add_pair (pair_interaction.hpp), the very function of direct summation.
// Double: float64 throughout. Mixed: coordinates relative to the group's centre, rounded
// to float32 once in float64 (so differences keep float32 precision relative to the
// group's size for any translation of the system), float32 arithmetic with rsqrt + one
// Newton step, each i-particle's sums in float32 and flushed to float64 once.
//
// Particle-cell terms: the monopole is add_pair with the cell's mass at its com (softened
// like a particle). The quadrupole is the second-order Taylor term of the *softened*
// potential sum_k -G m_k / sqrt(|s - y_k|^2 + eps^2) about the com, which is
//   Phi_2 = -G (d.Q.d - eps^2 T) / (2 R^5),  R^2 = |d|^2 + eps^2,  d = com - x_i,
// with Q = sum m (3 y y^T - |y|^2 I) (traceless) and T = sum m |y|^2; its acceleration is
//   a_2 = G [ -Q.d / R^5 + (5/2) (d.Q.d - eps^2 T) d / R^7 ].
// So the cell term converges to the softened particle sum as the cell shrinks, for any eps
// (with eps = 0 it is the usual traceless quadrupole).

template <class T>
struct Lanes;
template <>
struct Lanes<double> {
  using V = kernel_lanes::VD;
  using Excl = kernel_lanes::ExclD;
  static Excl load_ex(const std::int64_t* p) { return kernel_lanes::load_exclude_d(p); }
};
template <>
struct Lanes<float> {
  using V = kernel_lanes::VF;
  using Excl = kernel_lanes::ExclF;
  static Excl load_ex(const std::int64_t* p) { return kernel_lanes::load_exclude_f(p); }
};

/// 1/sqrt(r2): the lane type's scaled estimate times the exact power of two 1/S.
template <class T, class V>
inline V rinv_of(V r2) {
  using namespace kernel_lanes;
  constexpr double S = rsqrt_scale(V{});
  if constexpr (S == 1.0)
    return rsqrt_scaled(r2);
  else
    return rsqrt_scaled(r2) * splat(static_cast<T>(1.0 / S));
}

template <bool kMasked, class T, class V, class Excl>
inline void pp_loop(std::size_t j0, std::size_t j1, const ListView<T>& l, V xi, V yi, V zi,
                    Excl ex, V eps2, PairSums<V>& s) {
  using namespace kernel_lanes;
  const V zero_v = zero<V>(), three = splat(static_cast<T>(3));
  for (std::size_t j = j0; j < j1; ++j) {
    const V dx = broadcast(&l.px[j]) - xi, dy = broadcast(&l.py[j]) - yi,
            dz = broadcast(&l.pz[j]) - zi;
    V rinv = rinv_of<T>(softened_r2(dx, dy, dz, eps2));
    if constexpr (kMasked) rinv = zero_where_excluded(rinv, ex, l.pidx[j]);
    add_pair<false>(s, dx, dy, dz, zero_v, zero_v, zero_v, broadcast(&l.pm[j]), rinv, three);
  }
}

template <bool kQuad, class T, class V>
inline void pc_loop(const ListView<T>& l, V xi, V yi, V zi, V eps2, PairSums<V>& s) {
  using namespace kernel_lanes;
  const V zero_v = zero<V>(), three = splat(static_cast<T>(3)), half = splat(static_cast<T>(0.5)),
          five_half = splat(static_cast<T>(2.5));
  for (std::size_t c = 0; c < l.nc; ++c) {
    const V dx = broadcast(&l.cx[c]) - xi, dy = broadcast(&l.cy[c]) - yi,
            dz = broadcast(&l.cz[c]) - zi;
    const V rinv = rinv_of<T>(softened_r2(dx, dy, dz, eps2));
    add_pair<false>(s, dx, dy, dz, zero_v, zero_v, zero_v, broadcast(&l.cm[c]), rinv, three);
    if constexpr (kQuad) {
      const V qxx = broadcast(&l.qxx[c]), qxy = broadcast(&l.qxy[c]), qxz = broadcast(&l.qxz[c]);
      const V qyy = broadcast(&l.qyy[c]), qyz = broadcast(&l.qyz[c]), qzz = broadcast(&l.qzz[c]);
      const V qdx = fmadd(qxz, dz, fmadd(qxy, dy, qxx * dx));
      const V qdy = fmadd(qyz, dz, fmadd(qyy, dy, qxy * dx));
      const V qdz = fmadd(qzz, dz, fmadd(qyz, dy, qxz * dx));
      const V dqd = fnmadd(eps2, broadcast(&l.qtr[c]), fmadd(dz, qdz, fmadd(dy, qdy, dx * qdx)));
      const V rinv2 = rinv * rinv;
      const V rinv5 = rinv2 * rinv2 * rinv;
      const V k = five_half * dqd * rinv5 * rinv2;
      s.pot = fmadd(half * dqd, rinv5, s.pot);
      s.ax = fmadd(k, dx, fnmadd(rinv5, qdx, s.ax));
      s.ay = fmadd(k, dy, fnmadd(rinv5, qdy, s.ay));
      s.az = fmadd(k, dz, fnmadd(rinv5, qdz, s.az));
    }
  }
}

template <class T>
void evaluate_lanes(const ListView<T>& l, const SinkView<T>& g, std::size_t n_i, double eps2_d,
                    bool quadrupole, GroupSinks& out) {
  using namespace kernel_lanes;
  using V = typename Lanes<T>::V;
  const V eps2 = splat(static_cast<T>(eps2_d));
  for (std::size_t i = 0; i < n_i; i += V::W) {
    const V xi = load(&g.x[i]), yi = load(&g.y[i]), zi = load(&g.z[i]);
    const auto ex = Lanes<T>::load_ex(&g.exclude[i]);
    PairSums<V> s{zero<V>(), zero<V>(), zero<V>(), zero<V>(), zero<V>(), zero<V>(), zero<V>()};
    pp_loop<true>(0, l.n_masked, l, xi, yi, zi, ex, eps2, s);
    pp_loop<false>(l.n_masked, l.np, l, xi, yi, zi, ex, eps2, s);
    if (quadrupole)
      pc_loop<true>(l, xi, yi, zi, eps2, s);
    else
      pc_loop<false>(l, xi, yi, zi, eps2, s);
    // the outputs are zeroed by the caller: adding 1 x sum stores it (exactly, in float64)
    add_to(&out.ax[i], s.ax, 1.0), add_to(&out.ay[i], s.ay, 1.0), add_to(&out.az[i], s.az, 1.0);
    add_to(&out.pot[i], s.pot, 1.0);
  }
}

void evaluate(const EvalArgs& a) {
  if (a.mixed)
    evaluate_lanes<float>(a.list->view_f(), a.sinks->view_f(), a.n_i, a.eps2, a.quadrupole, *a.sinks);
  else
    evaluate_lanes<double>(a.list->view_d(), a.sinks->view_d(), a.n_i, a.eps2, a.quadrupole, *a.sinks);
}
