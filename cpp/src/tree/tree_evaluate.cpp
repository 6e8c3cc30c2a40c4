// Evaluation of one group's interaction list: gather the list into contiguous arrays
// (the "j-particle write" of the GRAPE treecode: cells and particles become pseudo
// particles of one stream), then run the list kernel of the chosen instruction set.
#include <algorithm>

#include "gravpipe/error.hpp"
#include "gravpipe/paged_cells.hpp"
#include "gravpipe/paged_particles.hpp"
#include "gravpipe/tree.hpp"
#include "paged_graft_view.hpp"
#include "tree_kernel.hpp"
#include "tree_runs.hpp"

namespace gravpipe {

namespace {
/// Write the block's particles to out[0, size), coordinates less `o` (0 for double), in T.
template <class T>
void put_particles(ListParticle<T>* out, const ParticleBlock& p, const double o[3]) {
  for (std::int64_t k = p.begin(); k < p.end(); ++k, ++out)
    *out = {static_cast<T>(p.x(k) - o[0]), static_cast<T>(p.y(k) - o[1]),
            static_cast<T>(p.z(k) - o[2]), static_cast<T>(p.m(k))};
}

/// Particles [b, e) of `p` to out[0, e - b), as put_particles, in pieces of kSourcePiece,
/// each handed back at once: a paged accessor then holds one piece's copy at a time (32 KiB
/// at most), not the copies of every range of a run's lists (PagedTree::copy_allowance).
template <class T, class Particles>
void put_range(ListParticle<T>* out, const Particles& p, std::int64_t b, std::int64_t e, const double o[3]) {
  for (std::int64_t s = b; s < e; s += kSourcePiece) {
    const ParticleBlock piece = p.block(s, std::min(e, s + kSourcePiece));
    put_particles(out + (s - b), piece, o);
    p.done_with(piece);
  }
}

template <class T>
ListParticle<T> monopole(const CellTerms& c, const double o[3]) {
  return {static_cast<T>(c.cx - o[0]), static_cast<T>(c.cy - o[1]), static_cast<T>(c.cz - o[2]), static_cast<T>(c.m)};
}

template <class T>
ListCell<T> quadrupole_cell(const CellTerms& c, const double o[3]) {
  const auto f = [](double v) { return static_cast<T>(v); };
  return {f(c.cx - o[0]), f(c.cy - o[1]), f(c.cz - o[2]), f(c.m), f(c.qxx), f(c.qxy),
          f(c.qxz),       f(c.qyy),       f(c.qyz),       f(c.qzz), f(c.qtr), T(0)};
}

template <class T, class Particles, class Cells>
void gather_into(GatheredList& g, ListArrays<T>& a, const InteractionList& l, const Cells& t,
                 const Particles& p, bool quadrupole, std::int64_t ex_begin, std::int64_t ex_end,
                 const double o[3]) {
  auto meets = [&](std::int64_t b, std::int64_t e) { return b < ex_end && ex_begin < e; };
  std::size_t n_masked = 0, n_part = 0;
  for (const auto& [b, e] : l.ranges) {
    n_part += static_cast<std::size_t>(e - b);
    if (meets(b, e)) n_masked += static_cast<std::size_t>(e - b);
  }
  const auto cells = l.cells(), far = l.far_cells();
  const std::size_t n_cells = cells.size(), n_far = far.size();
  a.p.resize(n_part + n_far + (quadrupole ? 0 : n_cells));
  a.c.resize(quadrupole ? n_cells : 0);
  g.pidx.resize(n_masked);
  // ranges that may hold an excluded particle first: only they need the masked loop
  std::size_t at = 0;
  for (const auto& [b, e] : l.ranges)
    if (meets(b, e)) {
      put_range(&a.p[at], p, b, e, o);
      for (std::int64_t k = b; k < e; ++k) g.pidx[at++] = k;
    }
  for (const auto& [b, e] : l.ranges)
    if (!meets(b, e)) {
      put_range(&a.p[at], p, b, e, o);
      at += static_cast<std::size_t>(e - b);
    }
  for (std::size_t k = 0; k < n_cells; ++k) {
    if (quadrupole)
      a.c[k] = quadrupole_cell<T>(t.terms(cells[k]), o);
    else
      a.p[at++] = monopole<T>(t.terms(cells[k]), o);
  }
  for (const auto c : far) a.p[at++] = monopole<T>(t.terms(c), o);
  g.n_masked = n_masked;
  g.n_source_particles = n_part;
  g.n_source_cells = n_cells + n_far;
}
}  // namespace

template <class Particles, class Cells>
void GatheredList::gather(const InteractionList& l, const Cells& t, const Particles& p,
                          bool quadrupole, std::int64_t ex_begin, std::int64_t ex_end,
                          Precision precision, const double centre[3]) {
  mixed = precision == Precision::Mixed;
  const double origin[3] = {0, 0, 0};
  if (mixed)
    gather_into(*this, f, l, t, p, quadrupole, ex_begin, ex_end, centre);
  else
    gather_into(*this, d, l, t, p, quadrupole, ex_begin, ex_end, origin);
}

template void GatheredList::gather<InCoreParticles, InCoreCells>(const InteractionList&, const InCoreCells&,
                                                                const InCoreParticles&, bool, std::int64_t,
                                                                std::int64_t, Precision, const double[3]);
template void GatheredList::gather<PagedParticles, PagedCellReader>(const InteractionList&, const PagedCellReader&,
                                                                   const PagedParticles&, bool, std::int64_t,
                                                                   std::int64_t, Precision, const double[3]);
template void GatheredList::gather<GraftedPagedParticles, GraftedPagedCellReader>(
    const InteractionList&, const GraftedPagedCellReader&, const GraftedPagedParticles&, bool, std::int64_t,
    std::int64_t, Precision, const double[3]);

void evaluate_group(const GatheredList& l, GroupSinks& s, std::size_t n_i, double eps2, Isa isa) {
  for (auto* v : {&s.ax, &s.ay, &s.az, &s.pot}) v->assign(n_i, 0.0);
  const tree_kernel::EvalArgs a{&l, &s, n_i, eps2, l.mixed};
#if defined(GRAVPIPE_HAVE_AVX512_KERNELS)
  if (isa == Isa::Avx512) {
    tree_kernel::avx512::evaluate(a);
    return;
  }
#endif
#if defined(GRAVPIPE_HAVE_AVX2_KERNELS)
  if (isa == Isa::Avx2) {
    tree_kernel::avx2::evaluate(a);
    return;
  }
#endif
  (void)isa;
  tree_kernel::generic::evaluate(a);
}

}  // namespace gravpipe
