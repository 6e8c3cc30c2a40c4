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

/// One i-vector of a group: positions, exclusions and running sums.
template <class V, class Excl>
struct IVector {
  V x, y, z;
  Excl ex;
  PairSums<V> s;
};

// rsqrt_scaled returns rinv' = S / r for a power of two S (S = 2 for the float Newton
// step). Fed to add_pair, pot sums carry a factor S and acc sums S^3, taken out exactly in
// float64 at the end; the quadrupole terms below are scaled to match with constants.

/// One particle (or monopole) term on one i-vector.
template <bool kMasked, class V, class Excl>
inline void particle_term(V xj, V yj, V zj, V mj, std::int64_t j, V eps2, IVector<V, Excl>& i) {
  using namespace kernel_lanes;
  const V zero_v = zero<V>();
  const V dx = xj - i.x, dy = yj - i.y, dz = zj - i.z;
  const V r2 = softened_r2(dx, dy, dz, eps2);
  V rinv;
  if constexpr (kMasked)
    rinv = rsqrt_scaled_excluding(r2, i.ex, j);
  else
    rinv = rsqrt_scaled(r2);
  add_pair<false>(i.s, dx, dy, dz, zero_v, zero_v, zero_v, mj, rinv, zero_v);
}

/// A cell's quadrupole moments, broadcast.
template <class V>
struct QuadLanes {
  V xx, xy, xz, yy, yz, zz, minus_eps2_tr;
};

/// One cell term (monopole + quadrupole) on one i-vector. With R^-n' = S^n R^-n from
/// rinv', the terms are brought to the sums' scales (pot S, acc S^3) by one multiply,
/// rinv5s = S^3 R^-5, and the constants.
template <class T, class V, class Excl>
inline void cell_term(V xj, V yj, V zj, V mj, const QuadLanes<V>& q, V eps2, IVector<V, Excl>& i) {
  using namespace kernel_lanes;
  constexpr double S = rsqrt_scale(V{});
  const V inv_s2 = splat(static_cast<T>(1 / (S * S)));
  const V half = splat(static_cast<T>(0.5 / (S * S)));
  const V five_half = splat(static_cast<T>(2.5 / (S * S)));
  const V dx = xj - i.x, dy = yj - i.y, dz = zj - i.z;
  const V rinv = rsqrt_scaled(softened_r2(dx, dy, dz, eps2));
  const V qdx = fmadd(q.xz, dz, fmadd(q.xy, dy, q.xx * dx));
  const V qdy = fmadd(q.yz, dz, fmadd(q.yy, dy, q.xy * dx));
  const V qdz = fmadd(q.zz, dz, fmadd(q.yz, dy, q.xz * dx));
  const V dqd = fmadd(dz, qdz, fmadd(dy, qdy, fmadd(dx, qdx, q.minus_eps2_tr)));  // d.Q.d - eps^2 T
  const V rinv2 = rinv * rinv;                         // S^2 R^-2
  const V mr = mj * rinv;                              // S m/R
  const V rinv5s = (rinv2 * inv_s2) * (rinv2 * rinv);  // S^3 R^-5
  const V dqd_r5 = dqd * rinv5s;                       // S^3 dQd R^-5
  // pot: m/R + dQd / (2 R^5); acc: (m/R^3 + 5/2 dQd/R^7) d - Q.d / R^5
  i.s.pot = i.s.pot + fmadd(half, dqd_r5, mr);
  const V coef = rinv2 * fmadd(five_half, dqd_r5, mr);  // S^3 (m/R^3 + 5/2 dQd/R^7)
  i.s.ax = fnmadd(rinv5s, qdx, fmadd(coef, dx, i.s.ax));
  i.s.ay = fnmadd(rinv5s, qdy, fmadd(coef, dy, i.s.ay));
  i.s.az = fnmadd(rinv5s, qdz, fmadd(coef, dz, i.s.az));
}

// The loops take one or two i-vectors as separate named locals (not an array): GCC keeps
// array elements in memory, and every iteration would then wait on a store-to-load round
// trip through its sums. Two vectors share each broadcast and give the core two
// independent dependency chains per entry (as the direct kernels' kIVectors).

template <bool kMasked, bool kPair, class T, class V, class Excl>
inline void particle_loop(std::size_t j0, std::size_t j1, const ListView<T>& l,
                          IVector<V, Excl>& a_out, IVector<V, Excl>& b_out, V eps2) {
  IVector<V, Excl> a = a_out, b = b_out;  // locals, so that the sums stay in registers
  using namespace kernel_lanes;
  for (std::size_t j = j0; j < j1; ++j) {
    const ListParticle<T>& e = l.p[j];
    const V xj = broadcast(&e.x), yj = broadcast(&e.y), zj = broadcast(&e.z), mj = broadcast(&e.m);
    const std::int64_t idx = kMasked ? l.pidx[j] : 0;
    particle_term<kMasked>(xj, yj, zj, mj, idx, eps2, a);
    if constexpr (kPair) particle_term<kMasked>(xj, yj, zj, mj, idx, eps2, b);
  }
  a_out = a;
  if constexpr (kPair) b_out = b;
}

/// Cells.
template <bool kPair, class T, class V, class Excl>
inline void cell_loop(const ListView<T>& l, IVector<V, Excl>& a_out, IVector<V, Excl>& b_out, V eps2) {
  using namespace kernel_lanes;
  IVector<V, Excl> a = a_out, b = b_out;
  for (std::size_t c = 0; c < l.nc; ++c) {
    const ListCell<T>& e = l.c[c];
    const QuadLanes<V> q{broadcast(&e.qxx), broadcast(&e.qxy), broadcast(&e.qxz), broadcast(&e.qyy),
                         broadcast(&e.qyz), broadcast(&e.qzz), fnmadd(eps2, broadcast(&e.qtr), zero<V>())};
    const V xj = broadcast(&e.x), yj = broadcast(&e.y), zj = broadcast(&e.z), mj = broadcast(&e.m);
    cell_term<T>(xj, yj, zj, mj, q, eps2, a);
    if constexpr (kPair) cell_term<T>(xj, yj, zj, mj, q, eps2, b);
  }
  a_out = a;
  if constexpr (kPair) b_out = b;
}

template <class T>
IVector<typename Lanes<T>::V, typename Lanes<T>::Excl> load_ivector(const SinkView<T>& g,
                                                                    std::size_t at) {
  using namespace kernel_lanes;
  using V = typename Lanes<T>::V;
  return {load(&g.x[at]), load(&g.y[at]), load(&g.z[at]), Lanes<T>::load_ex(&g.exclude[at]),
          {zero<V>(), zero<V>(), zero<V>(), zero<V>(), zero<V>(), zero<V>(), zero<V>()}};
}

template <class V, class Excl>
void store_ivector(const IVector<V, Excl>& i, std::size_t at, GroupSinks& out) {
  using namespace kernel_lanes;
  // the outputs are zeroed by the caller; the scales are powers of two: exact
  constexpr double S = rsqrt_scale(V{});
  add_to(&out.ax[at], i.s.ax, 1 / (S * S * S)), add_to(&out.ay[at], i.s.ay, 1 / (S * S * S));
  add_to(&out.az[at], i.s.az, 1 / (S * S * S)), add_to(&out.pot[at], i.s.pot, 1 / S);
}

/// Sums of the i-vector at sink i (and of the next one with kPair) over the whole list.
template <bool kPair, class T>
void evaluate_vectors(const ListView<T>& l, const SinkView<T>& g, std::size_t i, T eps2_t,
                      GroupSinks& out) {
  using namespace kernel_lanes;
  using V = typename Lanes<T>::V;
  const V eps2 = splat(eps2_t);
  auto a = load_ivector(g, i);
  auto b = load_ivector(g, kPair ? i + V::W : i);
  particle_loop<true, kPair>(0, l.n_masked, l, a, b, eps2);
  particle_loop<false, kPair>(l.n_masked, l.np, l, a, b, eps2);
  cell_loop<kPair>(l, a, b, eps2);
  store_ivector(a, i, out);
  if constexpr (kPair) store_ivector(b, i + V::W, out);
}

/// Pairs of float i-vectors (double precision is throughput-bound: one at a time).
template <class T>
void evaluate_lanes(const ListView<T>& l, const SinkView<T>& g, std::size_t n_i, double eps2,
                    GroupSinks& out) {
  constexpr std::size_t W = Lanes<T>::V::W;
  constexpr bool kPairs = std::is_same_v<T, float>;
  for (std::size_t i = 0; i < n_i;) {
    if (kPairs && i + 2 * W <= n_i) {
      evaluate_vectors<true, T>(l, g, i, static_cast<T>(eps2), out);
      i += 2 * W;
    } else {
      evaluate_vectors<false, T>(l, g, i, static_cast<T>(eps2), out);
      i += W;
    }
  }
}

void evaluate(const EvalArgs& a) {
  if (a.mixed)
    evaluate_lanes<float>(a.list->view_f(), a.sinks->view_f(), a.n_i, a.eps2, *a.sinks);
  else
    evaluate_lanes<double>(a.list->view_d(), a.sinks->view_d(), a.n_i, a.eps2, *a.sinks);
}
