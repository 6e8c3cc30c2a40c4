// Bindings of the treecode (gravpipe::Tree) and its ForceProvider. Arrays arrive validated
// and C-contiguous from gravpipe/tree.py; building and evaluating release the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>

#include "ndarray_views.hpp"
#include "gravpipe/tree.hpp"

namespace nb = nanobind;
using namespace gravpipe;

namespace {

using gravpipe::bindings::CScalars, gravpipe::bindings::CVec3, gravpipe::bindings::Indices;
using gravpipe::bindings::ScalarsOut, gravpipe::bindings::Vec3Out, gravpipe::bindings::span_of;

TreeParams params_from(double eps, double G, double theta, bool quadrupole, double quad_tol, int n_leaf,
                       int n_crit, double alpha, int threads, const std::string& precision,
                       bool local_expansion = true, const std::string& isa = "auto") {
  TreeParams p;
  p.isa = isa;
  p.local_expansion = local_expansion;
  p.precision = parse_precision(precision);
  p.eps = eps, p.G = G, p.theta = theta, p.quadrupole = quadrupole, p.quad_tol = quad_tol;
  p.n_leaf = n_leaf, p.n_crit = n_crit, p.alpha = alpha, p.threads = threads;
  return p;
}

nb::dict stats_dict(const TreeStats& s) {
  nb::dict d;
  d["n_j"] = s.n_j;
  d["n_i"] = s.n_i;
  d["nodes"] = s.nodes;
  d["leaves"] = s.leaves;
  d["groups"] = s.groups;
  d["pp_interactions"] = s.pp_interactions;
  d["pc_interactions"] = s.pc_interactions;
  d["pc_local_interactions"] = s.pc_local_interactions;
  d["mac_tests"] = s.mac_tests;
  d["seconds_sort"] = s.seconds_sort;
  d["seconds_build"] = s.seconds_build;
  d["seconds_moments"] = s.seconds_moments;
  d["seconds_walk"] = s.seconds_walk;
  d["seconds_evaluate"] = s.seconds_evaluate;
  d["seconds_forces"] = s.seconds_forces;
  d["relative_criterion_used"] = s.relative_criterion_used;
  return d;
}

}  // namespace

void bind_tree(nb::module_& m) {
  nb::class_<Tree>(m, "Tree")
      .def("__init__",
           [](Tree* self, CVec3 pos, CScalars mass, double eps, double G, double theta, bool quadrupole,
              double quad_tol, int n_leaf, int n_crit, double alpha, int threads, const std::string& precision,
              bool local_expansion, const std::string& isa) {
             const TreeParams p = params_from(eps, G, theta, quadrupole, quad_tol, n_leaf, n_crit, alpha, threads,
                                              precision, local_expansion, isa);
             nb::gil_scoped_release release;
             new (self) Tree(span_of(pos), span_of(mass), p);
           },
           nb::arg("pos"), nb::arg("mass"), nb::arg("eps"), nb::arg("G"), nb::arg("theta"),
           nb::arg("quadrupole"), nb::arg("quad_tol"), nb::arg("n_leaf"), nb::arg("n_crit"),
           nb::arg("alpha"), nb::arg("threads"), nb::arg("precision"), nb::arg("local_expansion"),
           nb::arg("isa") = "auto")
      .def("self_forces",
           [](Tree& t, Vec3Out acc, ScalarsOut pot) { t.self_forces(span_of(acc), span_of(pot)); },
           nb::arg("acc"), nb::arg("pot"), nb::call_guard<nb::gil_scoped_release>())
      .def("forces_at",
           [](Tree& t, CVec3 pos_i, std::optional<Indices> exclude, Vec3Out acc, ScalarsOut pot) {
             t.forces_at(span_of(pos_i), exclude ? span_of(*exclude) : Span<const std::int64_t>{},
                         span_of(acc), span_of(pot));
           },
           nb::arg("pos_i"), nb::arg("exclude").none(), nb::arg("acc"), nb::arg("pot"),
           nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("n", &Tree::size)
      .def_prop_ro("isa", [](const Tree& t) { return isa_name(t.isa()); })
      .def("stats", [](const Tree& t) { return stats_dict(t.stats()); });

  nb::class_<TreeForceProvider, ForceProvider>(m, "TreeForceProvider")
      .def("__init__",
           [](TreeForceProvider* self, double eps, double G, double theta, bool quadrupole, double quad_tol,
              int n_leaf, int n_crit, double alpha, int threads, const std::string& precision,
              const std::string& isa) {
             new (self) TreeForceProvider(params_from(eps, G, theta, quadrupole, quad_tol, n_leaf, n_crit, alpha,
                                                      threads, precision, true, isa));
           },
           nb::arg("eps"), nb::arg("G"), nb::arg("theta"), nb::arg("quadrupole"),
           nb::arg("quad_tol"), nb::arg("n_leaf"),
           nb::arg("n_crit"), nb::arg("alpha"), nb::arg("threads"), nb::arg("precision"),
           nb::arg("isa") = "auto")
      .def_prop_ro("isa", [](const TreeForceProvider& p) { return isa_name(p.isa()); })
      .def("tree_stats", [](const TreeForceProvider& p) { return stats_dict(p.tree_stats()); });
}
