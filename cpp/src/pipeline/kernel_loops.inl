// The i x j loops of the CPU force kernels, one template compiled once per instruction set.
//
// Included *inside* namespace gravpipe::kernel::<isa>, after that ISA's simd header, which
// provides the lane types VF/VD, ExclF/ExclD and their operations. Standard headers must
// be included by the translation unit before the namespace opens.
//
// Shape of the computation (Nitadori, Makino & Hut 2006; the GRAPE pipelines): W
// i-particles sit in the W lanes of a vector, each j-particle is broadcast to all lanes,
// and the pairwise interaction (pair_interaction.hpp) accumulates into per-lane sums.
// Sums run over one tile of kJTile j-particles and are then added to float64 accumulators,
// which bounds the float32 rounding error of long sums in mixed precision.
//
// A "j source" turns j-particle index j into the lane differences d = x_j - x_i (and
// dv = v_j - v_i) and the mass; the j-loop is written once over any source.

/// Mixed precision, near tiles: d from the hi+lo pairs. (hi_j - hi_i) is exact when the
/// two are close (Sterbenz) and otherwise off by half an ulp of the difference itself, so
/// d keeps float32 precision relative to |d| for any translation of the system.
struct MixedNearSource {
  struct Pair3 {
    VF xh, yh, zh, xl, yl, zl;
  };
  const JPosMixed* jp;
  const JVelMixed* jv;
  Pair3 ip, iv;
  void pos(std::size_t j, VF& dx, VF& dy, VF& dz) const {
    const JPosMixed& r = jp[j];
    dx = (broadcast(&r.xh) - ip.xh) + (broadcast(&r.xl) - ip.xl);
    dy = (broadcast(&r.yh) - ip.yh) + (broadcast(&r.yl) - ip.yl);
    dz = (broadcast(&r.zh) - ip.zh) + (broadcast(&r.zl) - ip.zl);
  }
  void vel(std::size_t j, VF& dx, VF& dy, VF& dz) const {
    const JVelMixed& r = jv[j];
    dx = (broadcast(&r.vxh) - iv.xh) + (broadcast(&r.vxl) - iv.xl);
    dy = (broadcast(&r.vyh) - iv.yh) + (broadcast(&r.vyl) - iv.yl);
    dz = (broadcast(&r.vzh) - iv.zh) + (broadcast(&r.vzl) - iv.zl);
  }
  VF mass(std::size_t j) const { return broadcast(&jp[j].m); }
};

/// Mixed precision, far tiles: d = (x_j - c) + (c - x_i), one add per coordinate, with
/// (c - x_i) computed once per tile from the hi+lo pairs (see j_memory.hpp, kFarRadii).
struct MixedFarSource {
  const JRelMixed* jr;
  const JVelRelMixed* jvr;
  VF ox, oy, oz, ovx, ovy, ovz;
  void pos(std::size_t j, VF& dx, VF& dy, VF& dz) const {
    dx = broadcast(&jr[j].xr) + ox;
    dy = broadcast(&jr[j].yr) + oy;
    dz = broadcast(&jr[j].zr) + oz;
  }
  void vel(std::size_t j, VF& dx, VF& dy, VF& dz) const {
    dx = broadcast(&jvr[j].vxr) + ovx;
    dy = broadcast(&jvr[j].vyr) + ovy;
    dz = broadcast(&jvr[j].vzr) + ovz;
  }
  VF mass(std::size_t j) const { return broadcast(&jr[j].m); }
};

/// Double precision: float64 throughout.
struct DoubleSource {
  const JPosDouble* jp;
  const JVelDouble* jv;
  VD x, y, z, vx, vy, vz;
  void pos(std::size_t j, VD& dx, VD& dy, VD& dz) const {
    dx = broadcast(&jp[j].x) - x;
    dy = broadcast(&jp[j].y) - y;
    dz = broadcast(&jp[j].z) - z;
  }
  void vel(std::size_t j, VD& dx, VD& dy, VD& dz) const {
    dx = broadcast(&jv[j].vx) - vx;
    dy = broadcast(&jv[j].vy) - vy;
    dz = broadcast(&jv[j].vz) - vz;
  }
  VD mass(std::size_t j) const { return broadcast(&jp[j].m); }
};

/// Accumulate j in [j0, j1) from `src` onto the sums of one i-vector.
template <bool kJerk, bool kExclude, class V, class Excl, class Source>
inline void j_loop(std::size_t j0, std::size_t j1, const Source& src, Excl ex, V eps2, V three,
                   PairSums<V>& s) {
  for (std::size_t j = j0; j < j1; ++j) {
    V dx, dy, dz;
    src.pos(j, dx, dy, dz);
    V dvx = zero<V>(), dvy = zero<V>(), dvz = zero<V>();
    if constexpr (kJerk) src.vel(j, dvx, dvy, dvz);
    V rinv = rsqrt(softened_r2(dx, dy, dz, eps2));
    if constexpr (kExclude) rinv = zero_where_excluded(rinv, ex, static_cast<std::int64_t>(j));
    add_pair<kJerk>(s, dx, dy, dz, dvx, dvy, dvz, src.mass(j), rinv, three);
  }
}

/// Run j in [j0, j1) through the masked loop only if an excluded index falls inside.
template <bool kJerk, class V, class Excl, class Source>
inline void j_range(std::size_t j0, std::size_t j1, const Source& src, Excl ex,
                    std::int64_t ex_lo, std::int64_t ex_hi, V eps2, V three, PairSums<V>& s) {
  if (ex_hi >= static_cast<std::int64_t>(j0) && ex_lo < static_cast<std::int64_t>(j1))
    j_loop<kJerk, true>(j0, j1, src, ex, eps2, three, s);
  else
    j_loop<kJerk, false>(j0, j1, src, ex, eps2, three, s);
}

/// The inclusive range of j indices excluded by the lanes [i, i + W); empty if lo > hi.
inline void excluded_range(const std::int64_t* ex, int w, std::int64_t& lo, std::int64_t& hi) {
  lo = INT64_MAX;
  hi = -1;
  for (int k = 0; k < w; ++k) {
    if (ex[k] >= 0) {
      lo = std::min(lo, ex[k]);
      hi = std::max(hi, ex[k]);
    }
  }
}

template <bool kJerk, class V>
inline void flush(const PairSums<V>& s, ResultMemory& out, std::size_t i) {
  add_to(&out.ax[i], s.ax);
  add_to(&out.ay[i], s.ay);
  add_to(&out.az[i], s.az);
  add_to(&out.pot[i], s.pot);
  if constexpr (kJerk) {
    add_to(&out.jx[i], s.jx);
    add_to(&out.jy[i], s.jy);
    add_to(&out.jz[i], s.jz);
  }
}

template <class V>
inline PairSums<V> zero_sums() {
  return {zero<V>(), zero<V>(), zero<V>(), zero<V>(), zero<V>(), zero<V>(), zero<V>()};
}

/// (c_hi - x_hi) + (c_lo - x_lo) for a tile centre c broadcast to the lanes.
inline VF pair_offset(const float* ch, const float* cl, VF xh, VF xl) {
  return (broadcast(ch) - xh) + (broadcast(cl) - xl);
}

/// All j tiles onto the mixed i-vector at lane index i, far tiles on the fast path.
/// Returns the number of far tiles.
template <bool kJerk>
inline std::uint64_t i_vector_mixed(const MixedArgs& a, std::size_t i) {
  const IMemoryMixed& m = *a.i_mem;
  MixedNearSource near{a.j_pos.data(), a.j_vel.data(),
                       {load(&m.xh[i]), load(&m.yh[i]), load(&m.zh[i]),
                        load(&m.xl[i]), load(&m.yl[i]), load(&m.zl[i])},
                       {}};
  if constexpr (kJerk)
    near.iv = {load(&m.vxh[i]), load(&m.vyh[i]), load(&m.vzh[i]),
               load(&m.vxl[i]), load(&m.vyl[i]), load(&m.vzl[i])};
  MixedFarSource far{a.j_rel.data(), a.j_vel_rel.data(), {}, {}, {}, {}, {}, {}};
  const ExclF ex = load_exclude_f(&m.exclude[i]);
  std::int64_t ex_lo = INT64_MAX, ex_hi = -1;
  if (a.with_exclude) excluded_range(&m.exclude[i], VF::W, ex_lo, ex_hi);
  const VF eps2 = splat(static_cast<float>(a.eps2)), three = splat(3.0f);
  const std::size_t nj = a.j_pos.size();
  std::uint64_t n_far = 0;
  for (std::size_t t = 0; t < a.tiles.size(); ++t) {
    const std::size_t j0 = t * kJTile, j1 = std::min(j0 + kJTile, nj);
    const JTileMixed& tile = a.tiles[t];
    const auto& ip = near.ip;
    far.ox = pair_offset(&tile.cxh, &tile.cxl, ip.xh, ip.xl);
    far.oy = pair_offset(&tile.cyh, &tile.cyl, ip.yh, ip.yl);
    far.oz = pair_offset(&tile.czh, &tile.czl, ip.zh, ip.zl);
    const bool excluded_here = ex_hi >= static_cast<std::int64_t>(j0) &&
                               ex_lo < static_cast<std::int64_t>(j1);
    const bool is_far = !excluded_here &&
        all_greater(fmadd(far.oz, far.oz, fmadd(far.oy, far.oy, far.ox * far.ox)),
                    broadcast(&tile.far_r2));
    PairSums<VF> s = zero_sums<VF>();
    if (is_far) {
      if constexpr (kJerk) {
        const auto& iv = near.iv;
        far.ovx = pair_offset(&tile.cvxh, &tile.cvxl, iv.xh, iv.xl);
        far.ovy = pair_offset(&tile.cvyh, &tile.cvyl, iv.yh, iv.yl);
        far.ovz = pair_offset(&tile.cvzh, &tile.cvzl, iv.zh, iv.zl);
      }
      j_loop<kJerk, false>(j0, j1, far, ex, eps2, three, s);
      ++n_far;
    } else {
      j_range<kJerk>(j0, j1, near, ex, ex_lo, ex_hi, eps2, three, s);
    }
    flush<kJerk>(s, *a.out, i);
  }
  return n_far;
}

/// All j-particles onto the double i-vector at lane index i.
template <bool kJerk>
inline void i_vector_double(const DoubleArgs& a, std::size_t i) {
  const IMemoryDouble& m = *a.i_mem;
  DoubleSource src{a.j_pos.data(), a.j_vel.data(), load(&m.x[i]), load(&m.y[i]), load(&m.z[i]),
                   zero<VD>(), zero<VD>(), zero<VD>()};
  if constexpr (kJerk) {
    src.vx = load(&m.vx[i]);
    src.vy = load(&m.vy[i]);
    src.vz = load(&m.vz[i]);
  }
  const ExclD ex = load_exclude_d(&m.exclude[i]);
  std::int64_t ex_lo = INT64_MAX, ex_hi = -1;
  if (a.with_exclude) excluded_range(&m.exclude[i], VD::W, ex_lo, ex_hi);
  const VD eps2 = splat(a.eps2), three = splat(3.0);
  const std::size_t nj = a.j_pos.size();
  for (std::size_t j0 = 0; j0 < nj; j0 += kJTile) {
    PairSums<VD> s = zero_sums<VD>();
    j_range<kJerk>(j0, std::min(j0 + kJTile, nj), src, ex, ex_lo, ex_hi, eps2, three, s);
    flush<kJerk>(s, *a.out, i);
  }
}

std::uint64_t forces_mixed(const MixedArgs& a) {
  std::uint64_t n_far = 0;
  for (std::size_t i = a.i_begin; i < a.i_end; i += VF::W)
    n_far += a.with_jerk ? i_vector_mixed<true>(a, i) : i_vector_mixed<false>(a, i);
  return n_far;
}

void forces_double(const DoubleArgs& a) {
  for (std::size_t i = a.i_begin; i < a.i_end; i += VD::W) {
    if (a.with_jerk)
      i_vector_double<true>(a, i);
    else
      i_vector_double<false>(a, i);
  }
}
