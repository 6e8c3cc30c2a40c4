// Evaluation of one group's interaction list: gather the list into contiguous arrays
// (the "j-particle write" of the GRAPE treecode: cells and particles become pseudo
// particles of one stream), then run the list kernel of the chosen instruction set.
#include "gravpipe/error.hpp"
#include "gravpipe/tree.hpp"
#include "tree_kernel.hpp"

namespace gravpipe {

namespace {
template <class T>
void clear_arrays(ListArrays<T>& a) {
  for (auto* v : {&a.px, &a.py, &a.pz, &a.pm, &a.cx, &a.cy, &a.cz, &a.cm, &a.qxx, &a.qxy, &a.qxz,
                  &a.qyy, &a.qyz, &a.qzz, &a.qtr})
    v->clear();
}

/// Append particles [b, e) and cells to `a`, coordinates less `o` (0 for double), in T.
template <class T>
void append_particles(ListArrays<T>& a, const SourceView& p, std::int64_t b, std::int64_t e,
                      const double o[3]) {
  for (std::int64_t k = b; k < e; ++k) {
    a.px.push_back(static_cast<T>(p.x[k] - o[0]));
    a.py.push_back(static_cast<T>(p.y[k] - o[1]));
    a.pz.push_back(static_cast<T>(p.z[k] - o[2]));
    a.pm.push_back(static_cast<T>(p.m[k]));
  }
}

template <class T>
void append_cells(ListArrays<T>& a, const std::vector<std::int32_t>& cells, const TreeNodes& t,
                  bool quadrupole, const double o[3]) {
  for (const auto c : cells) {
    a.cx.push_back(static_cast<T>(t.cx[c] - o[0]));
    a.cy.push_back(static_cast<T>(t.cy[c] - o[1]));
    a.cz.push_back(static_cast<T>(t.cz[c] - o[2]));
    a.cm.push_back(static_cast<T>(t.mass[c]));
    if (quadrupole) {
      a.qxx.push_back(static_cast<T>(t.qxx[c])), a.qxy.push_back(static_cast<T>(t.qxy[c]));
      a.qxz.push_back(static_cast<T>(t.qxz[c])), a.qyy.push_back(static_cast<T>(t.qyy[c]));
      a.qyz.push_back(static_cast<T>(t.qyz[c])), a.qzz.push_back(static_cast<T>(t.qzz[c]));
      a.qtr.push_back(static_cast<T>(t.qtr[c]));
    }
  }
}

template <class T>
void gather_into(GatheredList& g, ListArrays<T>& a, const InteractionList& l, const TreeNodes& t,
                 const SourceView& p, bool quadrupole, std::int64_t ex_begin, std::int64_t ex_end,
                 const double o[3]) {
  clear_arrays(a);
  g.pidx.clear();
  auto meets = [&](std::int64_t b, std::int64_t e) { return b < ex_end && ex_begin < e; };
  auto append = [&](std::int64_t b, std::int64_t e) {
    append_particles(a, p, b, e, o);
    for (std::int64_t k = b; k < e; ++k) g.pidx.push_back(k);
  };
  // ranges that may hold an excluded particle first: only they need the masked loop
  for (const auto& [b, e] : l.ranges)
    if (meets(b, e)) append(b, e);
  g.n_masked = g.pidx.size();
  for (const auto& [b, e] : l.ranges)
    if (!meets(b, e)) append(b, e);
  append_cells(a, l.cells, t, quadrupole, o);
}
}  // namespace

void GatheredList::gather(const InteractionList& l, const TreeNodes& t, const SourceView& p,
                          bool quadrupole, std::int64_t ex_begin, std::int64_t ex_end,
                          Precision precision, const double centre[3]) {
  mixed = precision == Precision::Mixed;
  const double origin[3] = {0, 0, 0};
  if (mixed)
    gather_into(*this, f, l, t, p, quadrupole, ex_begin, ex_end, centre);
  else
    gather_into(*this, d, l, t, p, quadrupole, ex_begin, ex_end, origin);
}

void evaluate_group(const GatheredList& l, GroupSinks& s, std::size_t n_i, double eps2,
                    bool quadrupole, Isa isa) {
  for (auto* v : {&s.ax, &s.ay, &s.az, &s.pot}) v->assign(n_i, 0.0);
  const tree_kernel::EvalArgs a{&l, &s, n_i, eps2, quadrupole, l.mixed};
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
