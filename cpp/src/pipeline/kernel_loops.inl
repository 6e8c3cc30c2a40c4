// The i x j loops of the CPU force kernels, one template compiled once per instruction set.
//
// Included *inside* namespace gravpipe::kernel::<isa>, after that ISA's simd header, which
// provides the lane types VF/VD, ExclF/ExclD and their operations. Standard headers must
// be included by the translation unit before the namespace opens.
//
// Shape of the computation (Nitadori, Makino & Hut 2006; the GRAPE pipelines): W
// i-particles sit in the W lanes of a vector, kIVectors vectors form an i-block, each
// j-particle is broadcast to all lanes and used by every vector of the block, and the
// pairwise interaction (pair_interaction.hpp) accumulates into per-lane sums. Sums run
// over a few tiles of kJTile j-particles (kFlushTiles; one tile in double precision) and
// are then added to float64 accumulators, which bounds the float32 rounding error of long
// sums in mixed precision.
//
// A "j source" turns j-particle index j into the lane differences d = x_j - x_i (and
// dv = v_j - v_i) and the mass; the j-loop is written once over any source.

/// i-vectors per i-block: each j-particle, once broadcast, is used by kIVectors i-vectors,
/// which gives the core that many independent dependency chains per j and shares the
/// broadcasts. The i-memory padding (kIPad) is a whole number of i-blocks.
/// Double precision is bound by the throughput of sqrt and division, not by latency, and
/// loses ~6% on acc+jerk to register pressure with two vectors; it keeps one.
/// AVX-512's 16 float lanes fill kIPad with one vector: the i-block stays the 16
/// i-particles of AVX2's two vectors, so small Hermite blocks are padded no further and
/// the far-tile test sees the same blocks (out-of-order execution overlaps consecutive j,
/// whose only carried dependency is the sums).
constexpr int kIVectors = std::min(2, static_cast<int>(kIPad) / VF::W), kIVectorsDouble = 1;
static_assert(kIPad % (kIVectors * VF::W) == 0 && kIPad % (kIVectorsDouble * VD::W) == 0,
              "kIPad must hold whole i-blocks");

/// Mixed precision: the float32 sums of an i-block run over kFlushTiles j-tiles (128
/// j-particles) before they are added to the float64 results. Fewer flushes cost fewer
/// instructions per interaction; the float rounding of a 128-term sum stays ~1e-7.
constexpr std::size_t kFlushTiles = 4;

/// Mixed precision, near tiles: d from the hi+lo pairs. (hi_j - hi_i) is exact when the
/// two are close (Sterbenz) and otherwise off by half an ulp of the difference itself, so
/// d keeps float32 precision relative to |d| for any translation of the system.
struct MixedNearSource {
  struct Pair3 {
    VF xh, yh, zh, xl, yl, zl;
  };
  static constexpr int kVectors = kIVectors;
  const JPosMixed* jp;
  const JVelMixed* jv;
  Pair3 ip[kIVectors], iv[kIVectors];
  void pos(std::size_t j, int k, VF& dx, VF& dy, VF& dz) const {
    const JPosMixed& r = jp[j];
    dx = (broadcast(&r.xh) - ip[k].xh) + (broadcast(&r.xl) - ip[k].xl);
    dy = (broadcast(&r.yh) - ip[k].yh) + (broadcast(&r.yl) - ip[k].yl);
    dz = (broadcast(&r.zh) - ip[k].zh) + (broadcast(&r.zl) - ip[k].zl);
  }
  void vel(std::size_t j, int k, VF& dx, VF& dy, VF& dz) const {
    const JVelMixed& r = jv[j];
    dx = (broadcast(&r.vxh) - iv[k].xh) + (broadcast(&r.vxl) - iv[k].xl);
    dy = (broadcast(&r.vyh) - iv[k].yh) + (broadcast(&r.vyl) - iv[k].yl);
    dz = (broadcast(&r.vzh) - iv[k].zh) + (broadcast(&r.vzl) - iv[k].zl);
  }
  VF mass(std::size_t j) const { return broadcast(&jp[j].m); }
};

/// Mixed precision, far tiles: d = (x_j - c) + (c - x_i), one add per coordinate, with
/// (c - x_i) computed once per tile from the hi+lo pairs (see j_memory.hpp, kFarRadii).
struct MixedFarSource {
  struct Offset {
    VF x, y, z;
  };
  static constexpr int kVectors = kIVectors;
  const JRelMixed* jr;
  const JVelRelMixed* jvr;
  Offset o[kIVectors], ov[kIVectors];
  void pos(std::size_t j, int k, VF& dx, VF& dy, VF& dz) const {
    const JRelMixed& r = jr[j];
    dx = broadcast(&r.xr) + o[k].x;
    dy = broadcast(&r.yr) + o[k].y;
    dz = broadcast(&r.zr) + o[k].z;
  }
  void vel(std::size_t j, int k, VF& dx, VF& dy, VF& dz) const {
    const JVelRelMixed& r = jvr[j];
    dx = broadcast(&r.vxr) + ov[k].x;
    dy = broadcast(&r.vyr) + ov[k].y;
    dz = broadcast(&r.vzr) + ov[k].z;
  }
  VF mass(std::size_t j) const { return broadcast(&jr[j].m); }
};

/// Double precision: float64 throughout.
struct DoubleSource {
  struct Vec3 {
    VD x, y, z;
  };
  static constexpr int kVectors = kIVectorsDouble;
  const JPosDouble* jp;
  const JVelDouble* jv;
  Vec3 ip[kIVectorsDouble], iv[kIVectorsDouble];
  void pos(std::size_t j, int k, VD& dx, VD& dy, VD& dz) const {
    dx = broadcast(&jp[j].x) - ip[k].x;
    dy = broadcast(&jp[j].y) - ip[k].y;
    dz = broadcast(&jp[j].z) - ip[k].z;
  }
  void vel(std::size_t j, int k, VD& dx, VD& dy, VD& dz) const {
    dx = broadcast(&jv[j].vx) - iv[k].x;
    dy = broadcast(&jv[j].vy) - iv[k].y;
    dz = broadcast(&jv[j].vz) - iv[k].z;
  }
  VD mass(std::size_t j) const { return broadcast(&jp[j].m); }
};

/// rsqrt_scaled(x) of the lane types returns S / sqrt(x) for a power of two
/// S = rsqrt_scale(V{}) (2 for the float Newton step, which so saves its multiply by 1/2).
/// add_pair is fed rinv' = S rinv and three' = 3 / S^2: its pot sums then carry a factor S
/// and its acc and jerk sums S^3, which flush() takes out exactly in float64.
template <class V>
inline V three_scaled() {
  const double S = rsqrt_scale(V{});
  if constexpr (std::is_same_v<V, VF>)
    return splat(static_cast<float>(3 / (S * S)));
  else
    return splat(3 / (S * S));
}

/// Accumulate j in [j0, j1) from `src` onto the sums of its Source::kVectors i-vectors.
template <bool kJerk, bool kExclude, class V, class Excl, class Source>
inline void j_loop(std::size_t j0, std::size_t j1, const Source& src, const Excl* ex, V eps2,
                   V three, PairSums<V>* s) {
  for (std::size_t j = j0; j < j1; ++j) {
    const V mj = src.mass(j);
#pragma GCC unroll 4
    for (int k = 0; k < Source::kVectors; ++k) {
      V dx, dy, dz;
      src.pos(j, k, dx, dy, dz);
      V dvx = zero<V>(), dvy = zero<V>(), dvz = zero<V>();
      if constexpr (kJerk) src.vel(j, k, dvx, dvy, dvz);
      const V r2 = softened_r2(dx, dy, dz, eps2);
      V rinv;
      if constexpr (kExclude)
        rinv = rsqrt_scaled_excluding(r2, ex[k], static_cast<std::int64_t>(j));
      else
        rinv = rsqrt_scaled(r2);
      add_pair<kJerk>(s[k], dx, dy, dz, dvx, dvy, dvz, mj, rinv, three);
    }
  }
}

/// The j indices excluded by an i-block, sorted, with a cursor for tiles visited in
/// increasing j: a tile takes the masked loop (and, mixed, the near path) only if it holds
/// one of them. One inclusive [lo, hi] range instead sent every tile between the block's
/// extreme exclusions down the near path, which doubled the near tiles when the j-set is
/// in another curve order than the i-set (a rank's j-slice in the j-parallel split).
struct ExcludedSet {
  static constexpr int kCapacity = 64;  // >= the lanes of an i-block on every ISA
  std::int64_t index[kCapacity];
  int count = 0, next = 0;
  ExcludedSet() = default;
  ExcludedSet(const std::int64_t* ex, int n) {
    for (int k = 0; k < n; ++k)
      if (ex[k] >= 0) index[count++] = ex[k];
    std::sort(index, index + count);
  }
  /// Whether [j0, j1) holds an excluded index; j0 never decreases between calls.
  bool meets(std::size_t j0, std::size_t j1) {
    while (next < count && index[next] < static_cast<std::int64_t>(j0)) ++next;
    return next < count && index[next] < static_cast<std::int64_t>(j1);
  }
};
static_assert(kIVectors * VF::W <= ExcludedSet::kCapacity && kIVectorsDouble * VD::W <= ExcludedSet::kCapacity,
              "an i-block's exclusions must fit ExcludedSet");

/// Run j in [j0, j1) through the masked loop only if an excluded index falls inside.
template <bool kJerk, class V, class Excl, class Source>
inline void j_range(std::size_t j0, std::size_t j1, const Source& src, const Excl* ex,
                    ExcludedSet& exr, V eps2, V three, PairSums<V>* s) {
  if (exr.meets(j0, j1))
    j_loop<kJerk, true>(j0, j1, src, ex, eps2, three, s);
  else
    j_loop<kJerk, false>(j0, j1, src, ex, eps2, three, s);
}

/// out[i..) += the sums, as float64, times the exact powers of two that undo rsqrt_scaled.
template <bool kJerk, class V>
inline void flush(const PairSums<V>& s, ResultMemory& out, std::size_t i) {
  const double S = rsqrt_scale(V{}), S3 = S * S * S;
  add_to(&out.ax[i], s.ax, 1 / S3);
  add_to(&out.ay[i], s.ay, 1 / S3);
  add_to(&out.az[i], s.az, 1 / S3);
  add_to(&out.pot[i], s.pot, 1 / S);
  if constexpr (kJerk) {
    add_to(&out.jx[i], s.jx, 1 / S3);
    add_to(&out.jy[i], s.jy, 1 / S3);
    add_to(&out.jz[i], s.jz, 1 / S3);
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

/// All j tiles onto the mixed i-block at lane index i (kIVectors i-vectors), tiles far from
/// every i-vector of the block on the fast path. Returns the number of (i-vector, tile)
/// pairs that took the fast path.
template <bool kJerk>
inline std::uint64_t i_block_mixed(const MixedArgs& a, std::size_t i0) {
  const IMemoryMixed& m = *a.i_mem;
  MixedNearSource near{a.j_pos.data(), a.j_vel.data(), {}, {}};
  MixedFarSource far{a.j_rel.data(), a.j_vel_rel.data(), {}, {}};
  ExclF ex[kIVectors];
  for (int k = 0; k < kIVectors; ++k) {
    const std::size_t i = i0 + k * VF::W;
    near.ip[k] = {load(&m.xh[i]), load(&m.yh[i]), load(&m.zh[i]),
                  load(&m.xl[i]), load(&m.yl[i]), load(&m.zl[i])};
    if constexpr (kJerk)
      near.iv[k] = {load(&m.vxh[i]), load(&m.vyh[i]), load(&m.vzh[i]),
                    load(&m.vxl[i]), load(&m.vyl[i]), load(&m.vzl[i])};
    ex[k] = load_exclude_f(&m.exclude[i]);
  }
  ExcludedSet exr;
  if (a.with_exclude) exr = ExcludedSet(&m.exclude[i0], kIVectors * VF::W);
  const VF eps2 = splat(static_cast<float>(a.eps2)), three = three_scaled<VF>();
  const std::size_t nj = a.j_pos.size();
  std::uint64_t n_far = 0;
  PairSums<VF> s[kIVectors];
  for (auto& sk : s) sk = zero_sums<VF>();
  for (std::size_t t = 0; t < a.tiles.size(); ++t) {
    const std::size_t j0 = t * kJTile, j1 = std::min(j0 + kJTile, nj);
    const JTileMixed& tile = a.tiles[t];
    bool is_far = !exr.meets(j0, j1);
    for (int k = 0; k < kIVectors; ++k) {
      const auto& ip = near.ip[k];
      auto& o = far.o[k];
      o.x = pair_offset(&tile.cxh, &tile.cxl, ip.xh, ip.xl);
      o.y = pair_offset(&tile.cyh, &tile.cyl, ip.yh, ip.yl);
      o.z = pair_offset(&tile.czh, &tile.czl, ip.zh, ip.zl);
      is_far = is_far && all_greater(fmadd(o.z, o.z, fmadd(o.y, o.y, o.x * o.x)),
                                     broadcast(&tile.far_r2));
    }
    if (is_far) {
      if constexpr (kJerk)
        for (int k = 0; k < kIVectors; ++k) {
          const auto& iv = near.iv[k];
          far.ov[k] = {pair_offset(&tile.cvxh, &tile.cvxl, iv.xh, iv.xl),
                       pair_offset(&tile.cvyh, &tile.cvyl, iv.yh, iv.yl),
                       pair_offset(&tile.cvzh, &tile.cvzl, iv.zh, iv.zl)};
        }
      j_loop<kJerk, false>(j0, j1, far, ex, eps2, three, s);
      n_far += kIVectors;
    } else {
      j_range<kJerk>(j0, j1, near, ex, exr, eps2, three, s);
    }
    if ((t + 1) % kFlushTiles == 0 || t + 1 == a.tiles.size()) {
      for (int k = 0; k < kIVectors; ++k) flush<kJerk>(s[k], *a.out, i0 + k * VF::W);
      for (auto& sk : s) sk = zero_sums<VF>();
    }
  }
  return n_far;
}

/// All j-particles onto the double i-block at lane index i0.
template <bool kJerk>
inline void i_block_double(const DoubleArgs& a, std::size_t i0) {
  const IMemoryDouble& m = *a.i_mem;
  DoubleSource src{a.j_pos.data(), a.j_vel.data(), {}, {}};
  ExclD ex[kIVectorsDouble];
  for (int k = 0; k < kIVectorsDouble; ++k) {
    const std::size_t i = i0 + k * VD::W;
    src.ip[k] = {load(&m.x[i]), load(&m.y[i]), load(&m.z[i])};
    src.iv[k] = {zero<VD>(), zero<VD>(), zero<VD>()};
    if constexpr (kJerk) src.iv[k] = {load(&m.vx[i]), load(&m.vy[i]), load(&m.vz[i])};
    ex[k] = load_exclude_d(&m.exclude[i]);
  }
  ExcludedSet exr;
  if (a.with_exclude) exr = ExcludedSet(&m.exclude[i0], kIVectorsDouble * VD::W);
  const VD eps2 = splat(a.eps2), three = three_scaled<VD>();
  const std::size_t nj = a.j_pos.size();
  for (std::size_t j0 = 0; j0 < nj; j0 += kJTile) {
    PairSums<VD> s[kIVectorsDouble];
    for (auto& sk : s) sk = zero_sums<VD>();
    j_range<kJerk>(j0, std::min(j0 + kJTile, nj), src, ex, exr, eps2, three, s);
    for (int k = 0; k < kIVectorsDouble; ++k) flush<kJerk>(s[k], *a.out, i0 + k * VD::W);
  }
}

std::uint64_t forces_mixed(const MixedArgs& a) {
  std::uint64_t n_far = 0;
  for (std::size_t i = a.i_begin; i < a.i_end; i += kIVectors * VF::W)
    n_far += a.with_jerk ? i_block_mixed<true>(a, i) : i_block_mixed<false>(a, i);
  return n_far;
}

void forces_double(const DoubleArgs& a) {
  for (std::size_t i = a.i_begin; i < a.i_end; i += kIVectorsDouble * VD::W) {
    if (a.with_jerk)
      i_block_double<true>(a, i);
    else
      i_block_double<false>(a, i);
  }
}
