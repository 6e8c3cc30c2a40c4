// Evaluation of one group's interaction list: gather the list into contiguous arrays
// (the "j-particle write" of the GRAPE treecode: cells and particles become pseudo
// particles of one stream), then run the list kernel of the chosen instruction set.
#include "gravpipe/error.hpp"
#include "gravpipe/tree.hpp"
#include "tree_kernel.hpp"

namespace gravpipe {

void GatheredList::gather(const InteractionList& l, const TreeNodes& t, const SourceView& p,
                          bool quadrupole, std::int64_t ex_begin, std::int64_t ex_end) {
  for (auto* v : {&px, &py, &pz, &pm}) v->clear();
  pidx.clear();
  auto append = [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t k = b; k < e; ++k) {
      px.push_back(p.x[k]), py.push_back(p.y[k]), pz.push_back(p.z[k]), pm.push_back(p.m[k]);
      pidx.push_back(k);
    }
  };
  // ranges that may hold an excluded particle first: only they need the masked loop
  for (const auto& [b, e] : l.ranges)
    if (b < ex_end && ex_begin < e) append(b, e);
  n_masked = pm.size();
  for (const auto& [b, e] : l.ranges)
    if (!(b < ex_end && ex_begin < e)) append(b, e);

  const std::size_t nc = l.cells.size();
  for (auto* v : {&cx, &cy, &cz, &cm}) v->resize(nc);
  for (std::size_t k = 0; k < nc; ++k) {
    const auto c = l.cells[k];
    cx[k] = t.cx[c], cy[k] = t.cy[c], cz[k] = t.cz[c], cm[k] = t.mass[c];
  }
  if (quadrupole) {
    for (auto* v : {&qxx, &qxy, &qxz, &qyy, &qyz, &qzz, &qtr}) v->resize(nc);
    for (std::size_t k = 0; k < nc; ++k) {
      const auto c = l.cells[k];
      qxx[k] = t.qxx[c], qxy[k] = t.qxy[c], qxz[k] = t.qxz[c];
      qyy[k] = t.qyy[c], qyz[k] = t.qyz[c], qzz[k] = t.qzz[c], qtr[k] = t.qtr[c];
    }
  }
}

void evaluate_group(const GatheredList& l, GroupSinks& s, std::size_t n_i, double eps2,
                    bool quadrupole, Isa isa) {
  for (auto* v : {&s.ax, &s.ay, &s.az, &s.pot}) v->assign(n_i, 0.0);
  const tree_kernel::EvalArgs a{&l, &s, n_i, eps2, quadrupole};
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
