// Bindings of the treecode (gravpipe::Tree) and its ForceProvider. Arrays arrive validated
// and C-contiguous from gravpipe/tree.py; building and evaluating release the GIL.
#include <memory>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <optional>

#include "gravpipe/curve_order.hpp"
#include "gravpipe/error.hpp"
#include "gravpipe/paged_domain_tree.hpp"
#include "gravpipe/paged_kick.hpp"
#include "gravpipe/paged_tree.hpp"
#include "gravpipe/tree.hpp"
#include "gravpipe/tree_essential.hpp"
#include "ndarray_views.hpp"
#include "store_box.hpp"
#include "streamed_build_box.hpp"

namespace nb = nanobind;
using namespace gravpipe;

namespace {

using gravpipe::bindings::CScalars, gravpipe::bindings::CVec3, gravpipe::bindings::Indices;
using gravpipe::bindings::ScalarsOut, gravpipe::bindings::Vec3Out, gravpipe::bindings::span_of;
using gravpipe::bindings::to_numpy;

TreeParams params_from(double eps, double G, double theta, bool quadrupole, double quad_tol, int n_leaf,
                       int n_crit, double alpha, int threads, const std::string& precision,
                       bool local_expansion = true, const std::string& isa = "auto",
                       const std::string& backend = "cpu", int device = 0) {
  TreeParams p;
  p.backend = backend, p.device = device;
  p.isa = isa;
  p.local_expansion = local_expansion;
  p.precision = parse_precision(precision);
  p.eps = eps, p.G = G, p.theta = theta, p.quadrupole = quadrupole, p.quad_tol = quad_tol;
  p.n_leaf = n_leaf, p.n_crit = n_crit, p.alpha = alpha, p.threads = threads;
  return p;
}

}  // namespace

nb::dict bindings::tree_stats_dict(const TreeStats& s) {
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

namespace {

using bindings::tree_stats_dict;

using Rows = nb::ndarray<const double, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using LinkRows = nb::ndarray<const std::int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using Counts = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using CostOut = nb::ndarray<std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Box = nb::ndarray<const double, nb::shape<7>, nb::c_contig, nb::device::cpu>;
using Boxes = nb::ndarray<const double, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

void check_columns(std::size_t got, std::size_t want, const char* name) {
  if (got != want) throw InputError(std::string(name) + ": expected " + std::to_string(want) + " columns");
}
using Corner = nb::ndarray<const double, nb::shape<3>, nb::c_contig, nb::device::cpu>;

/// A box as 7 float64: lo (3), hi (3), a_min.
DomainBox box_from(const double* b) {
  DomainBox d;
  for (int a = 0; a < 3; ++a) d.lo[a] = b[a], d.hi[a] = b[3 + a];
  d.a_min = b[6];
  return d;
}
DomainBox box_from(const Box& b) { return box_from(b.data()); }

/// A domain's boxes, (k, 7) float64 rows as box_from reads them.
std::vector<DomainBox> boxes_from(const Boxes& b) {
  check_columns(b.shape(1), 7, "domain");
  std::vector<DomainBox> out(b.shape(0));
  for (std::size_t k = 0; k < out.size(); ++k) out[k] = box_from(b.data() + 7 * k);
  return out;
}

/// The out-of-core tree with the store it reads (StoreBound).
using PagedTreeBox = bindings::StoreBound<PagedTree>;
using PagedDomainTreeBox = bindings::StoreBound<PagedDomainTree>;

nb::object boxes_to_numpy(const std::vector<DomainBox>& boxes) {
  std::vector<double> rows;
  for (const DomainBox& d : boxes) rows.insert(rows.end(), {d.lo[0], d.lo[1], d.lo[2], d.hi[0], d.hi[1], d.hi[2], d.a_min});
  return to_numpy(std::move(rows), {boxes.size(), std::size_t{7}});
}

nb::tuple piece_to_numpy(EssentialPiece&& p) {
  const std::size_t nc = p.n_cells(), np = p.n_particles();
  return nb::make_tuple(to_numpy(std::move(p.cells), {nc, std::size_t{kPieceCellDoubles}}),
                        to_numpy(std::move(p.links), {nc, std::size_t{kPieceCellInts}}),
                        to_numpy(std::move(p.particles), {np, std::size_t{kPieceParticleDoubles}}));
}


void bind_domain_tree(nb::module_& m) {
  nb::class_<DomainTree>(m, "DomainTree")
      .def("__init__",
           [](DomainTree* self, CVec3 pos, CScalars mass, double eps, double G, double theta, bool quadrupole,
              double quad_tol, int n_leaf, int n_crit, double alpha, int threads, const std::string& precision,
              const std::string& isa, std::optional<Corner> frame_lo, std::optional<Corner> frame_hi) {
             const TreeParams p = params_from(eps, G, theta, quadrupole, quad_tol, n_leaf, n_crit, alpha, threads,
                                              precision, true, isa);
             if (frame_lo.has_value() != frame_hi.has_value())
               throw InputError("DomainTree: frame_lo and frame_hi go together");
             std::optional<CurveBox> frame;
             if (frame_lo) frame = curve_box(frame_lo->data(), frame_hi->data());
             nb::gil_scoped_release release;
             new (self) DomainTree(span_of(pos), span_of(mass), p, frame ? &*frame : nullptr);
           },
           nb::arg("pos"), nb::arg("mass"), nb::arg("eps"), nb::arg("G"), nb::arg("theta"), nb::arg("quadrupole"),
           nb::arg("quad_tol"), nb::arg("n_leaf"), nb::arg("n_crit"), nb::arg("alpha"), nb::arg("threads"),
           nb::arg("precision"), nb::arg("isa") = "auto", nb::arg("frame_lo").none() = nb::none(),
           nb::arg("frame_hi").none() = nb::none(),
           "frame_lo, frame_hi (3,): the global box whose cube the octree divides (every rank the same)")
      .def("domain",
           [](const DomainTree& t) { return boxes_to_numpy(t.domain()); },
           "This rank's domain: float64 (k, 7), each row a box: lo (3), hi (3), smallest old |a| (0: none); "
           "empty boxes (lo > hi) pad it.")
      .def("export_for",
           [](const DomainTree& t, Boxes boxes) {
             const std::vector<DomainBox> d = boxes_from(boxes);
             EssentialPiece p;
             {
               nb::gil_scoped_release release;
               p = t.export_for({d.data(), d.size()});
             }
             return piece_to_numpy(std::move(p));
           },
           nb::arg("domain"),
           "The locally essential piece for a receiver's domain (k, 7): (cells (c,19) float64, links (c,4) int64, "
           "particles (p,4) float64 x y z m).")
      .def("graft",
           [](DomainTree& t, Rows cells, LinkRows links, Rows particles, Counts cells_per_piece,
              Counts particles_per_piece) {
             check_columns(cells.shape(1), kPieceCellDoubles, "cells");
             check_columns(links.shape(1), kPieceCellInts, "links");
             check_columns(particles.shape(1), kPieceParticleDoubles, "particles");
             nb::gil_scoped_release release;
             t.graft({span_of(cells), span_of(links), span_of(particles), span_of(cells_per_piece),
                      span_of(particles_per_piece)});
           },
           nb::arg("cells"), nb::arg("links"), nb::arg("particles"), nb::arg("cells_per_piece"),
           nb::arg("particles_per_piece"),
           "Graft the received pieces, concatenated in sender order with their sizes per sender.")
      .def("forces",
           [](DomainTree& t, Vec3Out acc, ScalarsOut pot, std::optional<CostOut> cost) {
             t.forces(span_of(acc), span_of(pot), span_of(cost));
           },
           nb::arg("acc"), nb::arg("pot"), nb::arg("cost").none(), nb::call_guard<nb::gil_scoped_release>(),
           "Self-gravity of the own particles (caller order) and each one's interactions (cost).")
      .def("set_old_accelerations",
           [](DomainTree& t, CScalars a) { t.set_old_accelerations(span_of(a)); }, nb::arg("a_abs"))
      .def_prop_ro("n", &DomainTree::size)
      .def_prop_ro("nodes", [](const DomainTree& t) { return t.grafted_nodes().count(); })
      .def_prop_ro("isa", [](const DomainTree& t) { return isa_name(t.isa()); })
      .def("stats", [](const DomainTree& t) { return tree_stats_dict(t.stats()); });
}

void bind_paged_domain_tree(nb::module_& m) {
  nb::class_<PagedDomainTreeBox>(m, "PagedDomainTree")
      .def("__init__",
           [](PagedDomainTreeBox* self, bindings::StoreBox& box, Box own, double eps, double G, double theta,
              bool quadrupole, double quad_tol, int n_leaf, int n_crit, int threads, const std::string& precision,
              const std::string& isa, std::uint64_t keep_free) {
             const TreeParams p = params_from(eps, G, theta, quadrupole, quad_tol, n_leaf, n_crit, 0.0, threads,
                                              precision, true, isa);
             const DomainBox d = box_from(own);
             nb::gil_scoped_release release;
             new (self) PagedDomainTreeBox(box, p, keep_free, d);
           },
           nb::arg("store"), nb::arg("own"), nb::arg("eps"), nb::arg("G"), nb::arg("theta"), nb::arg("quadrupole"),
           nb::arg("quad_tol"), nb::arg("n_leaf"), nb::arg("n_crit"), nb::arg("threads"), nb::arg("precision"),
           nb::arg("isa") = "auto", nb::arg("keep_free") = 0, nb::keep_alive<1, 2>(),
           "The locally essential tree of a rank out of core: the store's particles sorted in the ranks' shared "
           "frame (store_sort_by_curve's frame) with their keys; own (7,): the box of their positions (lo, hi, 0).")
      .def("domain", [](const PagedDomainTreeBox& t) { return boxes_to_numpy(t.get().domain()); })
      .def("export_for",
           [](const PagedDomainTreeBox& t, Boxes boxes) {
             const std::vector<DomainBox> d = boxes_from(boxes);
             EssentialPiece p;
             {
               nb::gil_scoped_release release;
               p = t.get().export_for({d.data(), d.size()});
             }
             return piece_to_numpy(std::move(p));
           },
           nb::arg("domain"), "The piece for a receiver's domain (k, 7), as DomainTree.export_for.")
      .def("export_size",
           [](const PagedDomainTreeBox& t, Boxes boxes) {
             const std::vector<DomainBox> d = boxes_from(boxes);
             nb::gil_scoped_release release;
             const PieceSize size = t.get().export_size({d.data(), d.size()});
             return std::make_tuple(size.cells, size.particles, size.bytes());
           },
           nb::arg("domain"), "The size of export_for's piece, without making it: (cells, particles, bytes).")
      .def("graft",
           [](PagedDomainTreeBox& t, Rows cells, LinkRows links, Rows particles, Counts cells_per_piece,
              Counts particles_per_piece) {
             check_columns(cells.shape(1), kPieceCellDoubles, "cells");
             check_columns(links.shape(1), kPieceCellInts, "links");
             check_columns(particles.shape(1), kPieceParticleDoubles, "particles");
             nb::gil_scoped_release release;
             t.get().graft({span_of(cells), span_of(links), span_of(particles), span_of(cells_per_piece),
                            span_of(particles_per_piece)});
           },
           nb::arg("cells"), nb::arg("links"), nb::arg("particles"), nb::arg("cells_per_piece"),
           nb::arg("particles_per_piece"), "Graft the received pieces (in sender order), as DomainTree.graft.")
      .def("forces",
           [](PagedDomainTreeBox& t, const std::string& acc_field, const std::string& pot_field,
              const std::string& cost_field, std::optional<double> kick_h, double time) {
             nb::gil_scoped_release release;
             PagedDomainTree& tree = t.get();
             // the closing kick vel += h acc rides on the walk; without one the forces are
             // only checked finite (a run's first evaluation)
             PagedClosingKick kick(t.store(), kick_h.value_or(0.0), time, tree.tree().threads(), 0, 0,
                                   kick_h.has_value());
             tree.forces(acc_field, pot_field, cost_field,
                         [&kick](std::int64_t b, std::int64_t n, const double* acc, const double* pot) {
                           kick(b, n, acc, pot);
                         });
             kick.throw_if_bad();
           },
           nb::arg("acc_field") = "acc", nb::arg("pot_field") = "pot", nb::arg("cost_field") = "",
           nb::arg("kick_h").none() = nb::none(), nb::arg("time") = 0.0,
           "Self-gravity of the store's particles into its fields (cost_field: int64 interactions a particle); "
           "kick_h: vel += kick_h acc as each run's results come (IntegrationError naming a particle whose "
           "force is not finite, at `time`).")
      .def_prop_ro("imported_particles", [](const PagedDomainTreeBox& t) { return t.get().imported_particles(); })
      .def_prop_ro("top_cells", [](const PagedDomainTreeBox& t) { return t.get().top_cells(); })
      .def_prop_ro("graft_bytes", [](const PagedDomainTreeBox& t) { return t.get().graft_bytes(); })
      .def("hold_beside", [](PagedDomainTreeBox& t, std::uint64_t bytes) { return t.get().hold_beside(bytes); },
           nb::arg("bytes"),
           "Charge bytes of the budget for arrays held beside the tree (pieces in transit), the cell cache giving "
           "frames back; replaces the last such charge (0: none). Returns the bytes charged (less where the cell "
           "cache is at its fewest frames; the graft's own charge comes first).")
      .def_prop_ro("held_beside", [](const PagedDomainTreeBox& t) { return t.get().held_beside(); })
      .def_prop_ro("cell_count", [](const PagedDomainTreeBox& t) { return t.get().tree().cell_count(); })
      .def_prop_ro("cell_cache_bytes", [](const PagedDomainTreeBox& t) { return t.get().tree().cell_cache_bytes(); })
      .def("stats", [](const PagedDomainTreeBox& t) { return tree_stats_dict(t.get().stats()); });
}

}  // namespace

void bind_tree(nb::module_& m) {
  bind_paged_domain_tree(m);
  nb::class_<Tree>(m, "Tree")
      .def("__init__",
           [](Tree* self, CVec3 pos, CScalars mass, double eps, double G, double theta, bool quadrupole,
              double quad_tol, int n_leaf, int n_crit, double alpha, int threads, const std::string& precision,
              bool local_expansion, const std::string& isa,
              std::optional<std::tuple<std::array<double, 3>, double>> frame, const std::string& backend,
              int device) {
             const TreeParams p = params_from(eps, G, theta, quadrupole, quad_tol, n_leaf, n_crit, alpha, threads,
                                              precision, local_expansion, isa, backend, device);
             CurveBox box;
             if (frame) {
               const auto& [lo, scale] = *frame;
               std::copy(lo.begin(), lo.end(), box.lo);
               box.scale = scale;
               if (!(scale > 0) || !std::isfinite(scale) || !std::isfinite(lo[0]) || !std::isfinite(lo[1]) ||
                   !std::isfinite(lo[2]))
                 throw InputError("tree frame: the corner must be finite and the scale > 0");
             }
             nb::gil_scoped_release release;
             new (self) Tree(span_of(pos), span_of(mass), p, frame ? &box : nullptr);
           },
           nb::arg("pos"), nb::arg("mass"), nb::arg("eps"), nb::arg("G"), nb::arg("theta"),
           nb::arg("quadrupole"), nb::arg("quad_tol"), nb::arg("n_leaf"), nb::arg("n_crit"),
           nb::arg("alpha"), nb::arg("threads"), nb::arg("precision"), nb::arg("local_expansion"),
           nb::arg("isa") = "auto", nb::arg("frame").none() = nb::none(), nb::arg("backend") = "cpu",
           nb::arg("device") = 0)
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
      .def_prop_ro("device_name", &Tree::device_name, "The GPU the lists run on (backend 'cuda'), else ''.")
      .def("stats", [](const Tree& t) { return tree_stats_dict(t.stats()); });

  nb::class_<bindings::StreamedBuildBox>(m, "StreamedTreeBuild")
      .def("__init__",
           [](bindings::StreamedBuildBox* self, bindings::StoreBox& box, double eps, double G, double theta,
              bool quadrupole, double quad_tol, int n_leaf, int n_crit, int threads) {
             const TreeParams p = params_from(eps, G, theta, quadrupole, quad_tol, n_leaf, n_crit, 0.0, threads,
                                              "double", false, "auto", "cpu");
             new (self) bindings::StreamedBuildBox(box, p);
           },
           nb::arg("store"), nb::arg("eps"), nb::arg("G"), nb::arg("theta"), nb::arg("quadrupole"),
           nb::arg("quad_tol"), nb::arg("n_leaf"), nb::arg("n_crit"), nb::arg("threads"), nb::keep_alive<1, 2>(),
           "A build of the out-of-core tree's cells that rides on the next sort (store_sort_by_curve's tree): "
           "complete once the sort has written every particle; PagedTree(built=...) takes its cells.")
      .def_prop_ro("complete", [](const bindings::StreamedBuildBox& b) { return b.get().complete(); })
      .def_prop_ro("declined", [](const bindings::StreamedBuildBox& b) { return b.get().declined(); },
                   "Why the build stopped ('' unless it did): the tree is then built after the sort.")
      .def_prop_ro("seconds_count", [](const bindings::StreamedBuildBox& b) { return b.get().seconds_count(); })
      .def_prop_ro("seconds_build", [](const bindings::StreamedBuildBox& b) { return b.get().seconds_build(); })
      .def_prop_ro("charged", [](const bindings::StreamedBuildBox& b) { return b.get().charged(); },
                   "Bytes of the budget it took during the sort's permute.");

  nb::class_<PagedTreeBox>(m, "PagedTree")
      .def("__init__",
           [](PagedTreeBox* self, bindings::StoreBox& box, double eps, double G, double theta, bool quadrupole,
              double quad_tol, int n_leaf, int n_crit, int threads, const std::string& precision,
              bool local_expansion, const std::string& isa, std::uint64_t keep_free, const std::string& backend,
              bindings::StreamedBuildBox* built) {
             const TreeParams p = params_from(eps, G, theta, quadrupole, quad_tol, n_leaf, n_crit, 0.0, threads,
                                              precision, local_expansion, isa, backend);
             nb::gil_scoped_release release;
             if (built != nullptr)
               new (self) PagedTreeBox(box, p, keep_free, built->get().take(p));
             else
               new (self) PagedTreeBox(box, p, keep_free);
           },
           nb::arg("store"), nb::arg("eps"), nb::arg("G"), nb::arg("theta"), nb::arg("quadrupole"),
           nb::arg("quad_tol"), nb::arg("n_leaf"), nb::arg("n_crit"), nb::arg("threads"), nb::arg("precision"),
           nb::arg("local_expansion"), nb::arg("isa") = "auto", nb::arg("keep_free") = 0, nb::arg("backend") = "cpu",
           nb::arg("built").none() = nb::none(), nb::keep_alive<1, 2>(),
           "The out-of-core tree over the store's sorted particles; built (a StreamedTreeBuild that a sort "
           "completed): its cells, taken, instead of a build of its own.")
      .def("self_forces",
           [](PagedTreeBox& t, const std::string& acc_field, const std::string& pot_field) {
             nb::gil_scoped_release release;
             t.get().self_forces(acc_field, pot_field);
           },
           nb::arg("acc_field") = "acc", nb::arg("pot_field") = "pot",
           "Self-gravity into the store's fields (an empty acc_field: the potentials alone).")
      .def_prop_ro("cell_count", [](const PagedTreeBox& t) { return t.get().cell_count(); })
      .def_prop_ro("cell_cache_bytes", [](const PagedTreeBox& t) { return t.get().cell_cache_bytes(); })
      .def_prop_ro("copy_peak_bytes", [](const PagedTreeBox& t) { return t.get().copy_peak_bytes(); },
                   "the most bytes one thread's copied particle blocks held at once in the last walk")
      .def("cell_counters", [](const PagedTreeBox& t) { return bindings::counters_dict(t.get().cell_counters()); })
      .def_prop_rw(
          "prefetch_runs", [](const PagedTreeBox& t) { return t.get().prefetch_runs(); },
          [](PagedTreeBox& t, int runs) { t.get().set_prefetch_runs(runs); },
          "Runs of groups a thread whose pages the walk loads ahead of the threads (0: off); I/O only. Default 4, or 0 "
          "when the scratch file is in memory (tmpfs: no latency to hide).")
      .def_prop_ro("isa", [](const PagedTreeBox& t) { return isa_name(t.get().isa()); })
      .def("stats", [](const PagedTreeBox& t) { return tree_stats_dict(t.get().stats()); });
  m.def("paged_tree_copy_allowance", &PagedTree::copy_allowance, nb::arg("n_crit"), nb::arg("n_leaf"),
        "bytes of particle blocks one thread holds copied out of the pages at most (the budget plans them)");
  m.def("paged_tree_least_bytes", &PagedTree::least_bytes, nb::arg("cells"), nb::arg("groups"),
        nb::arg("page_bytes"), nb::arg("threads"));

  nb::class_<TreeForceProvider, ForceProvider>(m, "TreeForceProvider")
      .def("__init__",
           [](TreeForceProvider* self, double eps, double G, double theta, bool quadrupole, double quad_tol,
              int n_leaf, int n_crit, double alpha, int threads, const std::string& precision,
              const std::string& isa, const std::string& backend, int device) {
             new (self) TreeForceProvider(params_from(eps, G, theta, quadrupole, quad_tol, n_leaf, n_crit, alpha,
                                                      threads, precision, true, isa, backend, device));
           },
           nb::arg("eps"), nb::arg("G"), nb::arg("theta"), nb::arg("quadrupole"),
           nb::arg("quad_tol"), nb::arg("n_leaf"),
           nb::arg("n_crit"), nb::arg("alpha"), nb::arg("threads"), nb::arg("precision"),
           nb::arg("isa") = "auto", nb::arg("backend") = "cpu", nb::arg("device") = 0)
      .def("set_j",
           [](TreeForceProvider& p, CVec3 pos, CScalars mass, std::optional<CVec3> vel) {
             p.set_j(span_of(pos), span_of(mass), span_of(vel));
           },
           nb::arg("pos"), nb::arg("mass"), nb::arg("vel").none(), nb::call_guard<nb::gil_scoped_release>(),
           "Build the tree of a new j-set (in the last tree's arrays).")
      .def("forces",
           [](TreeForceProvider& p, CVec3 pos_i, std::optional<Indices> exclude, Vec3Out acc, ScalarsOut pot) {
             p.forces({span_of(pos_i), {}, span_of(exclude), span_of(acc), span_of(pot), {}});
           },
           nb::arg("pos_i"), nb::arg("exclude").none(), nb::arg("acc"), nb::arg("pot"),
           nb::call_guard<nb::gil_scoped_release>(),
           "Forces on pos_i; the j-set itself with exclude = own index is self-gravity.")
      .def_prop_ro("isa", [](const TreeForceProvider& p) { return isa_name(p.isa()); })
      .def_prop_ro("precision", [](const TreeForceProvider& p) { return precision_name(p.precision()); })
      .def("tree_stats", [](const TreeForceProvider& p) { return tree_stats_dict(p.tree_stats()); })
      .def_prop_ro("frame", [](const TreeForceProvider& p) -> std::optional<std::tuple<std::array<double, 3>, double>> {
        const std::optional<CurveBox> f = p.frame();
        if (!f) return std::nullopt;
        return std::make_tuple(std::array<double, 3>{f->lo[0], f->lo[1], f->lo[2]}, f->scale);
      });
  bind_domain_tree(m);
}
